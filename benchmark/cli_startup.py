"""How long the torch-free commands take from the command line: `mstar config show` and the
model-aware preflight (`mstar config validate --model DIR`).

    .venv/bin/python -m benchmark.cli_startup [--repeats N]

The tests assert the cause of their speed (neither imports torch, transformers nor Ray); this
times them. Prints the median and the slowest of N runs after one warm-up, in seconds; both
stayed under a second on an idle machine (1.2-1.7 s on one loaded with a parallel test run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A Llama config small enough to read instantly, with a 512-token limit that the preflight checks.
_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 3,
           "max_position_embeddings": 512}


def _seconds(argv: list[str], repeats: int) -> list[float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    command = [sys.executable, "-m", "mstar", *argv]
    subprocess.run(command, env=env, capture_output=True, check=False)  # warm the file cache
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(command, env=env, capture_output=True, check=False)
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as model:
        (Path(model) / "config.json").write_text(json.dumps(_CONFIG))
        commands = {"config show": ["config", "show"],
                    "preflight": ["config", "validate", "--model", model]}
        for name, argv in commands.items():
            times = _seconds(argv, args.repeats)
            print(f"{name:12s} median {statistics.median(times):.3f} s  slowest {max(times):.3f} s")


if __name__ == "__main__":
    main()

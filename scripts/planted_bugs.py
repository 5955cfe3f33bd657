"""Plant the three KV/scheduler bugs that once survived the suite, one at a time, and check that
the property tests fail on each (issue 19); the clean tree must pass. Restores every file.

    .venv/bin/python scripts/planted_bugs.py      # about 5 minutes on 2 cores
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ["test/engine/test_kv_properties.py", "test/engine/test_engine_scheduler.py"]
BLOCKS = "mstar/engine/kv/block_manager.py"
SCHEDULER = "mstar/engine/schedule/scheduler.py"

# (what it breaks, file, text, replacement)
BUGS = [
    ("a prefix hit on a free block leaves it in the free pool", BLOCKS,
     "            if block.ref_count == 0:\n                del self.free[block_id]\n", ""),
    ("chain_hash ignores the previous block's hash", BLOCKS,
     "return hash((prev_hash, token_ids, images) if images else (prev_hash, token_ids))",
     "return hash((None, token_ids, images) if images else (None, token_ids))"),
    ("a preempted request is re-queued at the back", SCHEDULER,
     "        self.waiting.appendleft(seq)\n        self.num_preemptions += 1",
     "        self.waiting.append(seq)\n        self.num_preemptions += 1"),
]


def tests_pass() -> bool:
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True).returncode == 0


def main() -> int:
    caught = 0
    for what, rel, text, planted in BUGS:
        path = ROOT / rel
        original = path.read_text()
        if original.count(text) != 1:
            print(f"cannot plant {what!r}: the code changed ({rel})")
            return 2
        try:
            path.write_text(original.replace(text, planted))
            failed = not tests_pass()
        finally:
            path.write_text(original)
        caught += failed
        print(f"{'caught' if failed else 'SURVIVED'}: {what}", flush=True)
    clean = tests_pass()
    print(f"clean tree: {'passes' if clean else 'FAILS'}")
    return 0 if caught == len(BUGS) and clean else 1


if __name__ == "__main__":
    sys.exit(main())

"""Project invariants that code review alone would miss."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mstar"


def _reads_mstar_env(tree: ast.AST) -> list[int]:
    """Line numbers of os.environ/os.getenv uses whose expression mentions an MSTAR_ string."""
    lines = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Subscript):
            target = node.value
        elif isinstance(node, ast.Call):
            target = node.func
        if target is None or "environ" not in ast.unparse(target) and "getenv" not in ast.unparse(
                target):
            continue
        if "MSTAR_" in ast.unparse(node):
            lines.append(node.lineno)
    return lines


def test_no_module_outside_settings_reads_an_mstar_variable():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if PACKAGE / "settings" in path.parents:
            continue
        for line in _reads_mstar_env(ast.parse(path.read_text(), filename=str(path))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}")
    assert offenders == [], "read MSTAR_* only in mstar/settings: " + ", ".join(offenders)


def test_the_check_catches_a_direct_read():
    source = "import os\nx = os.environ.get('MSTAR_PORT')\ny = os.getenv('MSTAR_SEED', '1')\n"
    assert _reads_mstar_env(ast.parse(source)) == [2, 3]


def test_every_test_module_is_in_the_suite_list():
    """scripts/test.sh (and CI) runs the modules listed in test/cpu-core.txt, and only those: a
    module left out of the list never runs."""
    tests = Path(__file__).resolve().parent
    listed = {line.strip() for line in (tests / "cpu-core.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")}
    found = {str(p.relative_to(tests.parent)) for p in tests.rglob("test_*.py")}
    assert sorted(found - listed) == []
    assert sorted(listed - found) == []

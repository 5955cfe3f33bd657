"""Packages import only downward: a module may import its own part of mstar or a lower one."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mstar"

# Lowest first. ``llm`` (the offline API) sits on the engine and ``output`` (token ids -> text);
# ``kernels`` under the models.
LAYERS = ("settings", "logging_setup", "kernels", "models", "engine", "output", "llm", "ipc", "worker",
          "conductor", "api_server", "cli")
ENTRY_MODULES = ("__init__", "__main__")  # the package's own entry points may import anything


def _part(module: str) -> str | None:
    bits = module.split(".")
    return bits[1] if len(bits) > 1 and bits[0] == "mstar" else None


def _imports(path: Path) -> list[tuple[str, int]]:
    """(imported module, line) for every import in a file, relative ones resolved."""
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module.rsplit(".", 1)[0] if path.name != "__init__.py" else module
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.append((".".join(base + ([node.module] if node.module else [])), node.lineno))
            elif node.module:
                found.append((node.module, node.lineno))
    return found


def upward_imports(edges: list[tuple[str, str, str]]) -> list[str]:
    """Edges (from part, to part, where) that go up the layers or leave them."""
    rank = {name: i for i, name in enumerate(LAYERS)}
    bad = []
    for src, dst, where in edges:
        if src not in rank or dst not in rank:
            bad.append(f"{where}: {src} -> {dst} (a part not in LAYERS)")
        elif rank[dst] > rank[src]:
            bad.append(f"{where}: {src} imports {dst}, which sits above it")
    return bad


def _edges() -> list[tuple[str, str, str]]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = _part(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if src is None or src in ENTRY_MODULES:
            continue
        for target, line in _imports(path):
            dst = _part(target)
            if dst is not None and dst != src:
                edges.append((src, dst, f"{path.relative_to(PACKAGE.parent)}:{line}"))
    return edges


def test_packages_import_only_downward():
    edges = _edges()
    assert edges, "the import scan found nothing: it is broken"
    assert upward_imports(edges) == []


def test_the_check_catches_an_upward_import_and_an_unknown_part():
    edges = [("engine", "models", "a.py:1"), ("engine", "worker", "b.py:2"),
             ("ipc", "mystery", "c.py:3")]
    assert upward_imports(edges) == ["b.py:2: engine imports worker, which sits above it",
                                     "c.py:3: ipc -> mystery (a part not in LAYERS)"]

"""Packages import only downward: a module may import its own part of mstar or a lower one; the
API server's sub-packages do the same among themselves; and no module imports itself in a circle
(a cycle of imports anywhere in mstar, inside one part too, fails)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "mstar"

# Lowest first. ``llm`` (the offline API) sits on the engine and ``output`` (token ids -> text);
# ``kernels`` under the models.
# ``prompt`` (the prompt value and the OpenAI-message media parsing) above the models whose
# inputs it carries, below everything that carries it.
LAYERS = ("settings", "logging_setup", "kernels", "graph", "models", "engine", "output", "prompt",
          "llm", "ipc", "worker", "conductor", "api_server", "cli")
# mstar.api_server's sub-packages, lowest first: ``context`` (the running settings, the served
# model, admission, metrics), ``http`` (errors, OpenAPI, middleware, SSE framing), the pieces the
# APIs share, ``generation`` (prompts, sub-requests, their run: no API's shapes), ``validation``,
# then the APIs, then ``ui`` (the browser pages and the Grafana dashboard). The modules directly in
# api_server (``app``, ``server``, ``reload``) are the composition root, above every sub-package.
API_SERVER = "api_server"
API_SERVER_LAYERS = ("context", "http", "media", "tools", "reasoning", "generation", "validation",
                     "openai", "anthropic", "responses", "native", "scoring", "audio", "ui",
                     "(root)")
ENTRY_MODULES = ("__init__", "__main__")  # the package's own entry points may import anything


def _part(module: str) -> str | None:
    bits = module.split(".")
    return bits[1] if len(bits) > 1 and bits[0] == "mstar" else None


def _api_server_part(module: str) -> str | None:
    """The api_server sub-package a module is in, ``(root)`` for the modules directly in
    api_server, None outside api_server."""
    bits = module.split(".")
    if bits[:2] != ["mstar", API_SERVER]:
        return None
    if len(bits) > 3 or (len(bits) == 3 and (PACKAGE / API_SERVER / bits[2]).is_dir()):
        return bits[2]
    return "(root)"


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


def upward_imports(edges: list[tuple[str, str, str]],
                   layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Edges (from part, to part, where) that go up the layers or leave them."""
    rank = {name: i for i, name in enumerate(layers)}
    bad = []
    for src, dst, where in edges:
        if src not in rank or dst not in rank:
            bad.append(f"{where}: {src} -> {dst} (a part not in LAYERS)")
        elif rank[dst] > rank[src]:
            bad.append(f"{where}: {src} imports {dst}, which sits above it")
    return bad


def _edges(part=_part, skip: tuple[str, ...] = ENTRY_MODULES) -> list[tuple[str, str, str]]:
    edges = []
    for path in sorted(PACKAGE.rglob("*.py")):
        src = part(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
        if src is None or src in skip:
            continue
        for target, line in _imports(path):
            dst = part(target)
            if dst is not None and dst != src:
                edges.append((src, dst, f"{path.relative_to(PACKAGE.parent)}:{line}"))
    return edges


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_graph() -> dict[str, set[str]]:
    """Each module of mstar -> the modules of mstar it imports (anywhere in the file: a lazy or a
    type-checking import is a dependency too). ``from package import name`` is an edge to the
    module ``package.name`` when there is one, else to the package."""
    paths = {_module(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found = set()
        for target, _ in _imports(path):
            found.add(target if target in paths else target.rsplit(".", 1)[0])
        graph[module] = {t for t in found if t in paths and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph``: each strongly connected set of more than one module
    (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_packages_import_only_downward():
    edges = _edges()
    assert edges, "the import scan found nothing: it is broken"
    assert upward_imports(edges) == []


def test_the_check_catches_an_upward_import_and_an_unknown_part():
    edges = [("engine", "models", "a.py:1"), ("engine", "worker", "b.py:2"),
             ("ipc", "mystery", "c.py:3")]
    assert upward_imports(edges) == ["b.py:2: engine imports worker, which sits above it",
                                     "c.py:3: ipc -> mystery (a part not in LAYERS)"]


def test_api_server_sub_packages_import_only_downward():
    edges = _edges(_api_server_part, skip=())
    assert {src for src, _, _ in edges} >= {"http", "generation", "openai"}, "the scan is broken"
    assert upward_imports(edges, API_SERVER_LAYERS) == []


def test_the_check_catches_an_upward_import_between_api_server_sub_packages():
    edges = [("openai", "generation", "a.py:1"), ("generation", "openai", "b.py:2"),
             ("http", "(root)", "c.py:3")]
    assert upward_imports(edges, API_SERVER_LAYERS) == [
        "b.py:2: generation imports openai, which sits above it",
        "c.py:3: http imports (root), which sits above it"]


def test_no_module_imports_itself_in_a_circle():
    graph = module_graph()
    assert len(graph) > 100 and any(graph.values()), "the module scan found nothing"
    assert cycles(graph) == []


def test_the_check_catches_a_planted_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": {"e"},
             "f": {"a"}}
    assert cycles(graph) == [["a", "b", "c"], ["e", "e2"]]
    graph["d"] = {"f"}  # d -> f -> a -> b -> c -> d: one circle of five
    assert cycles(graph) == [["a", "b", "c", "d", "f"], ["e", "e2"]]

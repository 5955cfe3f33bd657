"""``helm template`` for the mstar chart where no helm binary can be installed (none comes from the
package registries CI reaches): the subset of Go templates and Sprig the chart uses, with Helm's
semantics where they matter (values numbers are float64, so 1e8 prints as ``1e+08``; map ranges go
in key order; ``{{-``/``-}}`` trim whitespace). Anything outside the subset raises, so a chart
edit that needs more fails the test here instead of rendering differently; with a helm binary on
PATH, test_helm_chart compares this renderer's output with helm's own.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml
from helm_parse import args_of, parse, split


def _go_text(value: Any) -> str:
    """Go's %v, as Helm's ``toString`` prints values."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def _go_float(value: float) -> str:
    """strconv's shortest 'g': exponent form below 1e-4 and from 1e6 up (``1e+08``)."""
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(value)).normalize().as_tuple()
    text = "".join(map(str, digits))
    power = len(text) + exponent - 1  # of the first digit
    if -4 <= power < 6:
        return ("-" if sign else "") + format(Decimal(repr(value)).normalize(), "f")
    mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
    return f"{'-' if sign else ''}{mantissa}e{power:+03d}"


def _truthy(value: Any) -> bool:
    return bool(value) if value is not None else False


def _kind(value: Any) -> str:
    for kind, types in (("invalid", type(None)), ("bool", bool), ("float64", float),
                        ("int", int), ("string", str), ("slice", list), ("map", dict)):
        if isinstance(value, types):
            return kind
    raise TypeError(value)


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(_ints(value), default_flow_style=False, sort_keys=True).rstrip("\n")


def _ints(value: Any) -> Any:
    """Whole float64s as integers, as Helm's toYaml (through JSON) writes them."""
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return int(value) if isinstance(value, float) and value.is_integer() else value


FUNCS = {
    "quote": lambda v: json.dumps(_go_text(v), ensure_ascii=False),
    "toString": _go_text,
    "toYaml": _to_yaml,
    "nindent": lambda n, s: "\n" + "\n".join(" " * int(n) + line for line in s.split("\n")),
    "join": lambda sep, items: sep.join(_go_text(i) for i in items),
    "kindIs": lambda kind, v: _kind(v) == kind,
    "not": lambda v: not _truthy(v),
    "eq": lambda a, b: a == b,
    "int64": int,
    "float64": float,
    "mul": lambda a, b: int(a) * int(b),
    "printf": lambda fmt, *args: fmt.replace("%s", "{}").format(*map(_go_text, args)),
    "trunc": lambda n, s: s[:int(n)],
    "trimSuffix": lambda suffix, s: s[:-len(suffix)] if suffix and s.endswith(suffix) else s,
    "contains": lambda sub, s: sub in s,
}


class Renderer:
    def __init__(self, chart: Path, values: dict[str, Any], release: str = "demo"):
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        self.chart = chart
        self.root = {"Values": _floats(values), "Release": {"Name": release, "Service": "Helm"},
                     "Chart": {"Name": meta["name"], "Version": meta["version"],
                               "AppVersion": meta["appVersion"]}}
        self.defines: dict[str, list] = {}
        for path in sorted((chart / "templates").glob("_*.tpl")):
            self._run(parse(path.read_text()), self.root, {})  # collects the defines

    def render(self) -> dict[str, str]:
        """Template name -> its text, for every manifest and NOTES.txt."""
        return {p.name: self._run(parse(p.read_text()), self.root, {})
                for p in sorted((self.chart / "templates").iterdir()) if not p.name.startswith("_")}

    def _run(self, nodes: list, dot: Any, scope: dict[str, Any]) -> str:
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "expr":
                out.append(_go_text(self._eval(node[1], dot, scope)))
            elif kind == "define":
                self.defines[node[1]] = node[2]
            elif kind == "if":
                out.append(self._branch(node[1], node[2], dot, scope))
            elif kind == "with":
                value = self._eval(node[1], dot, scope)
                out.append(self._run(node[2], value, scope) if _truthy(value) else "")
            elif kind == "range":
                keys, tokens, body = node[1], node[2], node[3]
                mapping = self._eval(tokens, dot, scope) or {}
                for key in sorted(mapping):
                    out.append(self._run(body, mapping[key], {**scope, keys[0]: key,
                                                              keys[1]: mapping[key]}))
        return "".join(out)

    def _branch(self, arms: list, otherwise: list, dot: Any, scope: dict[str, Any]) -> str:
        for tokens, body in arms:
            if _truthy(self._eval(tokens, dot, scope)):
                return self._run(body, dot, scope)
        return self._run(otherwise, dot, scope)

    def _eval(self, tokens: list[str], dot: Any, scope: dict[str, Any]) -> Any:
        stages = split(tokens, "|")
        value = self._call(stages[0], dot, scope, ())
        for stage in stages[1:]:
            value = self._call(stage, dot, scope, (value,))
        return value

    def _call(self, tokens: list[str], dot: Any, scope: dict[str, Any], piped: tuple) -> Any:
        args = args_of(tokens)
        head = args[0]

        def value(arg: str | list) -> Any:
            if isinstance(arg, list):  # a parenthesized pipeline
                return self._eval(arg, dot, scope)
            return self._atom(arg, dot, scope)

        if head == "and":  # Go's and stops at the first false argument
            result: Any = True
            for arg in [*args[1:], *piped]:
                result = value(arg)
                if not _truthy(result):
                    break
            return result
        if isinstance(head, str) and (head in FUNCS or head == "include"):
            values = [value(a) for a in args[1:]] + list(piped)
            if head == "include":
                return self._run(self.defines[values[0]], values[1], {})
            return FUNCS[head](*values)
        if len(args) > 1 or piped:
            raise ValueError(f"not a function: {head}")
        return value(head)

    def _atom(self, token: str, dot: Any, scope: dict[str, Any]) -> Any:
        if token.startswith('"'):
            return json.loads(token)
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if token.startswith("$"):
            name, _, path = token.partition(".")
            return _walk(scope[name], path)
        if token.startswith("."):
            return _walk(dot, token[1:])
        raise ValueError(f"unsupported token {token!r}")


def _floats(value: Any) -> Any:
    """Values as Helm holds them: every number a float64."""
    if isinstance(value, dict):
        return {k: _floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_floats(v) for v in value]
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _walk(value: Any, path: str) -> Any:
    for part in filter(None, path.split(".")):
        value = value.get(part) if isinstance(value, dict) else None
    return value

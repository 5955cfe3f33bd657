"""A request's structured-output constraint: ``response_format`` or one ``guided_*`` extra.

At most one per request. Each becomes the engine's ``StructuredOutput``; one that passes a bound
of ``mstar.engine.structured.grammar_limits`` (size, nesting, enum entries, regex length, a ``$ref`` outside
the schema) or does not compile (an invalid JSON schema, regex or grammar) is a 400 naming the
field.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from mstar.api_server.http.errors import APIError
from mstar.api_server.openai.protocol import SamplingFields
from mstar.engine.request.sampling_params import StructuredOutput
from mstar.engine.structured.grammar_limits import GrammarLimits, check_constraint, check_size
from mstar.engine.structured.structured_output import check_structured_output

GUIDED = ("guided_json", "guided_regex", "guided_choice", "guided_grammar")


def _why(exc: BaseException) -> str:
    return "nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def _json_schema(schema: Any, param: str, limits: GrammarLimits) -> StructuredOutput:
    """A schema given as JSON text or as an object; its size is checked before it is parsed."""
    try:
        text = schema if isinstance(schema, str) else json.dumps(schema)
        check_size(text, limits)
        return StructuredOutput(kind="json_schema", spec=text)
    except (ValueError, RecursionError) as exc:
        raise APIError(400, f"invalid field '{param}': {_why(exc)}", param) from None


def _from_response_format(req: SamplingFields,
                          limits: GrammarLimits) -> tuple[StructuredOutput, str] | None:
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return StructuredOutput(kind="json_object"), "response_format"
    if fmt.json_schema is None:
        raise APIError(400, "response_format of type json_schema needs 'json_schema'",
                       "response_format.json_schema")
    schema = fmt.json_schema.json_schema
    if schema is None:
        return StructuredOutput(kind="json_object"), "response_format"
    param = "response_format.json_schema.schema"
    return _json_schema(schema, param, limits), param


def _from_guided(req: SamplingFields, name: str,
                 limits: GrammarLimits) -> tuple[StructuredOutput, str]:
    value = getattr(req, name)
    if name == "guided_json":
        return _json_schema(value, name, limits), name
    if name == "guided_choice":
        return StructuredOutput(kind="choice", choices=list(value)), name
    kind = "regex" if name == "guided_regex" else "grammar"
    return StructuredOutput(kind=kind, spec=value), name


def requested_constraints(req: SamplingFields,
                          limits: GrammarLimits) -> list[tuple[StructuredOutput, str]]:
    found = [c for c in [_from_response_format(req, limits)] if c is not None]
    return found + [_from_guided(req, name, limits) for name in GUIDED
                    if getattr(req, name) is not None]


def check_spec(spec: StructuredOutput, param: str, limits: GrammarLimits) -> None:
    """Keeps to ``limits`` and compiles to a grammar; else a 400 naming ``param``."""
    try:
        check_constraint(spec, limits)
        check_structured_output(spec)
    except (ValueError, RecursionError) as exc:
        raise APIError(400, f"invalid field '{param}': {_why(exc)}", param) from None


def checked_constraint(req: SamplingFields, limits: GrammarLimits) -> StructuredOutput | None:
    found = requested_constraints(req, limits)
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(param.split(".")[0] for _, param in found)
        raise APIError(400, f"only one structured-output constraint per request; got {names}",
                       found[1][1].split(".")[0])
    spec, param = found[0]
    check_spec(spec, param, limits)
    return spec


async def structured_output(req: SamplingFields, settings: Any) -> StructuredOutput | None:
    """The request's constraint, checked against the settings' bounds and compiled (in a worker
    thread: a megabyte of schema never stalls the event loop); None when free."""
    if req.response_format is None and all(getattr(req, name) is None for name in GUIDED):
        return None
    return await asyncio.to_thread(checked_constraint, req, GrammarLimits.from_settings(settings))

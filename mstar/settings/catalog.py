"""A flat, ordered description of every knob, derived from the schema.

Parsing, the CLI flags, ``mstar config show`` and the generated docs all read ``KNOBS`` so that none of
them can drift from the schema or from each other.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import SecretStr

from mstar.settings.knobs.admission import AdmissionKnobs
from mstar.settings.knobs.config import ConfigKnobs
from mstar.settings.knobs.engine import EngineKnobs
from mstar.settings.knobs.lora import LoraKnobs
from mstar.settings.knobs.media import MediaKnobs
from mstar.settings.knobs.models import ModelsKnobs
from mstar.settings.knobs.server import RequestLimitKnobs, ServerKnobs
from mstar.settings.knobs.speculative import SpeculativeKnobs
from mstar.settings.knobs.transport import TransportKnobs
from mstar.settings.knobs.worker_loop import WorkerLoopKnobs
from mstar.settings.reloadable import RELOADABLE
from mstar.settings.schema import WorkerSettings, env_name

GROUPS = (WorkerLoopKnobs, ServerKnobs, RequestLimitKnobs, EngineKnobs, SpeculativeKnobs, TransportKnobs,
          MediaKnobs, AdmissionKnobs, LoraKnobs, ModelsKnobs, ConfigKnobs)


class Kind(str, Enum):
    BOOL = "bool"
    INT = "int"
    FLOAT = "float"
    STR = "str"
    CHOICE = "choice"
    PATH = "path"
    SECRET = "secret"
    INT_LIST = "int list"


@dataclass(frozen=True)
class Knob:
    name: str                 # attribute name on WorkerSettings
    env: str                  # MSTAR_ name
    kind: Kind
    default: Any
    description: str
    category: str
    unit: str | None
    optional: bool            # None (unset) is a valid value
    minimum: float | None     # applies to each element for lists
    maximum: float | None
    min_exclusive: bool       # gt rather than ge: there is no minimum value to clamp to
    choices: tuple[str, ...] | None
    secret: bool
    security: bool            # problems are errors in every mode (see schema.knob)
    reloadable: bool          # applied on SIGHUP without a restart (see reloadable.py)
    auto: bool = False        # also takes the word "auto" (resolved where the knob is used)
    no_effect: str | None = None  # since when and why the knob does nothing (see schema.knob)


def _bounds(metadata: list[Any]) -> tuple[float | None, float | None, bool]:
    minimum = maximum = None
    exclusive = False
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            minimum = m.ge
        elif isinstance(m, annotated_types.Gt):
            minimum, exclusive = m.gt, True
        elif isinstance(m, annotated_types.Le):
            maximum = m.le
    return minimum, maximum, exclusive


def _is_auto_union(annotation: Any) -> bool:
    """``int | Literal["auto"]`` (bounds on the int): a number, or the word auto."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return False
    return any(typing.get_origin(a) is typing.Literal and typing.get_args(a) == ("auto",)
               for a in typing.get_args(annotation))


def _describe(name: str) -> Knob:
    field = WorkerSettings.model_fields[name]
    annotation = field.annotation
    args = typing.get_args(annotation)
    optional = isinstance(annotation, types.UnionType) and type(None) in args
    if optional:
        annotation = next(a for a in args if a is not type(None))
    metadata = list(field.metadata)
    auto = _is_auto_union(annotation)
    if auto:
        annotation = next(a for a in args if typing.get_origin(a) is not typing.Literal)
        annotation, *extras = typing.get_args(annotation) or (annotation,)
        metadata = [m for a in extras for m in a.metadata]
    choices = None
    if typing.get_origin(annotation) is typing.Literal:
        kind, choices = Kind.CHOICE, tuple(typing.get_args(annotation))
    elif typing.get_origin(annotation) is list:
        kind = Kind.INT_LIST
        element = typing.get_args(annotation)[0]
        metadata = [m for a in typing.get_args(element)[1:] for m in a.metadata]
    else:
        kind = {bool: Kind.BOOL, int: Kind.INT, float: Kind.FLOAT, str: Kind.STR,
                Path: Kind.PATH, SecretStr: Kind.SECRET}[annotation]
    minimum, maximum, exclusive = _bounds(metadata)
    extra = field.json_schema_extra or {}
    return Knob(name=name, env=env_name(name), kind=kind, default=field.default,
                description=field.description or "", category=extra["category"],
                unit=extra["unit"], optional=optional, minimum=minimum, maximum=maximum,
                min_exclusive=exclusive, choices=choices, secret=extra["secret"],
                security=extra["security"], reloadable=name in RELOADABLE, auto=auto,
                no_effect=extra.get("no_effect"))


KNOBS: tuple[Knob, ...] = tuple(_describe(n) for g in GROUPS for n in g.model_fields)
BY_ENV: dict[str, Knob] = {k.env: k for k in KNOBS}
BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}

"""Hypothesis strategies for well-formed messages of every type (``mstar.ipc.messages``): every
field of its type, values anywhere in what msgpack carries, small ones often (so that many
messages also fit an instance's bounds)."""

from __future__ import annotations

import typing
from typing import Any, Literal, Union

import msgspec
from hypothesis import reject
from hypothesis import strategies as st

from mstar.ipc import messages as m
from mstar.settings import WorkerSettings
from mstar.settings.reload import reloadable_values

INTS = st.one_of(st.integers(-2, 4), st.integers(-2**63, 2**63 - 1))
TEXT = st.text(max_size=24)
ANY = st.one_of(st.none(), st.booleans(), INTS, st.floats(), TEXT)
MESSAGE_TYPES = typing.get_args(m.Message)


def of_type(tp: Any) -> st.SearchStrategy:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return ANY
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return struct_of(tp)
    if origin is Literal:
        return st.sampled_from(args)
    if origin in (Union, getattr(__import__("types"), "UnionType", Union)):
        return st.one_of(*(of_type(a) for a in args))
    if origin is list:
        return st.lists(of_type(args[0]), max_size=6)
    if origin is tuple:
        return st.tuples(*(of_type(a) for a in args))
    if origin is dict:
        return st.dictionaries(of_type(args[0]), of_type(args[1]), max_size=4)
    return {int: INTS, float: st.floats(), str: TEXT, bool: st.booleans(),
            bytes: st.binary(max_size=48), type(None): st.none()}[tp]


@st.composite
def struct_of(draw, cls: type) -> msgspec.Struct:
    hints = typing.get_type_hints(cls)
    fields = {f.name: draw(of_type(hints[f.name])) for f in msgspec.structs.fields(cls)}
    try:
        return cls(**fields)
    except (ValueError, TypeError):  # SamplingParams refuses what it would refuse on the wire:
        pass
    required = {f.name for f in msgspec.structs.fields(cls) if f.required}
    kept = {name: fields[name] for name in required}  # keep each other random value it takes
    for name, value in fields.items():
        try:
            cls(**kept, **{name: value})
            kept[name] = value
        except (ValueError, TypeError):
            pass
    try:
        return cls(**kept)
    except (ValueError, TypeError):
        reject()


def reloads(settings: WorkerSettings) -> st.SearchStrategy:
    """Reloads of random knobs, and of exactly the reloadable ones with one random value."""
    valid = reloadable_values(settings)
    one_off = st.tuples(st.sampled_from(sorted(valid)), ANY).map(
        lambda kv: {**valid, kv[0]: kv[1]})
    values = st.one_of(st.dictionaries(TEXT, ANY, max_size=4), one_off)
    return st.builds(m.ReloadSettings, values=values, fingerprint=TEXT)


def messages(settings: WorkerSettings, types: tuple[type, ...] = MESSAGE_TYPES) -> st.SearchStrategy:
    """Any message of ``types``, well-formed: it encodes, and decodes to itself."""
    return st.one_of(*(reloads(settings) if t is m.ReloadSettings else struct_of(t)
                       for t in types)).filter(_encodes)


def _encodes(msg: m.Message) -> bool:
    try:
        return m.decode(m.encode(msg)) is not None
    except (OverflowError, msgspec.ValidationError):
        return False

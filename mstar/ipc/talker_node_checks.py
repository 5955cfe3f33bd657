"""The messages between a worker and its talker process (MSTAR_ENCODER_PLACEMENT
``talker=process``), checked on arrival like every other: request ids are short text, rows are
the bytes their shape says, counts are not negative. The talker's outputs are checked as the
worker's own are (``inbox_checks.check_talker_outputs``)."""

from __future__ import annotations

from mstar.ipc import messages as m
from mstar.ipc.check_rules import MAX_ID_CHARS, Invalid, count, member, text
from mstar.ipc.part_checks import check_tensor


def _rows(tensor, dims: int, where: str) -> None:
    """Rows of ``dims`` dimensions (a feed's rows [n, H]; its pad row [H])."""
    check_tensor(tensor, where)
    member(len(tensor.shape), (dims,), f"{where}.shape")


def check_talker_add(msg: m.TalkerAdd, bounds) -> None:
    text(msg.request_id, "request_id", MAX_ID_CHARS)
    _rows(msg.prompt, 2, "prompt")
    _rows(msg.pad, 1, "pad")
    if msg.prompt.shape[1] != msg.pad.shape[0]:
        raise Invalid(f"prompt rows of width {msg.prompt.shape[1]}, pad of {msg.pad.shape[0]}")
    count(msg.params.max_tokens, "params.max_tokens")


def check_talker_rows(msg: m.TalkerRows, bounds) -> None:
    text(msg.request_id, "request_id", MAX_ID_CHARS)
    _rows(msg.rows, 2, "rows")


def check_talker_abort(msg: m.TalkerAbort, bounds) -> None:
    text(msg.request_id, "request_id", MAX_ID_CHARS)


def check_talker_ready(msg: m.TalkerReady, bounds) -> None:
    text(msg.device, "device")
    text(msg.dtype, "dtype")
    for name in ("max_model_len", "num_blocks", "block_size"):
        count(getattr(msg, name), name)


TALKER_NODE_CHECKS = {
    m.TalkerAdd: check_talker_add,
    m.TalkerRows: check_talker_rows,
    m.TalkerAbort: check_talker_abort,
    m.TalkerReady: check_talker_ready,
}

"""The messages between a worker and its encoder-node process (MSTAR_ENCODER_PLACEMENT), checked
on arrival like every other: names are short text, tensors are the bytes their shape says."""

from __future__ import annotations

from mstar.ipc import messages as m
from mstar.ipc.check_rules import count, text
from mstar.ipc.part_checks import check_tensor, check_tensors


def check_encode_request(msg: m.EncodeRequest, bounds) -> None:
    count(msg.call, "call")
    check_tensors(msg.tensors, "tensors")


def check_encoded_output(msg: m.EncodedOutput, bounds) -> None:
    count(msg.call, "call")
    check_tensor(msg.output, "output")


def check_encoder_node_ready(msg: m.EncoderNodeReady, bounds) -> None:
    text(msg.node, "node")


ENCODER_NODE_CHECKS = {
    m.EncodeRequest: check_encode_request,
    m.EncodedOutput: check_encoded_output,
    m.EncoderNodeReady: check_encoder_node_ready,
}

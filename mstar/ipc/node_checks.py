"""The messages between a worker and its node processes (MSTAR_ENCODER_PLACEMENT: encoder and
codec nodes), checked on arrival like every other: names are short text, tensors are the bytes
their shape says, codes are non-negative, audio is whole float32 samples."""

from __future__ import annotations

from mstar.ipc import messages as m
from mstar.ipc.check_rules import MAX_ID_CHARS, Invalid, count, text, token_ids
from mstar.ipc.part_checks import check_tensor, check_tensors

CODE_LIMIT = 2**32  # a frame's codes are codebook entries (the node's model knows its sizes)


def check_encode_request(msg: m.EncodeRequest, bounds) -> None:
    count(msg.call, "call")
    check_tensors(msg.tensors, "tensors")


def check_encoded_output(msg: m.EncodedOutput, bounds) -> None:
    count(msg.call, "call")
    check_tensor(msg.output, "output")


def check_node_ready(msg: m.NodeReady, bounds) -> None:
    text(msg.node, "node")
    count(msg.sample_rate, "sample_rate")


def check_codec_frames(msg: m.CodecFrames, bounds) -> None:
    count(msg.call, "call")
    for request in msg.requests:
        text(request.request_id, "requests.request_id", MAX_ID_CHARS)
        if len({len(frame) for frame in request.frames}) > 1:
            raise Invalid("requests.frames differ in their number of codes")
        for frame in request.frames:
            token_ids(frame, CODE_LIMIT, "requests.frames")


def check_codec_forget(msg: m.CodecForget, bounds) -> None:
    count(msg.call, "call")
    for rid in msg.request_ids:
        text(rid, "request_ids", MAX_ID_CHARS)


def check_codec_audio(msg: m.CodecAudio, bounds) -> None:
    count(msg.call, "call")
    count(msg.held, "held")
    if any(len(chunk) % 4 for chunks in msg.chunks for chunk in chunks):
        raise Invalid("chunks are not whole float32 samples")


NODE_CHECKS = {
    m.EncodeRequest: check_encode_request,
    m.EncodedOutput: check_encoded_output,
    m.NodeReady: check_node_ready,
    m.CodecFrames: check_codec_frames,
    m.CodecForget: check_codec_forget,
    m.CodecAudio: check_codec_audio,
}

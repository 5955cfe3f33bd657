"""The walk graph's speech-out vocabulary (issue 35): several language models, a codec node after
one, streaming edges cut by a chunk policy, loops ended by a named finish signal, typed emits to
the client, and the KV blocks split between language-model nodes. Property tests for the rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mstar.graph import (
    ChunkPolicy,
    Edge,
    EdgeKind,
    Emit,
    Node,
    NodeKind,
    Walk,
    WalkGraph,
    every_token,
    frame_windows,
    text_only,
)
from mstar.graph.budgets import node_blocks, split_blocks
from mstar.graph.speech import CSM, codec_after, talker_alone, thinker_talker

LM, CODEC = NodeKind.LANGUAGE_MODEL, NodeKind.CODEC


def _stream(policy: ChunkPolicy, arrivals: list[int]) -> list:
    """Every window a stream sends as frames arrive in ``arrivals`` batches, then finishes."""
    sent = available = 0
    out = []
    for count, finished in [*((c, False) for c in arrivals), (0, True)]:
        available += count
        got = policy.windows(sent, available, finished)
        out += got
        sent = got[-1].end if got else sent
    return out


@given(st.integers(1, 9), st.integers(0, 9), st.lists(st.integers(0, 7), max_size=12))
def test_a_chunk_policy_covers_every_frame_once_with_its_left_context(n, left, arrivals):
    policy = frame_windows(n, left)
    windows = _stream(policy, arrivals)
    covered = [f for w in windows for f in range(w.start, w.end)]
    assert covered == list(range(sum(arrivals)))  # each frame once, in order
    for w in windows:
        assert w.context_start == max(0, w.start - left) and w.context == w.start - w.context_start
        assert w.end - w.context_start <= policy.held_frames  # the codec's per-request bound
    assert all(w.end - w.start == n for w in windows[:-1])  # only the last chunk is short


@given(st.integers(1, 9), st.integers(0, 40), st.integers(0, 40))
def test_no_window_goes_before_it_is_full_unless_the_source_finished(n, sent, more):
    policy = frame_windows(n, 2)
    assert len(policy.windows(sent, sent + more, finished=False)) == more // n
    assert len(policy.windows(sent, sent + more, finished=True)) == -(-more // n)


def test_chunk_policy_shapes_and_bounds():
    token = every_token()
    assert (token.frames, token.left_context, token.with_hidden) == (1, 0, True)
    assert [w.start for w in token.windows(0, 3, False)] == [0, 1, 2]
    with pytest.raises(ValueError, match="frames >= 1"):
        ChunkPolicy(0)
    with pytest.raises(ValueError, match="sent 5 frames of 3"):
        token.windows(5, 3, False)


NAMES = ("thinker", "talker", "code2wav", "ghost")


@given(st.lists(st.sampled_from(NAMES), min_size=1, max_size=6))
def test_a_walk_is_refused_when_a_node_it_needs_is_missing(names):
    good = thinker_talker()
    walk = Walk("w", tuple(names), finish="talker" if "talker" in names else None)
    if "ghost" in names:
        with pytest.raises(ValueError, match="needs ghost, which the graph lacks"):
            WalkGraph(good.nodes, good.edges, (walk,), good.emits)
        return
    try:
        WalkGraph(good.nodes, good.edges, (walk,), good.emits)
    except ValueError as exc:  # refused for another rule, never for a missing node
        assert "lacks" not in str(exc)


def test_speech_graphs_hold_several_language_models_a_codec_and_emits():
    omni = thinker_talker()
    assert [n.name for n in omni.language_models] == ["thinker", "talker"]
    assert [n.name for n in omni.codecs] == ["code2wav"]
    assert omni.output_modalities() == ("text", "audio")
    assert omni.walk_emitting("audio").nodes == ("thinker", "talker", "code2wav")
    assert omni.walk_emitting("text").name == "text"
    assert omni.prefill_walk({"text"}).name == "text"
    assert omni.prefill_walk({"text", "audio"}).nodes == ("audio_encoder", "thinker")
    assert omni.modalities() == ("text", "audio")
    assert omni.edge_from("thinker").chunk.with_hidden
    # its engine runs the thinker, whose tokens are text (the chain runs the talker beside it)
    assert omni.language_model.name == "thinker" and not omni.speaks_frames
    assert codec_after() == CSM and CSM.language_model.name == "backbone" and CSM.speaks_frames
    assert talker_alone().language_model.name == "talker" and talker_alone().speaks_frames
    assert not text_only().speaks_frames
    assert CSM.output_modalities() == ("audio",) and CSM.walk("speak").finish == "backbone"
    assert text_only().output_modalities() == ("text",)
    with pytest.raises(ValueError, match="outputs text; not audio"):
        text_only().walk_emitting("audio")


def _graph(edges, walks=(), emits=(Emit("lm", "text"),), codec_kind=CODEC):
    return WalkGraph((Node("lm", LM), Node("c", codec_kind)), tuple(edges), tuple(walks),
                     tuple(emits))


def test_each_speech_rule_refuses_by_name():
    stream = Edge("codes", "lm", "c", EdgeKind.STREAM, frame_windows(2, 1))
    ok = _graph([stream], [Walk("s", ("lm", "c"), finish="lm")], [Emit("c", "audio")])
    assert ok.codecs[0].name == "c"
    cases = [
        ([Edge("codes", "lm", "c", EdgeKind.STREAM)], (), (), "chunk policy goes with"),
        ([Edge("codes", "lm", "c", chunk=every_token())], (), (), "chunk policy goes with"),
        ([Edge("codes", "lm", "c")], (), (), "codec node c must be fed by streaming"),
        ([], (), (), "codec node c must be fed by streaming"),
        ([stream, Edge("back", "c", "lm")], [Walk("s", ("lm", "c", "lm", "c"))], (),
         "loops with no finish signal"),
        ([stream], [Walk("s", ("lm", "c"), finish="c")], (), "finishes at c"),
        ([stream], (), [Emit("lm", "audio")], "audio reaches the client from lm"),
        ([stream], (), [Emit("c", "text")], "text reaches the client from c"),
        ([stream], (), [Emit("c", "video")], "carries 'video'"),
    ]
    for edges, walks, emits, message in cases:
        with pytest.raises(ValueError, match=message):
            _graph(edges, walks, emits or (Emit("lm", "text"),))
    with pytest.raises(ValueError, match="starts at c, not a language model"):
        _graph([stream, Edge("x", "c", "lm", EdgeKind.STREAM, every_token())])
    looped = _graph([stream, Edge("back", "c", "lm")],
                    [Walk("s", ("lm", "c", "lm", "c"), finish="lm")])
    assert looped.walk("s").finish == "lm"


@given(st.integers(0, 5000), st.lists(st.floats(0, 10), min_size=1, max_size=5))
def test_kv_blocks_split_by_share_sum_to_the_whole(total, share_list):
    shares = {f"n{i}": s for i, s in enumerate(share_list)}
    if not any(shares.values()):
        with pytest.raises(ValueError, match="cannot split"):
            split_blocks(total, shares)
        return
    parts = split_blocks(total, shares)
    assert sum(parts.values()) == total and min(parts.values()) >= 0
    assert all(parts[n] == 0 for n, s in shares.items() if s == 0)
    if total >= sum(1 for s in shares.values() if s > 0):
        assert all(parts[n] >= 1 for n, s in shares.items() if s > 0)


def test_node_blocks_give_a_single_language_model_everything():
    assert node_blocks(text_only(), 123) == {"language_model": 123}
    assert node_blocks(thinker_talker(), 100, {"talker": 1, "thinker": 3}) == {
        "thinker": 75, "talker": 25}
    assert node_blocks(thinker_talker(), 9) == {"thinker": 5, "talker": 4}
    with pytest.raises(ValueError, match="name code2wav, not a language-model node"):
        node_blocks(thinker_talker(), 9, {"code2wav": 1})

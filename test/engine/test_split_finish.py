"""``split_finish``: a finishing output as its text now and its finish later (the chained speech
walk sends a spoken reply's last text when the thinker ends, its finish with the last audio).
Property: joined back with ``merged``, the two parts are the output; the first part is never
finished and holds no stop token; the second holds the finish and at most that one token."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mstar.engine.request.outputs import RequestOutput, TokenLogprob, merged, split_finish

tokens = st.lists(st.integers(0, 1000), max_size=6)


@st.composite
def finishing_outputs(draw) -> RequestOutput:
    ids = draw(tokens)
    with_logprobs = draw(st.booleans())
    return RequestOutput(
        "r", new_token_ids=ids, finished=True,
        finish_reason=draw(st.sampled_from(["stop", "length", "abort"])),
        num_prompt_tokens=3, num_output_tokens=len(ids) + draw(st.integers(0, 50)),
        logprobs=[TokenLogprob(t, -0.5) for t in ids] if with_logprobs else None)


@given(finishing_outputs())
def test_the_parts_join_to_the_output(out):
    now, later = split_finish(out)
    assert later.finished and later.finish_reason == out.finish_reason
    assert later.num_output_tokens == out.num_output_tokens
    if now is None:
        assert later == out
        return
    assert not now.finished and now.finish_reason is None
    assert now.num_output_tokens == out.num_output_tokens - len(later.new_token_ids)
    held = out.new_token_ids[-1:] if out.finish_reason == "stop" else []
    assert later.new_token_ids == held  # the stop token ended the text: it is not text
    assert merged(now, later) == out

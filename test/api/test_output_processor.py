"""The output path above the engine: text from token ids, stop strings, coalescing, token bytes."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.api_server.openai.formatting import (
    TextOffsets,
    chat_logprobs,
    coalesce,
    completion_logprobs,
)
from mstar.engine.request.outputs import RequestOutput, TokenLogprob
from mstar.engine.request.sampling_params import SamplingParams
from mstar.output.detokenizer import text_of
from mstar.output.processor import RequestText, TextOutput, ends_in_engine
from mstar.output.token_bytes import TokenBytes

TEXT = "Hello there, 你好 😀 world and more words"


async def _items(outputs):
    for out in outputs:
        yield 0, out


def _coalesced(outputs, interval):
    async def collect():
        return [out async for _, out in coalesce(_items(outputs), interval)]
    return asyncio.run(collect())


def test_coalescing_keeps_every_field_of_the_last_output():
    outs = [TextOutput("r", [5], num_prompt_tokens=9, num_output_tokens=1,
                       logprobs=[TokenLogprob(5, -0.5)], num_cached_tokens=4, new_text="a"),
            TextOutput("r", [6], finished=True, finish_reason="length", num_prompt_tokens=9,
                       num_output_tokens=2, logprobs=[TokenLogprob(6, -0.25)],
                       num_cached_tokens=4, new_text="b")]
    (merged,) = _coalesced(outs, 4)
    assert merged.new_token_ids == [5, 6] and merged.new_text == "ab"
    assert merged.num_cached_tokens == 4  # streamed usage reports the prefix-cache hits
    assert merged.finished and merged.finish_reason == "length"
    assert [e.token_id for e in merged.logprobs] == [5, 6]
    assert (merged.num_prompt_tokens, merged.num_output_tokens) == (9, 2)


def _outputs(ids: list[int], per_output: int) -> list[RequestOutput]:
    chunks = [ids[k:k + per_output] for k in range(0, len(ids), per_output)]
    return [RequestOutput("r", chunk, finished=k == len(chunks) - 1,
                          finish_reason="length" if k == len(chunks) - 1 else None,
                          num_output_tokens=sum(map(len, chunks[:k + 1])))
            for k, chunk in enumerate(chunks)]


def _run(tokenizer, ids, stop, per_output):
    request = RequestText(tokenizer, [], SamplingParams(stop=stop, max_tokens=100))
    texts, aborts = [], 0
    for out in _outputs(ids, per_output):
        text = request.to_text(out)
        if text is not None:
            texts.append(text)
            aborts += ends_in_engine(text, out)
    return texts, aborts


@pytest.mark.parametrize("per_output", [1, 3, 50])
def test_text_without_stop_strings_is_the_whole_decode(tiny_tokenizer, per_output):
    ids = tiny_tokenizer.encode(TEXT)
    texts, aborts = _run(tiny_tokenizer, ids, [], per_output)
    assert "".join(t.new_text for t in texts) == TEXT
    assert aborts == 0 and texts[-1].finish_reason == "length"


@pytest.mark.parametrize("per_output", [1, 2, 3, 50])
@pytest.mark.parametrize("stop", ["there", "😀", "d and m", "o"])
def test_a_stop_string_ends_the_text_before_it_and_aborts_once(tiny_tokenizer, stop, per_output):
    ids = tiny_tokenizer.encode(TEXT)
    texts, aborts = _run(tiny_tokenizer, ids, [stop, "never"], per_output)
    assert "".join(t.new_text for t in texts) == TEXT[:TEXT.find(stop)]
    assert texts[-1].finished and texts[-1].finish_reason == "stop"
    # The engine still ran it (unless the stop came in its last output): one abort, nothing after.
    assert aborts == (per_output < len(ids))
    kept = sum(len(t.new_token_ids) for t in texts)
    assert texts[-1].num_output_tokens == kept < len(ids)


def test_token_bytes_rebuild_text_with_partial_characters(tiny_tokenizer):
    vocab = TokenBytes(tiny_tokenizer)
    ids = tiny_tokenizer.encode(TEXT)
    assert b"".join(vocab.of(i) for i in ids) == TEXT.encode()
    shown = [vocab.shown(i) for i in ids]
    assert any(s.startswith("bytes:\\x") for s in shown)  # a piece of a character
    assert "\ufffd" not in "".join(shown)


def test_logprobs_show_exact_bytes_and_keep_every_top_entry(tiny_tokenizer):
    vocab = TokenBytes(tiny_tokenizer)
    ids = tiny_tokenizer.encode("😀")
    assert len(ids) > 1  # byte pieces in this vocabulary
    top = [(i, -1.0 - k) for k, i in enumerate(ids)]
    entries = [TokenLogprob(i, -0.5, top) for i in ids]
    chat = chat_logprobs(vocab, entries)["content"]
    assert bytes(b for c in chat for b in c["bytes"]) == "😀".encode()
    assert all(len(c["top_logprobs"]) == len(top) for c in chat)
    done = completion_logprobs(vocab, entries, TextOffsets())
    assert [len(d) for d in done["top_logprobs"]] == [len(top)] * len(ids)
    assert done["text_offset"] == [0] * len(ids)  # each piece starts where the emoji does


def test_equal_shown_tokens_never_collide_and_the_chosen_keeps_its_key():
    class Vocab:
        def shown(self, token_id):
            return "x"

    e = TokenLogprob(7, -0.25, [(3, -0.1), (7, -0.25), (9, -2.0)])
    from mstar.api_server.openai.formatting import top_logprobs_dict
    assert top_logprobs_dict(Vocab(), e) == {"x": -0.25, "x#3": -0.1, "x#9": -2.0}



@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 402), max_size=12))
def test_text_of_is_the_tokenizers_own_decode(tiny_tokenizer, ids):
    """Decoding in the Rust backend directly gives the text ``decode`` gives, special tokens
    skipped (0-2 are the tiny tokenizer's special tokens)."""
    assert text_of(tiny_tokenizer)(ids) == tiny_tokenizer.decode(ids, skip_special_tokens=True)


def test_a_tokenizer_that_decodes_its_own_way_is_decoded_its_way(tiny_tokenizer):
    class Timestamped(type(tiny_tokenizer)):  # like Whisper's: decode overridden
        def decode(self, token_ids, **kwargs):
            return "<|0.00|>" + super().decode(token_ids, **kwargs)

    own = Timestamped(tokenizer_object=tiny_tokenizer.backend_tokenizer)
    ids = tiny_tokenizer.encode(TEXT)
    assert text_of(own)(ids) == "<|0.00|>" + tiny_tokenizer.decode(ids, skip_special_tokens=True)

"""The rows Qwen3-Omni's talker reads, out of the engine (``SamplingParams.thinker_rows`` ->
``RequestOutput.thinker_rows``): each generated token's input embedding, and the hidden state
after ``accept_hidden_layer`` layers at the prompt's audio positions. ``talker_inputs`` built
from them (the prompt's text embeddings looked up in the thinker's table) equals the one built
from transformers' thinker ``generate`` (``OmniSpeaker.answer``'s rows), alone, batched with a
request that does not ask, and under preemption (the audio rows sent once)."""

from __future__ import annotations

import pytest
import torch
from alm_helpers import clip
from omni_chain_runs import reference_inputs, tts_rows
from omni_helpers import save_tiny_thinker, thinker_prompt

from mstar.engine.request.outputs import joined_rows
from mstar.engine.request.sampling_params import SamplingParams
from mstar.engine.runner.thinker_rows import rows_array
from mstar.models.speech.omni_speaker import OmniSpeaker
from mstar.models.speech.omni_talker_inputs import talker_inputs

MAX_NEW = 8
SPEAKER = "ethan"
# The hidden rows come out of mstar's decoder, not transformers': the same sums in other kernels
# (measured: within 1e-6); embeddings are the same table's rows.
TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def thinker_dir(tmp_path_factory, tiny_tokenizer):
    return save_tiny_thinker(tmp_path_factory.mktemp("omni-thinker-rows"), tiny_tokenizer)


@pytest.fixture(scope="module")
def oracle(thinker_dir):
    from transformers import Qwen3OmniMoeForConditionalGeneration

    return Qwen3OmniMoeForConditionalGeneration.from_pretrained(
        thinker_dir, dtype=torch.float32).eval()


def _requests(config) -> dict[str, tuple[list[int], list]]:
    # Both clips of "two" over one encoder window: see test_omni_thinker's CLIPS.
    return {"audio": thinker_prompt(config, [11, 12, 13], [clip(3, 1.3)]),
            "two": thinker_prompt(config, [40, 41], [clip(4, 1.1), clip(5, 1.6)]),
            "text": thinker_prompt(config, [40, 41, 42, 43, 44, 45, 46], [])}


def _from_engine(model, ids, tokens, rows):
    """``talker_inputs`` from the engine's rows: the prompt's embeddings from the thinker's
    table, then each generated token's row (all but the last made, which the thinker never
    read); the hidden states at the prompt's audio positions."""
    config = model.config
    width = rows.width
    table = model.thinker.get_input_embeddings()
    made = torch.from_numpy(rows_array(rows.embeds, width).copy())
    assert made.shape == (len(tokens), width)
    said = ids + tokens
    with torch.inference_mode():
        embeds = torch.cat([table(torch.tensor(ids)), made[:-1]])
        hidden = torch.zeros(len(said) - 1, width)
        if rows.media_positions:
            hidden[rows.media_positions] = torch.from_numpy(rows_array(rows.hidden, width).copy())
        return said, talker_inputs(model.talker, config, said, len(ids), embeds, hidden,
                                   tts_rows(model), config.talker_config.speaker_id[SPEAKER])


def _run(engine, requests: dict, asking: set[str]) -> dict:
    """{request id: (tokens, joined ThinkerRows or None)}, greedy."""
    for rid, (ids, parts) in requests.items():
        engine.add_request(rid, ids, SamplingParams(temperature=0.0, max_tokens=MAX_NEW,
                                                    thinker_rows=rid in asking), tuple(parts))
    got = {rid: ([], None) for rid in requests}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens, rows = got[out.request_id]
            got[out.request_id] = (tokens + out.new_token_ids,
                                   joined_rows(rows, out.thinker_rows))
    return got


def _same(a, b) -> bool:
    return all(torch.allclose(x, y, rtol=0, atol=TOLERANCE * max(1.0, y.abs().max()))
               and x.shape == y.shape for x, y in ((a.prompt, b.prompt), (a.text, b.text),
                                                   (a.pad, b.pad)))


def _check(oracle, requests, got, asking):
    for rid, (ids, parts) in requests.items():
        tokens, rows = got[rid]
        said, ref = reference_inputs(oracle, ids, parts)
        assert ids + tokens == said
        if rid not in asking:
            assert rows is None
            continue
        audio = [p for part in parts for p in part.positions]
        assert rows.media_positions == audio  # each once, in order
        mine_said, mine = _from_engine(oracle, ids, tokens, rows)
        assert mine_said == said and _same(mine, ref)


def test_the_rows_make_the_talker_inputs_of_transformers(thinker_dir, oracle, make_engine):
    requests = _requests(oracle.config)
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=512)
    for rid in requests:  # alone
        _check(oracle, {rid: requests[rid]}, _run(engine, {rid: requests[rid]}, {rid}), {rid})
    asking = {"audio", "text"}  # batched, "two" not asking
    _check(oracle, requests, _run(engine, requests, asking), asking)


def test_a_text_prompt_s_rows_are_omni_speaker_s(thinker_dir, oracle, make_engine):
    """For a text prompt, ``OmniSpeaker.answer`` itself is the reference."""
    ids, _ = _requests(oracle.config)["text"]
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=64)
    tokens, rows = _run(engine, {"t": (ids, [])}, {"t"})["t"]
    said, ref = OmniSpeaker(oracle).answer(ids, MAX_NEW, SPEAKER)
    mine_said, mine = _from_engine(oracle, ids, tokens, rows)
    assert mine_said == said and _same(mine, ref)


def test_chunked_prefill_cuts_the_clips(thinker_dir, oracle, make_engine):
    """7-token chunks: each clip's audio rows are kept over several steps."""
    requests = _requests(oracle.config)
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=512,
                         max_num_batched_tokens=7)
    _check(oracle, requests, _run(engine, requests, set(requests)), set(requests))


def test_a_preempted_request_sends_its_audio_rows_once(thinker_dir, oracle, make_engine):
    """Room for both prompts and 4 more tokens each, not both replies: the later one is
    preempted after its first tokens and recomputed (its audio rows made again, not sent)."""
    requests = {rid: _requests(oracle.config)[rid] for rid in ("audio", "two")}
    blocks = sum(-(-(len(ids) + 4) // 4) for ids, _ in requests.values())
    engine = make_engine(thinker_dir, kv_block_size=4, num_kv_blocks=blocks,
                         enable_prefix_caching=False)
    _check(oracle, requests, _run(engine, requests, set(requests)), set(requests))
    assert engine.scheduler.num_preemptions > 0
    assert engine.stats().free_blocks == blocks


def test_a_model_without_a_thinker_refuses_the_rows_by_name(tiny_model_dir, make_engine):
    from mstar.engine.request.errors import RequestRejected

    engine = make_engine(tiny_model_dir("llama"), num_kv_blocks=64)
    with pytest.raises(RequestRejected, match="no thinker rows") as err:
        engine.add_request("r", [1, 2, 3], SamplingParams(max_tokens=2, thinker_rows=True))
    assert err.value.param == "thinker_rows"

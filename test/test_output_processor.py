"""The API server's output path: stream coalescing, incremental detokenization, stop strings."""

from __future__ import annotations

import asyncio

from mstar.api_server.openai.formatting import coalesce
from mstar.engine.outputs import RequestOutput, TokenLogprob


async def _items(outputs):
    for out in outputs:
        yield 0, out


def _coalesced(outputs, interval):
    async def collect():
        return [out async for _, out in coalesce(_items(outputs), interval)]
    return asyncio.run(collect())


def test_coalescing_keeps_every_field_of_the_last_output():
    outs = [RequestOutput("r", [5], num_prompt_tokens=9, num_output_tokens=1,
                          logprobs=[TokenLogprob(5, -0.5)], num_cached_tokens=4),
            RequestOutput("r", [6], finished=True, finish_reason="length", num_prompt_tokens=9,
                          num_output_tokens=2, logprobs=[TokenLogprob(6, -0.25)],
                          num_cached_tokens=4)]
    (merged,) = _coalesced(outs, 4)
    assert merged.new_token_ids == [5, 6]
    assert merged.num_cached_tokens == 4  # streamed usage reports the prefix-cache hits
    assert merged.finished and merged.finish_reason == "length"
    assert [e.token_id for e in merged.logprobs] == [5, 6]
    assert (merged.num_prompt_tokens, merged.num_output_tokens) == (9, 2)

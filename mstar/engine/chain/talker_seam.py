"""The talker as the chained walk (``SpeechChain``) drives it: one interface, two places, chosen
once when the chain is built (MSTAR_ENCODER_PLACEMENT ``talker=process``).

``LocalTalker`` is the talker's ``LLMEngine`` in the worker's process: a request's ``RowFeed`` is
the one the streaming edge appends to, so nothing is sent, and a step is the engine's. The
placed talker (``mstar.worker.talker_node.TalkerNodeProcess``) is a handle on a process of its
own that runs the same engine: a step sends what each feed grew since the last and takes the
outputs that arrived, without waiting for a step of the talker's (waiting, briefly, only when
the chain has nothing else to do: ``step(wait=True)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from mstar.engine.engine_stats import EngineStats
    from mstar.engine.llm_engine import LLMEngine
    from mstar.engine.request.outputs import RequestOutput
    from mstar.engine.request.sampling_params import SamplingParams
    from mstar.models.speech.row_feed import RowFeed


class Talker(Protocol):
    device: torch.device  # where code2wav runs beside it
    dtype: torch.dtype
    max_model_len: int
    num_blocks: int  # its whole KV budget (MSTAR_TALKER_NUM_KV_BLOCKS)

    def blocks_needed(self, positions: int) -> int: ...

    def add(self, request_id: str, feed: RowFeed, params: SamplingParams) -> None:
        """A talker request reading ``feed`` (it may still grow); RequestRejected if refused."""

    def step(self, wait: bool) -> list[RequestOutput]:
        """The talker's outputs since the last step; ``wait``: the chain has nothing else to do
        (a placed talker then waits a moment for them, not spinning)."""

    def abort_request(self, request_id: str) -> None: ...

    def has_unfinished_requests(self) -> bool: ...

    def stats(self) -> EngineStats: ...

    def shutdown(self) -> None: ...


class LocalTalker:
    """The talker's engine in this process."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self.device, self.dtype = engine.device, engine.dtype
        self.max_model_len = engine.max_model_len
        self.num_blocks = engine.block_manager.num_blocks

    def blocks_needed(self, positions: int) -> int:
        return self.engine.block_manager.blocks_needed(positions)

    def add(self, request_id: str, feed: RowFeed, params: SamplingParams) -> None:
        self.engine.add_request(request_id, feed.placeholder_ids(), params, feed=feed)

    def step(self, wait: bool) -> list[RequestOutput]:
        return self.engine.step()

    def abort_request(self, request_id: str) -> None:
        self.engine.abort_request(request_id)

    def has_unfinished_requests(self) -> bool:
        return self.engine.has_unfinished_requests()

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def shutdown(self) -> None:
        self.engine.shutdown()

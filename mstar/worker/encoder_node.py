"""An encoder node of the model's walk graph in a process of its own (MSTAR_ENCODER_PLACEMENT
``node=process``), beside the worker that runs the language model.

The worker starts one ``EncoderNodeProcess`` per such node before it builds its engine and hands
the engine its call (``LLMEngine(placed_nodes=...)``): the runner calls it where it would call
the node in-process, on a miss of its encoder cache. A call sends the part's encoder input as an
``EncodeRequest`` and waits for the ``EncodedOutput`` (typed messages over the transport's ZeroMQ
sockets, checked on arrival like every other); the node process loads the model's weights,
keeps the node's call and answers each request in order. The process, its sockets, its start
and stop, and its death failing the worker's step (so the worker's requests fail as a dead
worker's do, 503) are every placed node's (``mstar.worker.node_process``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import structlog

from mstar.graph.kinds import NodeKind
from mstar.graph.placement import nodes_apart, placed_apart
from mstar.ipc import messages as m
from mstar.ipc.parts import tensors_from_wire, tensors_to_wire
from mstar.worker.node_process import NodeProcess, node_child, serve_node

if TYPE_CHECKING:
    import torch

    from mstar.settings import WorkerSettings

log = structlog.get_logger(__name__)


def _load_node(settings: WorkerSettings, node: str):
    """The node's call, on the model loaded as the worker loads it."""
    from transformers import AutoConfig

    from mstar.engine.placement import resolve_device_dtype
    from mstar.models.loading.loader import load_model
    from mstar.models.loading.resolve import resolve_model_dir
    from mstar.models.loading.shipped import weights_quantization

    model_dir = resolve_model_dir(settings)
    device, dtype = resolve_device_dtype(settings, model_dir)
    model = load_model(model_dir, AutoConfig.from_pretrained(model_dir), device, dtype,
                       quantization=weights_quantization(settings, model_dir, device),
                       cache_dir=settings.cache_dir)
    return model.encoder_nodes()[node], device


def main() -> None:
    """``python -m mstar.worker.encoder_node NODE INBOX OUTBOX MAX_MESSAGE_BYTES``, the worker's
    settings as JSON on stdin: load, say ready, answer each ``EncodeRequest`` until
    ``Shutdown``."""
    settings, (node,), requests, replies = node_child(m.TO_ENCODER_NODE)
    import torch

    call, device = _load_node(settings, node)

    def answer(msg: m.EncodeRequest) -> m.EncodedOutput:
        tensors = {k: v.to(device) for k, v in tensors_from_wire(msg.tensors).items()}
        with torch.inference_mode():
            out = call(tensors).cpu()
        return m.EncodedOutput(msg.call, tensors_to_wire({"output": out})["output"])

    serve_node(requests, replies, m.NodeReady(node), answer)


class EncoderNodeProcess(NodeProcess):
    """The worker's handle on one encoder node process: call it like the node itself."""

    def __init__(self, settings: WorkerSettings, node: str, max_message_bytes: int) -> None:
        super().__init__(settings, node, "mstar.worker.encoder_node", [node],
                         m.FROM_ENCODER_NODE, m.NodeReady, max_message_bytes)
        log.info("encoder_node_ready", node=node, pid=self.proc.pid)

    def __call__(self, tensors: dict[str, torch.Tensor]) -> torch.Tensor:
        device = next(iter(tensors.values())).device
        wire = tensors_to_wire({k: v.cpu() for k, v in tensors.items()})
        reply = self.call(lambda call: m.EncodeRequest(call, wire), m.EncodedOutput)
        return tensors_from_wire({"output": reply.output})["output"].to(device)


def encoders_apart(settings: WorkerSettings) -> tuple[str, ...]:
    """The encoder nodes MSTAR_ENCODER_PLACEMENT puts in processes of their own, checked against
    the model's walk graph (its registry entry's, from its config: the engine is not built
    yet)."""
    if not placed_apart(settings.encoder_placement):
        return ()
    from mstar.models.loading.placement_check import model_graph
    from mstar.models.loading.resolve import resolve_model_dir

    graph = model_graph(resolve_model_dir(settings))  # None: the engine's load says why
    return () if graph is None else nodes_apart(settings.encoder_placement, graph,
                                                NodeKind.ENCODER)


def start_placed_nodes(settings: WorkerSettings, nodes: tuple[str, ...],
                       max_message_bytes: int) -> dict[str, EncoderNodeProcess]:
    """One process per encoder node placed apart; those already started are stopped if one
    fails."""
    started: dict[str, EncoderNodeProcess] = {}
    try:
        for node in nodes:
            started[node] = EncoderNodeProcess(settings, node, max_message_bytes)
    except BaseException:
        for proc in started.values():
            proc.close()
        raise
    return started


if __name__ == "__main__":
    main()

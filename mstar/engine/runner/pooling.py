"""Pooling requests (embeddings): each one's final hidden states, after the model's final norm and
before the LM head, reduced to one vector in the model runner.

- ``last``: the hidden state of the prompt's last token.
- ``mean``: the mean over every prompt token. A prompt prefilled in several chunks keeps a running
  float32 sum per request until its last chunk; the engine gives such a request no prefix-cache
  hits, so every token's hidden state passes through here.
- ``classify``: the model's classifier head (``classify_head``) applied to the last token's hidden
  state: the logits of its labels (rerank, score and classify).

The vector leaves as little-endian float32 bytes (``RequestOutput.embedding``). Only the thread
running the runner's steps touches a ``Pooler``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from mstar.engine.runner.classify_head import ClassifierHead
from mstar.engine.schedule.scheduler_output import SchedulerOutput


def vector_bytes(vector: torch.Tensor) -> bytes:
    return vector.to(torch.float32).cpu().numpy().astype("<f4").tobytes()


def bytes_vector(data: bytes) -> np.ndarray:
    """The inverse of ``vector_bytes``: a float32 array."""
    return np.frombuffer(data, dtype="<f4")


class Pooler:
    def __init__(self, classifier: ClassifierHead | None = None) -> None:
        """``classifier``: the served model's classifier head (None: it has none)."""
        self.classifier = classifier
        self.modes: dict[int, str] = {}  # request number -> "last" | "mean", while it is live
        self.sums: dict[int, torch.Tensor] = {}  # mean pooling: the chunks computed so far

    def apply(self, out: SchedulerOutput) -> None:
        """The step's diffs: forget removed requests, note new pooling ones."""
        for seq_no in out.removed:
            self.modes.pop(seq_no, None)
            self.sums.pop(seq_no, None)
        for req in out.new:
            if req.params.pooling is not None:
                self.modes[req.seq_no] = req.params.pooling
                self.sums.pop(req.seq_no, None)  # resumed after a preemption: from scratch

    def pool(self, out: SchedulerOutput, query_lens: list[int],
             hidden: torch.Tensor) -> dict[int, bytes]:
        """The vector of every pooling request whose prompt ends in this step, by request number."""
        if not self.modes:
            return {}
        vectors: dict[int, bytes] = {}
        first = 0
        for row, n in zip(out.rows, query_lens, strict=True):
            mode = self.modes.get(row.seq_no)
            if mode == "mean":
                total = hidden[first:first + n].to(torch.float32).sum(0)
                if row.seq_no in self.sums:
                    total = total + self.sums.pop(row.seq_no)
                if row.samples:
                    vectors[row.seq_no] = vector_bytes(total / row.end)
                else:
                    self.sums[row.seq_no] = total
            elif mode == "last" and row.samples:
                vectors[row.seq_no] = vector_bytes(hidden[first + n - 1])
            elif mode == "classify" and row.samples and self.classifier is not None:
                last = first + n - 1
                vectors[row.seq_no] = vector_bytes(self.classifier(hidden[last:last + 1])[0])
            first += n
        return vectors


def model_pooling(model_dir: Path, knob: str) -> str:
    """The pooling an ``auto`` request gets: the knob (MSTAR_EMBEDDING_POOLING) unless it is auto;
    else a sentence-transformers Pooling module's mode when the model directory has one
    (modules.json naming it, or 1_Pooling/config.json): mean for ``pooling_mode_mean_tokens``, last
    for ``pooling_mode_lasttoken``; else last (a decoder-only LM's last token has seen the whole
    input)."""
    if knob != "auto":
        return knob
    config = _pooling_config(model_dir)
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    return "last"


def _pooling_config(model_dir: Path) -> dict:
    folders = ["1_Pooling"]
    modules = model_dir / "modules.json"
    if modules.is_file():
        try:
            entries = json.loads(modules.read_text())
            folders = [e["path"] for e in entries
                       if str(e.get("type", "")).endswith("models.Pooling")] + folders
        except (ValueError, TypeError, KeyError):
            pass
    for folder in folders:
        path = model_dir / folder / "config.json"
        if path.is_file():
            try:
                config = json.loads(path.read_text())
            except ValueError:
                continue
            if isinstance(config, dict):
                return config
    return {}

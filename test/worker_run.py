"""A worker (``mstar.worker.worker.Worker``) run on a thread of the test, its sockets replaced by
queues (``QueueChannel``, ``Channel``): commands go in as typed messages, its outputs and
statistics are collected as they would arrive off a socket."""

from __future__ import annotations

import queue
import threading
import time

import numpy as np

from mstar.ipc import messages as m
from mstar.ipc.security import instance_security
from mstar.settings import WorkerSettings
from mstar.worker.worker import Worker


class QueueChannel:
    """The worker's sockets in process: commands queued in (each receive takes all that are
    queued, as a socket's drain does), every message out left to ``send_to_api``."""

    def __init__(self, settings: WorkerSettings | None = None):
        self.inbox: queue.Queue = queue.Queue()
        # a placed node's sockets take the instance's frame limit
        self.security = None if settings is None else instance_security(settings)

    def receive(self, timeout_ms: int):
        try:
            msgs = [self.inbox.get(timeout=timeout_ms / 1000) if timeout_ms else
                    self.inbox.get_nowait()]
        except queue.Empty:
            return []
        while not self.inbox.empty():
            msgs.append(self.inbox.get_nowait())
        return [m.decode(m.encode(msg)) for msg in msgs]  # as typed as off a socket

    def admit_model(self, vocab_size, max_model_len):
        pass  # in process: nothing to check at an inbox

    def send_to_conductor(self, msg):
        pass


class Channel(QueueChannel):
    """Outputs (tokens, frames, audio, finishes) and statistics collected by request."""

    def __init__(self, settings: WorkerSettings):
        super().__init__(settings)
        self.tokens: dict[str, list[int]] = {}
        self.frames: dict[str, list[list[int]]] = {}
        self.audio: dict[str, list[np.ndarray]] = {}
        self.done: dict[str, str] = {}
        self.after_done: list[str] = []
        self.stats: list[m.WorkerStats] = []

    def send_to_api(self, msg):
        msg = m.decode(m.encode(msg))  # as typed as off a socket
        if isinstance(msg, m.WorkerStats):
            self.stats.append(msg)
        if isinstance(msg, m.Outputs):
            for out in msg.outputs:
                if out.request_id in self.done:
                    self.after_done.append(out.request_id)
                self.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
                self.frames.setdefault(out.request_id, []).extend(out.new_frames or [])
                if out.new_audio is not None:
                    self.audio.setdefault(out.request_id, []).append(
                        np.frombuffer(out.new_audio.samples, "<f4"))
                if out.finished:
                    self.done[out.request_id] = out.finish_reason

    def joined_audio(self, rid: str) -> np.ndarray:
        return np.concatenate(self.audio[rid])


def start_worker(settings: WorkerSettings) -> tuple[Worker, Channel, threading.Thread]:
    """The worker running on a thread; stop it with ``stop_worker``."""
    channel = Channel(settings)
    worker = Worker(settings, 0, channel)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    return worker, channel, thread


def stop_worker(channel: Channel, thread: threading.Thread) -> None:
    channel.inbox.put(m.Shutdown("test"))
    thread.join(30)


def wait_until(done, what: str, thread: threading.Thread | None = None,
               timeout: float = 120.0) -> None:
    """Until ``done()``; fails after ``timeout`` or at once when the worker's ``thread`` died."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, what
        assert thread is None or thread.is_alive(), f"the worker died: {what}"
        time.sleep(0.01)


def wait_done(channel: Channel, rids, thread: threading.Thread | None = None,
              timeout: float = 120.0) -> None:
    wait_until(lambda: set(rids) <= set(channel.done), "requests did not finish", thread,
               timeout)

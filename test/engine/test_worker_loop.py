"""The engine's step loop as a worker runs it, driven through a Worker built from a settings object."""

from __future__ import annotations

import os
import threading
import time

import pytest
from structlog.testing import capture_logs
from worker_run import QueueChannel

from mstar.engine import step_loop
from mstar.engine.request.sampling_params import SamplingParams
from mstar.ipc import messages as m
from mstar.logging_setup import configure_logging
from mstar.settings import WorkerSettings
from mstar.worker.worker import Worker


class FakeChannel(QueueChannel):
    """Stands in for the zmq sockets: commands are queued in, messages out are collected."""

    def __init__(self):
        super().__init__()
        self.tokens: dict[str, list[int]] = {}
        self.finish_reasons: dict[str, str] = {}
        self.done: set[str] = set()  # finished or rejected
        self.failed: dict[str, str] = {}
        self.first_token = threading.Event()

    def send_to_api(self, msg):
        msg = m.decode(m.encode(msg))
        if isinstance(msg, m.Outputs):
            for out in msg.outputs:
                self.tokens.setdefault(out.request_id, []).extend(out.new_token_ids)
                self.first_token.set()
                if out.finished:
                    self.finish_reasons[out.request_id] = out.finish_reason
                    self.done.add(out.request_id)
        elif isinstance(msg, m.RequestFailed):
            self.failed[msg.request_id] = msg.message
            self.done.add(msg.request_id)


@pytest.fixture(scope="module")
def settings_for(tiny_model_dir, device):
    model_dir = tiny_model_dir("llama")

    def make(**knobs) -> WorkerSettings:
        knobs.setdefault("max_consecutive_spec_steps", 1024)  # the overlapped loop (auto: serial)
        return WorkerSettings(model=str(model_dir), device=device, dtype="float32", **knobs)

    return make


class RunningWorker:
    def __init__(self, settings: WorkerSettings):
        self.channel = FakeChannel()
        self.worker = Worker(settings, 0, self.channel)
        self.thread = threading.Thread(target=self.worker.run, daemon=True)
        self.thread.start()

    def send(self, msg) -> None:
        self.channel.inbox.put(msg)

    def wait_done(self, request_ids, timeout=60.0) -> None:
        deadline = time.monotonic() + timeout
        while not set(request_ids) <= self.channel.done:
            assert time.monotonic() < deadline, "requests did not finish"
            time.sleep(0.005)

    def stop(self) -> None:
        self.send(m.Shutdown("test"))
        self.thread.join(30)
        assert not self.thread.is_alive()


def add(worker: RunningWorker, rid: str, prompt: list[int], **params) -> None:
    params.setdefault("temperature", 0.0)
    worker.send(m.AddRequest(rid, prompt, SamplingParams(**params)))


# Different lengths and stopping points, so requests leave the batch at different steps.
REQUESTS = {
    "a": ([5, 6, 7, 8, 9], {"max_tokens": 24, "ignore_eos": True}),
    "b": (list(range(20, 47)), {"max_tokens": 5, "ignore_eos": True}),
    "c": ([3, 1, 4, 1, 5, 9, 2, 6], {"max_tokens": 17}),
    "d": (list(range(60, 70)), {"max_tokens": 12, "ignore_eos": True}),
    "e": ([11] * 30, {"max_tokens": 9, "ignore_eos": True}),
}


def serve_all(settings: WorkerSettings, requests=REQUESTS, stagger: bool = False):
    worker = RunningWorker(settings)
    for i, (rid, (prompt, params)) in enumerate(requests.items()):
        add(worker, rid, prompt, **params)
        if stagger and i % 2:
            time.sleep(0.02)  # arrive while earlier requests are decoding
    worker.wait_done(requests)
    worker.stop()
    return worker


@pytest.mark.parametrize("knobs", [
    {},
    {"num_kv_blocks": 12, "kv_block_size": 4},  # forces preemption
    {"max_consecutive_spec_steps": 2, "spec_peek_for_fairness": False},
    {"engine_step_sync": True},
], ids=["default", "preemption", "cap-2", "step-sync"])
def test_speculation_gives_the_same_tokens_as_a_serial_loop(settings_for, knobs):
    serial = serve_all(settings_for(max_consecutive_spec_steps=0,
                                    **{k: v for k, v in knobs.items()
                                       if k in ("num_kv_blocks", "kv_block_size")}))
    overlapped = serve_all(settings_for(**knobs), stagger=True)
    assert overlapped.channel.tokens == serial.channel.tokens
    assert overlapped.channel.finish_reasons == serial.channel.finish_reasons
    assert overlapped.worker.engine.loop.counters.continuations > 0
    for rid, (_, params) in REQUESTS.items():
        if params.get("ignore_eos"):
            assert len(overlapped.channel.tokens[rid]) == params["max_tokens"]
    engine = overlapped.worker.engine
    assert engine.stats().free_blocks == engine.block_manager.num_blocks


@pytest.mark.parametrize("cap", [1, 3])
def test_never_more_continuations_in_a_row_than_the_cap(settings_for, cap):
    worker = serve_all(settings_for(max_consecutive_spec_steps=cap))
    counters = worker.worker.engine.loop.counters
    assert counters.continuations > 0
    assert counters.longest_continuation_run == cap


def test_cap_zero_never_speculates(settings_for):
    counters = serve_all(settings_for(max_consecutive_spec_steps=0)).worker.engine.loop.counters
    assert counters.continuations == 0 and counters.fresh_steps > 0


def test_waiting_work_makes_the_loop_yield(settings_for):
    worker = RunningWorker(settings_for())
    add(worker, "long", [5, 6, 7], max_tokens=40, ignore_eos=True)
    worker.channel.first_token.wait(30)
    add(worker, "late", [8, 9, 10], max_tokens=3, ignore_eos=True)
    worker.wait_done(["late"])
    # The late request finished well before the long one could have, so the loop yielded to it.
    assert "long" not in worker.channel.done
    worker.wait_done(["long"])
    worker.stop()


def test_abort_mid_speculation_emits_nothing_more_and_frees_blocks(settings_for):
    worker = RunningWorker(settings_for())
    add(worker, "keep", [5, 6, 7], max_tokens=30, ignore_eos=True)
    add(worker, "drop", [9, 8, 7], max_tokens=200, ignore_eos=True)
    worker.channel.first_token.wait(30)
    worker.send(m.AbortRequests(["drop"]))
    worker.wait_done(["keep"])
    engine = worker.worker.engine
    deadline = time.monotonic() + 30
    while engine.stats().running + engine.stats().waiting:  # "drop" leaves the engine too
        assert time.monotonic() < deadline, "the aborted request stayed"
        time.sleep(0.005)
    time.sleep(0.05)
    emitted = len(worker.channel.tokens.get("drop", []))
    worker.stop()
    assert emitted < 200 and "drop" not in worker.channel.finish_reasons
    assert len(worker.channel.tokens["keep"]) == 30
    assert engine.stats().free_blocks == engine.block_manager.num_blocks


def test_launch_wait_uses_the_configured_timeout(settings_for, monkeypatch):
    timeouts = []

    class SpyEvent(threading.Event):
        def wait(self, timeout=None):
            timeouts.append(timeout)
            return super().wait(timeout)

    monkeypatch.setattr(step_loop, "Event", SpyEvent)
    serve_all(settings_for(launch_wait_ms=7.5))
    assert timeouts and set(timeouts) == {0.0075}


def test_phase_timing_logs_every_n_iterations(settings_for):
    configure_logging("info")  # an earlier test may have left the level at warning
    with capture_logs() as logs:
        serve_all(settings_for(phase_timing=4))
    events = [e for e in logs if e["event"] == "phase_timing"]
    assert events
    for event in events:
        assert event["iterations"] == 4
        for phase in ("forward", "postprocess", "iteration"):
            assert set(event[phase]) == {"p50_ms", "p95_ms", "mean_ms"}
        assert event["continuations"] + event["fresh_steps"] >= 4
    # The worker's own messaging around the steps: taking commands, sending outputs.
    assert any("inbox" in event and "publish" in event for event in events)
    with capture_logs() as logs:
        serve_all(settings_for())
    assert not [e for e in logs if e["event"] == "phase_timing"]


class RecordingEnviron(dict):
    """os.environ stand-in that remembers every MSTAR_ name looked up."""

    def __init__(self, *args):
        super().__init__(*args)
        self.looked_up: list[str] = []

    def _note(self, key):
        if isinstance(key, str) and key.startswith("MSTAR_"):
            self.looked_up.append(key)

    def __getitem__(self, key):
        self._note(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key):
        self._note(key)
        return super().__contains__(key)


def test_worker_run_reads_no_environment_variable(settings_for, monkeypatch):
    environ = RecordingEnviron(os.environ)
    environ["MSTAR_MAX_CONSECUTIVE_SPEC_STEPS"] = "0"
    environ["MSTAR_LAUNCH_WAIT_MS"] = "5ms"
    monkeypatch.setattr(os, "environ", environ)
    worker = serve_all(settings_for(max_consecutive_spec_steps=5))
    assert environ.looked_up == []
    assert worker.worker.engine.loop.counters.continuations > 0  # the settings' cap, not the env's

"""Start-up and secrets around the transport: a tensor-parallel size that does not divide the
heads is refused before anything spawns; tcp with remote workers needs the cluster secret;
children never hold a secret (and still share the fingerprint); the output-routing task is
supervised, routes outputs as they arrive (not on its tick) and fails every request when the
conductor vanishes; a SIGHUP during start-up is deferred."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import subprocess
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest
from serve_helpers import die_with_test, free_port

from mstar.ipc import messages as m
from mstar.ipc.endpoints import make_endpoints
from mstar.ipc.security import MissingClusterSecret, instance_security, joining_security
from mstar.ipc.sockets import push_socket, send
from mstar.settings import WorkerSettings
from mstar.settings.checks.preflight import tensor_parallel_problem
from mstar.settings.reload import reloadable_values
from mstar.settings.wire import settings_from_json, settings_to_json, withhold_secrets

KEY = "sk-startup-test-key"
SECRET = "startup-cluster-secret"


def _config(tmp_path: Path, heads: int, kv_heads: int) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({
        "num_attention_heads": heads, "num_key_value_heads": kv_heads, "hidden_size": 64,
        "num_hidden_layers": 2, "max_position_embeddings": 128}))
    return tmp_path


@pytest.mark.parametrize(("heads", "kv_heads", "size", "reason"), [
    (9, 3, 2, "2 does not divide the model's 9 attention heads"),
    (12, 4, 6, "6 and the model's 4 KV heads: one must divide the other"),
    (9, 3, 3, None),
    (8, 2, 4, None),
    (9, 3, 1, None),
])
def test_tensor_parallel_size_against_the_heads(tmp_path, heads, kv_heads, size, reason):
    problem = tensor_parallel_problem(WorkerSettings(tensor_parallel_size=size),
                                      _config(tmp_path, heads, kv_heads))
    if reason is None:
        assert problem is None
    else:
        assert "MSTAR_TENSOR_PARALLEL_SIZE" in problem and reason in problem
        assert "\n" not in problem


def test_serve_refuses_a_bad_tensor_parallel_size_before_spawning(tiny_model_dir, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MSTAR_")}
    env |= {"MSTAR_TENSOR_PARALLEL_SIZE": "3", "MSTAR_PORT": str(free_port()),
            "MSTAR_DEVICE": "cpu"}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "mstar", "serve", str(tiny_model_dir("llama"))],
                          env=env, capture_output=True, text=True, timeout=120, preexec_fn=die_with_test)
    assert done.returncode == 1
    assert "preflight_failed" in done.stdout + done.stderr
    assert "3 does not divide the model's 4 attention heads" in done.stdout + done.stderr
    assert "starting_workers" not in done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert time.monotonic() - start < 60


def test_tcp_with_remote_workers_needs_the_secret():
    settings = WorkerSettings(zmq_transport="tcp", num_workers=2, remote_workers=1)
    with pytest.raises(MissingClusterSecret, match="MSTAR_CLUSTER_SECRET"):
        instance_security(settings)
    with pytest.raises(MissingClusterSecret, match="MSTAR_CLUSTER_SECRET"):
        joining_security(WorkerSettings())
    with_secret = WorkerSettings(zmq_transport="tcp", num_workers=2, remote_workers=1,
                                 cluster_secret=SECRET)
    assert instance_security(with_secret).keys == joining_security(with_secret).keys


def test_single_host_tcp_gets_a_random_secret_and_ipc_none(tmp_path):
    tcp = WorkerSettings(zmq_transport="tcp")
    first, second = instance_security(tcp), instance_security(tcp)
    assert first.keys is not None and first.keys != second.keys
    assert instance_security(WorkerSettings()).keys is None
    assert make_endpoints(WorkerSettings(), tmp_path).security.max_message_bytes == 64 << 20


def test_children_hold_no_secret_and_share_the_fingerprint():
    settings = WorkerSettings(api_key=KEY, cluster_secret=SECRET)
    child = withhold_secrets(settings)
    assert child.fingerprint() == settings.fingerprint()
    for shipped in (pickle.dumps(child), settings_to_json(settings).encode(),
                    pickle.dumps(reloadable_values(settings))):
        assert KEY.encode() not in shipped and SECRET.encode() not in shipped
    remote = settings_from_json(settings_to_json(settings))
    assert remote.fingerprint() == settings.fingerprint()
    unset = WorkerSettings()
    assert withhold_secrets(unset) == unset and reloadable_values(unset)["api_key"] is None


class _Letters:
    """A tokenizer for the routing tests: token i is the letter i % 26."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return "".join(chr(ord("a") + i % 26) for i in ids)


def _alive() -> SimpleNamespace:
    return SimpleNamespace(is_alive=lambda: True, exitcode=None)


@asynccontextmanager
async def _routing(tmp_path: Path, conductor: SimpleNamespace, max_tokens: int = 2):
    """(an EngineClient with request "r-0" submitted, a socket standing for a worker's outputs,
    the request's sink: a queue); shut down and closed on the way out."""
    from mstar.api_server.generation.engine_client import EngineClient
    from mstar.prompt.value import Prompt

    endpoints = make_endpoints(WorkerSettings(), tmp_path)
    client = EngineClient(endpoints, conductor, tokenizer=_Letters())
    client.connect(list(endpoints.workers))
    out = push_socket(client.ctx, endpoints.api, endpoints.security)
    try:
        queue: asyncio.Queue = asyncio.Queue()
        client.submit([("r-0", Prompt([1, 2]), m.SamplingParams(max_tokens=max_tokens))], queue)
        yield client, out, queue
    finally:
        out.close(linger=0)
        await client.shutdown("test")
        client.close()


def test_output_routing_that_dies_fails_every_request_and_health(tmp_path):
    from mstar.api_server.generation.engine_client import Failure

    async def scenario() -> tuple:
        async with _routing(tmp_path, _alive()) as (client, out, queue):

            def broken(msg: m.Message) -> None:
                raise RuntimeError("a bug in routing")

            client._route = broken
            client.start()
            send(out, m.WorkerStats(0, 0, 0, 0.0, 0))
            await asyncio.wait_for(client.failed.wait(), 5)
            return client.failure, await queue.get()

    failure, first = asyncio.run(scenario())
    assert "output routing failed" in failure and "a bug in routing" in failure
    assert isinstance(first, Failure) and first.status == 503


def test_outputs_are_routed_as_they_arrive_not_on_the_tick(tmp_path):
    """Each output wakes the routing at once (the loop's reader on the inbox): 20 round trips,
    each sent after the last was routed, take far less than the 20 ticks a poll would wait."""
    from mstar.api_server.generation.engine_client import POLL_MS
    from mstar.engine.request.outputs import RequestOutput

    rounds = 20

    async def scenario() -> tuple[float, list[str]]:
        async with _routing(tmp_path, _alive(), max_tokens=rounds + 1) as (client, out, queue):
            client.start()
            await asyncio.sleep(2 * POLL_MS / 1000)  # idle for two ticks first
            texts, start = [], time.perf_counter()
            for k in range(rounds):
                send(out, m.Outputs([RequestOutput("r-0", [k])]))
                texts.append((await asyncio.wait_for(queue.get(), 5)).new_text)
            return time.perf_counter() - start, texts

    elapsed, texts = asyncio.run(scenario())
    assert "".join(texts) == "abcdefghijklmnopqrst"
    assert elapsed < rounds * POLL_MS / 1000 / 4, f"{rounds} round trips took {elapsed:.2f} s"


def test_a_conductor_that_vanishes_fails_every_request(tmp_path):
    from mstar.api_server.generation.engine_client import Failure

    conductor = SimpleNamespace(alive=True, exitcode=None)
    conductor.is_alive = lambda: conductor.alive

    async def scenario() -> tuple:
        async with _routing(tmp_path, conductor) as (client, _, queue):
            client.start()
            await asyncio.sleep(0.05)
            conductor.alive, conductor.exitcode = False, -9
            await asyncio.wait_for(client.failed.wait(), 5)
            return client.failure, await queue.get()

    failure, first = asyncio.run(scenario())
    assert failure == "conductor exited with code -9"
    assert isinstance(first, Failure) and first.status == 503


def test_sighup_during_start_up_is_deferred(capsys):
    from mstar.api_server.reload import DeferredReload

    deferred = DeferredReload()
    assert not deferred.pending
    deferred(1, None)
    assert deferred.pending
    captured = capsys.readouterr()  # once: a second call finds nothing left
    assert "settings_reload_deferred" in captured.out + captured.err


def test_the_conductor_and_the_api_server_start_without_torch():
    """`mstar serve` spawns the conductor, which spawns the workers: torch (seconds to import)
    loads in the workers, and in the API server only with its tokenizer, after the spawn."""
    code = ("import sys, mstar.conductor.conductor, mstar.api_server.server; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr

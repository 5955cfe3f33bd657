"""The Responses store is bounded in bytes: the oldest responses go past MSTAR_RESPONSES_STORE_MAX_MB,
one too large for it is not kept, and input the model never reads (reasoning items, unknown
fields, ids) is not kept at all; 50 requests of 24 MiB of reasoning items leave a running API
server within the store's bound plus 64 MiB."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from api_stub import stub_app
from serve_helpers import hard_timeout, running_server  # noqa: F401 - hard_timeout is autouse
from starlette.testclient import TestClient

from mstar.api_server.responses.protocol import InputItem, ResponsesRequest
from mstar.api_server.responses.store import ResponseStore, StoredResponse
from mstar.api_server.responses.translate import input_items, to_chat

MIB = 1 << 20
STORE_MB = 32
REQUESTS = 50
REASONING_MIB = 24


def rss_bytes(pid: int) -> int:
    """A process's resident memory now."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]
               ) * 1024


def _message(text: str) -> InputItem:
    return InputItem(role="user", content=text)


def test_past_the_byte_bound_the_oldest_responses_go():
    one = StoredResponse({"id": "r"}, [_message("x" * 10_000)])
    store = ResponseStore(capacity=100, ttl_s=60.0, max_bytes=one.size * 8)
    for i in range(10):
        store.put("a", f"r{i}", one)
    assert [store.get("a", f"r{i}") is not None for i in range(10)] == [False] * 2 + [True] * 8
    assert store.bytes == 8 * one.size
    store.delete("a", "r9")
    assert store.bytes == 7 * one.size and len(store) == 7


def test_a_response_larger_than_an_eighth_of_the_bound_is_not_kept():
    big = StoredResponse({"id": "r", "instructions": "y" * 20_000}, [])
    store = ResponseStore(capacity=100, ttl_s=60.0, max_bytes=8 * big.size - 8)
    store.put("a", "big", big)
    assert store.get("a", "big") is None and store.bytes == 0
    fits = ResponseStore(capacity=100, ttl_s=60.0, max_bytes=8 * big.size)
    fits.put("a", "big", big)
    assert fits.get("a", "big") is big


def test_a_zero_byte_bound_stores_nothing():
    store = ResponseStore(capacity=10, ttl_s=60.0, max_bytes=0)
    store.put("a", "r", StoredResponse({}, []))
    assert len(store) == 0


def test_only_what_the_model_reads_is_kept_and_the_follow_up_prompt_is_unchanged():
    req = ResponsesRequest.model_validate({"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?",
                                      "annotations": ["a" * 5000]}], "id": "m1",
         "status": "completed", "unknown": "u" * 5000},
        {"type": "reasoning", "id": "rs_1", "summary": [{"text": "s" * 5000}],
         "encrypted_content": "e" * 50_000},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
         "encrypted_content": "e" * 5000},
        {"type": "function_call_output", "call_id": "c1", "output": "18 C"}]})
    items = input_items(req)
    kept = StoredResponse({"id": "r"}, items)
    assert kept.size < 1000
    assert [i.type for i in kept.conversation] == ["message", "function_call",
                                                   "function_call_output"]
    follow = ResponsesRequest.model_validate({"input": "and tomorrow?"})
    assert to_chat(follow, kept.conversation).body == to_chat(follow, items).body


def test_the_knob_bounds_the_served_store(tiny_tokenizer):
    app, _ = stub_app(tiny_tokenizer, responses_store_max_mb=16 / 1024)  # 16 KiB: 2 KiB each
    client = TestClient(app)
    big = client.post("/v1/responses", json={"input": "hi", "user": "y" * 3000}).json()
    assert client.get(f"/v1/responses/{big['id']}").status_code == 404  # returned, not kept
    ids = [client.post("/v1/responses", json={"input": "hi"}).json()["id"] for _ in range(30)]
    kept = [client.get(f"/v1/responses/{i}").status_code == 200 for i in ids]
    assert kept[-1] and not kept[0] and kept == sorted(kept)  # the oldest went


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    yield from running_server(tiny_model_dir("llama"), tmp_path_factory.mktemp("store") / "s.log",
                              {"MSTAR_RESPONSES_STORE_MAX_MB": str(STORE_MB),
                               "MSTAR_MAX_BODY_MB": "64"})


def _reasoning_body() -> bytes:
    """A request with REASONING_MIB of reasoning items (encrypted content, summaries)."""
    blob = "r" * (MIB // 2)
    items = [{"type": "reasoning", "id": f"rs_{i}", "summary": [{"type": "summary_text",
                                                                 "text": blob}],
              "encrypted_content": blob} for i in range(REASONING_MIB)]
    items.append({"role": "user", "content": "hello"})
    return json.dumps({"input": items, "max_output_tokens": 1}).encode()


def test_stored_reasoning_items_do_not_grow_the_server(server):
    body = _reasoning_body()
    with httpx.Client(base_url=server.url, timeout=30,
                      headers={"content-type": "application/json"}) as client:
        # Warm up with one body of the same size: the allocator's high-water mark from parsing
        # it is the baseline, so what grows past it is what the server keeps.
        assert client.post("/v1/responses", content=body).status_code == 200
        before = rss_bytes(server.proc.pid)
        ids = []
        for _ in range(REQUESTS):
            resp = client.post("/v1/responses", content=body)
            assert resp.status_code == 200, resp.text
            ids.append(resp.json()["id"])
        grown = rss_bytes(server.proc.pid) - before
        print(f"grew {grown / MIB:.0f} MiB")
        assert grown < (STORE_MB + 64) * MIB, f"grew {grown / MIB:.0f} MiB"
        assert client.get(f"/v1/responses/{ids[0]}").status_code == 200  # all kept, small
        follow = client.post("/v1/responses", json={"input": "more", "max_output_tokens": 1,
                                                    "previous_response_id": ids[-1]})
        assert follow.status_code == 200, follow.text

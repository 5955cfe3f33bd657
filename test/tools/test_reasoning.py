"""The reasoning parser: ``<think>...</think>`` split into reasoning_content (whole and streamed,
split anywhere), the template's thinking switch, where an output starts, the grammar that holds
structured output to the text after the reasoning, and the end-to-end shape on the API server with a
tiny tokenizer whose chat template thinks (Qwen3-style)."""

from __future__ import annotations

import copy
import itertools
import json

import pytest
from api_stub import StubEngine, stub_app
from hypothesis import given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from mstar.api_server.http.errors import APIError
from mstar.api_server.reasoning.grammar import after_reasoning
from mstar.api_server.reasoning.plan import generation_start, reasoning_plan, template_switch
from mstar.api_server.reasoning.split import ReasoningStream, split_reasoning
from mstar.engine.request.sampling_params import StructuredOutput
from mstar.output.processor import TextOutput

QWEN3_TEMPLATE = (  # Qwen3's switch: enable_thinking=false writes an empty section in the prompt
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}")
OPENED_TEMPLATE = (  # DeepSeek-R1's style: the prompt opens the section
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}")

SPLITS = [
    ("optional", "<think>\nLet me think.\n</think>\n\nParis.", ("Let me think.", "Paris.")),
    ("optional", "  <think>a < b</think>x", ("a < b", "x")),
    ("optional", "Paris, no thinking.", (None, "Paris, no thinking.")),
    ("optional", "<thin>k", (None, "<thin>k")),
    ("optional", "<think>cut short", ("cut short", "")),
    ("inside", "step 1 </thin> step 2</think>\nAnswer", ("step 1 </thin> step 2", "Answer")),
    ("inside", "never closed", ("never closed", "")),
    ("off", "<think>kept</think>", (None, "<think>kept</think>")),
]


@pytest.mark.parametrize("start, text, expected", SPLITS)
def test_reasoning_is_split_from_content(start, text, expected):
    assert split_reasoning(text, start) == expected


@pytest.mark.parametrize("start, text, expected", SPLITS)
def test_a_stream_split_anywhere_splits_as_the_whole_text(start, text, expected):
    reasoning, content = expected
    for cut in range(len(text) + 1):
        for second in (cut, (cut + len(text)) // 2):
            stream = ReasoningStream(start)
            parts = [stream.feed(text[:cut]), stream.feed(text[cut:second]),
                     stream.feed(text[second:]), stream.finish()]
            assert "".join(r for r, _ in parts) == (reasoning or ""), (cut, second)
            assert "".join(c for _, c in parts) == content, (cut, second)
            if start != "off":
                assert not any("<think>" in r + c or "</think>" in r + c for r, c in parts)


def test_the_switch_maps_to_the_template_or_is_refused_by_name():
    params = ("chat_template_kwargs.enable_thinking", "reasoning_effort")
    assert template_switch(QWEN3_TEMPLATE, False, None, params) == {"enable_thinking": False}
    assert template_switch(QWEN3_TEMPLATE, None, "none", params) == {"enable_thinking": False}
    assert template_switch(QWEN3_TEMPLATE, None, "high", params) == {"enable_thinking": True}
    assert template_switch("{{ reasoning_effort }}", None, "low", params) == {
        "reasoning_effort": "low"}
    for fields, param in [((True, None), params[0]), ((None, "low"), params[1])]:
        with pytest.raises(APIError) as err:
            template_switch("<|im_start|>", *fields, params)
        assert (err.value.status, err.value.param) == (400, param)


@pytest.fixture(scope="module")
def thinking_tokenizer(tiny_tokenizer):
    tok = copy.deepcopy(tiny_tokenizer)
    tok.chat_template = QWEN3_TEMPLATE
    return tok


def test_the_output_starts_where_the_generation_prompt_leaves_it(thinking_tokenizer):
    assert generation_start(thinking_tokenizer, ()) == "optional"
    assert generation_start(thinking_tokenizer, (("enable_thinking", False),)) == "off"
    opened = copy.deepcopy(thinking_tokenizer)
    opened.chat_template = OPENED_TEMPLATE
    assert generation_start(opened, ()) == "inside"
    plan = reasoning_plan("auto", opened, None, None, None)
    assert plan.start == "inside" and plan.new_stream is not None
    assert reasoning_plan("none", opened, None, None, None).new_stream is None


def accepts(grammar: str, text: str) -> bool:
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    return _is_grammar_accept_string(xgr.Grammar.from_ebnf(grammar), text)


SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
JSON_SCHEMA = StructuredOutput(kind="json_schema", spec=json.dumps(SCHEMA))


def test_a_constraint_applies_after_the_reasoning_not_inside_it():
    optional = after_reasoning(JSON_SCHEMA, "optional").spec
    assert accepts(optional, '{"a": 1}')
    assert accepts(optional, '<think>\nfree text, even {"a": "x"\n</think>\n\n{"a": 1}')
    assert not accepts(optional, '<think>x</think>{"a": "x"}')
    assert not accepts(optional, 'text{"a": 1}')
    inside = after_reasoning(JSON_SCHEMA, "inside").spec
    assert accepts(inside, 'hmm</think>\n{"a": 1}') and not accepts(inside, '{"a": 1}')
    assert after_reasoning(JSON_SCHEMA, "off") is JSON_SCHEMA
    assert after_reasoning(None, "optional") is None
    choice = after_reasoning(StructuredOutput(kind="choice", choices=["yes", "no"]), "optional")
    assert accepts(choice.spec, "<think>?</think>yes") and not accepts(choice.spec, "maybe")


class ScriptedEngine(StubEngine):
    """Every choice answers ``TEXT`` in pieces of 3 characters."""

    TEXT = '<think>\nThe user wants JSON.\n</think>\n\n{"a": 1}'

    def submit(self, requests: list, sink) -> None:
        for rid, prompt, params in requests:
            ids = prompt.token_ids
            self.submitted.append((rid, ids, params))
            pieces = [self.TEXT[i:i + 3] for i in range(0, len(self.TEXT), 3)]
            for k, piece in enumerate(pieces):
                last = k == len(pieces) - 1
                sink.put_nowait(TextOutput(
                    rid, [5], finished=last, finish_reason="stop" if last else None,
                    num_prompt_tokens=len(ids), num_output_tokens=k + 1, new_text=piece))


@pytest.fixture()
def served(thinking_tokenizer):
    app, engine = stub_app(thinking_tokenizer, ScriptedEngine())
    return TestClient(app), engine


CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
FORMAT = {"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}


def test_the_reply_carries_reasoning_content_and_the_grammar_starts_after_it(served):
    client, engine = served
    resp = client.post("/v1/chat/completions", json={**CHAT, **FORMAT})
    assert resp.status_code == 200, resp.text
    message = resp.json()["choices"][0]["message"]
    assert message["reasoning_content"] == "The user wants JSON."
    assert json.loads(message["content"]) == {"a": 1}
    grammar = engine.submitted[-1][2].structured_output.spec
    assert accepts(grammar, ScriptedEngine.TEXT) and not accepts(grammar, "<think>x")


def test_streamed_reasoning_comes_as_reasoning_content_deltas(served):
    client, _ = served
    resp = client.post("/v1/chat/completions", json={**CHAT, "stream": True})
    events = [json.loads(line[6:]) for line in resp.text.splitlines()
              if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "The user wants JSON."
    assert "".join(d.get("content", "") for d in deltas) == '{"a": 1}'
    assert not any("think>" in d.get("content", "") + d.get("reasoning_content", "")
                   for d in deltas)


def test_enable_thinking_false_reaches_the_template(served, thinking_tokenizer):
    client, engine = served
    body = {**CHAT, "chat_template_kwargs": {"enable_thinking": False}}
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    prompt = thinking_tokenizer.decode(engine.submitted[-1][1])
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")


@pytest.mark.parametrize("fields, param", [
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    ({"chat_template_kwargs": {"enable_thinking": True}}, "chat_template_kwargs.enable_thinking"),
])
def test_a_model_without_a_switch_refuses_the_fields_by_name(tiny_tokenizer, fields, param):
    client = TestClient(stub_app(tiny_tokenizer)[0])
    resp = client.post("/v1/chat/completions", json={**CHAT, **fields})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param


@given(st.sampled_from(["off", "optional", "inside"]),
       st.lists(st.sampled_from(["<think>", "</think>", "<", "</", "think>", " ", "\n", "a", "b"]),
                max_size=12).map("".join),
       st.lists(st.integers(0, 100), max_size=4))
@settings(max_examples=300, deadline=None)
def test_any_text_streamed_in_any_pieces_splits_as_the_whole_text(start, text, cuts):
    stream = ReasoningStream(start)
    bounds = [0, *sorted(min(c, len(text)) for c in cuts), len(text)]
    parts = [stream.feed(text[a:b]) for a, b in itertools.pairwise(bounds)] + [stream.finish()]
    reasoning = "".join(r for r, _ in parts)
    assert (reasoning or None, "".join(c for _, c in parts)) == split_reasoning(text, start)


def test_calls_are_read_after_the_reasoning_never_inside_it():
    from mstar.api_server.openai.chat_output import StreamedChoice, final_message
    from mstar.api_server.openai.chat_plan import OutputReading
    from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
    from mstar.api_server.reasoning.split import ReasoningStream as Stream
    from mstar.api_server.tools.plan import tool_plan

    req = ChatCompletionRequest.model_validate({
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "get_time"}}]})
    plan = OutputReading(tool_plan(req, "hermes", ""), lambda: Stream("optional"))
    call = '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    text = f"<think>Maybe {call}?</think>\n{call}"
    message, reason = final_message(plan, text, "stop")
    assert message["reasoning_content"] == f"Maybe {call}?" and message["content"] is None
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_time"]
    assert reason == "tool_calls"
    choice, chunks = StreamedChoice(plan), []
    for ch in text:
        chunks += choice.chunks({"index": 0, "logprobs": None, "finish_reason": None}, ch, False)
    chunks += choice.chunks({"index": 0, "logprobs": None, "finish_reason": "stop"}, "", True)
    deltas = [c["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == f"Maybe {call}?"
    heads = [d["tool_calls"][0] for d in deltas if "id" in d.get("tool_calls", [{}])[0]]
    assert [h["function"]["name"] for h in heads] == ["get_time"]
    assert chunks[-1]["finish_reason"] == "tool_calls"

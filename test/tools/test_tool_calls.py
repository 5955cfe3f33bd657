"""Tool calling without a server: the hermes parser (whole and streamed), the forced-call grammar,
what the chat template gets, and the 400s of bad tool fields."""

from __future__ import annotations

import json

import pytest

from mstar.api_server.http.errors import APIError
from mstar.api_server.openai.chat_output import StreamedChoice, final_message
from mstar.api_server.openai.chat_plan import OutputReading
from mstar.api_server.openai.chat_protocol import ChatCompletionRequest
from mstar.api_server.tools.grammar import forced_call_grammar
from mstar.api_server.tools.parsers import hermes
from mstar.api_server.tools.parsers.calls import Declared, ParsedOutput, ToolCall, collect, parse_all
from mstar.api_server.tools.parsers.registry import parser_name
from mstar.api_server.tools.plan import tool_plan
from mstar.api_server.tools.template import template_inputs

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "days": {"type": "integer", "minimum": 1}},
           "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time"}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
WEATHER_CALL = ToolCall("get_weather", '{"city": "Paris"}')
DECLARED = Declared({"get_weather": WEATHER, "get_time": {}, "f": {}})


def parse(text: str) -> ParsedOutput:
    return parse_all(hermes.stream(DECLARED), text)


def test_one_call_is_a_call_without_content():
    assert parse(CALL) == ParsedOutput(None, [WEATHER_CALL])


def test_several_calls_and_the_text_around_them():
    text = f"Let me look.\n{CALL}\n<tool_call>{{\"name\": \"get_time\"}}</tool_call>\nDone."
    assert parse(text) == ParsedOutput("Let me look.\n\n\nDone.",
                                       [WEATHER_CALL, ToolCall("get_time", "{}")])


@pytest.mark.parametrize("body", ['{"name": "f", "arguments": {"a": 1}', '["f"]',
                                  '{"arguments": {}}', '{"name": "f", "arguments": "x"}'])
def test_a_call_that_does_not_decode_stays_content(body):
    text = f"before <tool_call>{body}</tool_call> after"
    assert parse(text) == ParsedOutput(text, [])


def test_a_raw_newline_in_a_string_is_escaped_in_the_arguments():
    got = parse('<tool_call>{"name": "f", "arguments": {"s": "a\nb"}}</tool_call>')
    assert got == ParsedOutput(None, [ToolCall("f", '{"s": "a\\nb"}')])


def test_an_unfinished_call_or_tag_stays_content():
    assert parse("a <tool_call>{\"name\": \"f\"") == ParsedOutput("a <tool_call>{\"name\": \"f\"", [])
    assert parse("a <tool_ca") == ParsedOutput("a <tool_ca", [])


def test_plain_text_is_content():
    assert parse("Paris is sunny.") == ParsedOutput("Paris is sunny.", [])
    assert parse("  \n") == ParsedOutput(None, [])


STREAM_CASES = [CALL, f"Sure! {CALL} {CALL}\nok", "x <tool_call>{bad}</tool_call> y <tool_c",
                "a < b <tool_call", f"\n\n{CALL}\n\n"]


@pytest.mark.parametrize("text", STREAM_CASES)
def test_a_stream_split_anywhere_reads_as_the_whole_text(text):
    whole = parse(text)
    for cut in range(len(text) + 1):
        for second in (cut, (cut + len(text)) // 2):
            stream = hermes.stream(DECLARED)
            pieces = (stream.feed(text[:cut]) + stream.feed(text[cut:second])
                      + stream.feed(text[second:]) + stream.finish())
            assert collect(pieces) == whole, (cut, second)


def test_streamed_content_never_shows_markup():
    text = f"Sure! {CALL}"
    stream = hermes.stream(DECLARED)
    pieces = [p for ch in text for p in stream.feed(ch)] + stream.finish()
    assert all("<" not in p for p in pieces if isinstance(p, str))


def request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "Weather in Paris?"}], **fields})


def plan(**fields):
    return tool_plan(request(**fields), "auto", "{{ messages }}")


def test_stream_deltas_are_shaped_like_openai():
    choice = StreamedChoice(OutputReading(plan(tools=TOOLS)))
    chunks = []
    for ch in f"Hi {CALL}":
        chunks += choice.chunks({"index": 0, "logprobs": None, "finish_reason": None}, ch, False)
    chunks += choice.chunks({"index": 0, "logprobs": None, "finish_reason": "stop"}, "", True)
    deltas = [c["delta"] for c in chunks]
    assert "".join(d.get("content", "") for d in deltas) == "Hi"
    head, args = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert head["index"] == 0 and head["id"].startswith("call_") and head["type"] == "function"
    assert head["function"] == {"name": "get_weather", "arguments": ""}
    assert args == {"index": 0, "function": {"arguments": '{"city": "Paris"}'}}
    assert [c["finish_reason"] for c in chunks][-1] == "tool_calls"


def test_final_message_carries_tool_calls():
    message, reason = final_message(OutputReading(plan(tools=TOOLS)), f"{CALL}\n{CALL}", "stop")
    assert message["content"] is None and reason == "tool_calls"
    assert [c["function"] for c in message["tool_calls"]] == [
        {"name": "get_weather", "arguments": '{"city": "Paris"}'}] * 2
    one, _ = final_message(OutputReading(plan(tools=TOOLS, parallel_tool_calls=False)),
                           f"{CALL}\n{CALL}", "stop")
    assert len(one["tool_calls"]) == 1


def test_tool_choice_none_shows_no_tools_and_parses_nothing():
    p = plan(tools=TOOLS, tool_choice="none")
    assert p.shown_tools is None
    assert final_message(OutputReading(p), CALL, "stop") == ({"role": "assistant", "content": CALL}, "stop")


def accepts(grammar: str, text: str) -> bool:
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    return _is_grammar_accept_string(xgr.Grammar.from_ebnf(grammar), text)


def test_forced_call_grammar_allows_only_calls_valid_for_the_schema():
    grammar = plan(tools=TOOLS, tool_choice="required").structured_output.spec
    assert accepts(grammar, CALL)
    assert accepts(grammar, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    assert accepts(grammar, f"{CALL}{CALL}")
    assert not accepts(grammar, CALL.replace('"Paris"', "3"))  # city must be a string
    assert not accepts(grammar, CALL.replace('{"city": "Paris"}', "{}"))  # city is required
    assert not accepts(grammar, "Sure! " + CALL)
    named = plan(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_time"}})
    assert not accepts(named.structured_output.spec, CALL)
    assert not accepts(named.structured_output.spec,
                       '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>' * 2)


def test_grammar_keeps_refs_of_the_parameters_schema():
    schema = {"type": "object", "properties": {"d": {"$ref": "#/$defs/Day"}}, "required": ["d"],
              "$defs": {"Day": {"enum": ["mon", "tue"]}}}
    grammar = forced_call_grammar([("f", schema)], False)
    assert accepts(grammar, '<tool_call>\n{"name": "f", "arguments": {"d": "mon"}}\n</tool_call>')
    assert not accepts(grammar, '<tool_call>\n{"name": "f", "arguments": {"d": "x"}}\n</tool_call>')


def test_a_strict_function_constrains_calls_in_auto_mode_and_leaves_text_free():
    assert plan(tools=TOOLS).structured_output is None
    strict = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}, TOOLS[1]]
    grammar = plan(tools=strict).structured_output.spec
    assert accepts(grammar, "It is sunny.")
    assert accepts(grammar, f"Let me check. {CALL}")
    assert not accepts(grammar, CALL.replace('"Paris"', "3"))
    assert accepts(grammar, '<tool_call>\n{"name": "get_time", "arguments": {"any": 1}}\n</tool_call>')
    assert not accepts(grammar, '<tool_call>\n{"name": "get_news", "arguments": {}}\n</tool_call>')


CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
JSON_FORMAT = {"response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": CITY}}}


def constrained_plan(**fields):
    from mstar.api_server.openai.structured import requested_constraints
    from mstar.engine.structured.grammar_limits import GrammarLimits
    from mstar.settings import WorkerSettings

    req = request(**fields)
    found = requested_constraints(req, GrammarLimits.from_settings(WorkerSettings()))
    return tool_plan(req, "auto", "{{ messages }}", found[0][0] if found else None)


@pytest.mark.parametrize("strict", [False, True])
def test_auto_tools_with_response_format_allow_a_call_or_the_json(strict):
    tools = [{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": strict}}, TOOLS[1]]
    p = constrained_plan(tools=tools, **JSON_FORMAT)
    grammar = p.structured_output.spec
    assert accepts(grammar, '{"city": "Rome"}')
    assert not accepts(grammar, '{"town": "Rome"}') and not accepts(grammar, "It is sunny.")
    assert accepts(grammar, CALL)
    assert accepts(grammar, CALL.replace('"Paris"', "3")) is not strict  # strict: schema holds
    assert not accepts(grammar, '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>')
    called = final_message(OutputReading(p), CALL, "stop")[0]
    assert called["tool_calls"][0]["function"]["name"] == "get_weather"
    assert final_message(OutputReading(p), '{"city": "Rome"}', "stop")[0]["content"] == '{"city": "Rome"}'


def test_a_forced_call_with_response_format_constrains_this_turn_to_the_call():
    p = constrained_plan(tools=TOOLS, tool_choice="required", **JSON_FORMAT)
    assert accepts(p.structured_output.spec, CALL)
    assert not accepts(p.structured_output.spec, '{"city": "Rome"}')
    later = constrained_plan(tools=TOOLS, tool_choice="none", **JSON_FORMAT)
    assert later.structured_output.kind == "json_schema"  # the text turn follows response_format


def test_a_function_without_parameters_takes_an_empty_object():
    grammar = plan(tools=[TOOLS[1]], tool_choice="required").structured_output.spec
    assert accepts(grammar, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
    assert not accepts(grammar, '<tool_call>\n{"name": "get_time", "arguments": {"a": 1}}\n'
                                '</tool_call>')


@pytest.mark.parametrize("undeclared, content", [("text", f"Sure. {CALL}"), ("drop", "Sure.")])
def test_a_call_to_an_undeclared_function_is_never_a_tool_call(undeclared, content):
    p = tool_plan(request(tools=[TOOLS[1]]), "auto", "", None, undeclared)
    message, reason = final_message(OutputReading(p), f"Sure. {CALL}", "stop")
    assert message == {"role": "assistant", "content": content} and reason == "stop"


@pytest.mark.parametrize("fields, param", [
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]},
     "tools.0.function.parameters"),
    ({"tools": [TOOLS[1], {"type": "function", "function": {
        "name": "g", "parameters": {"type": "object", "properties": {"x": {"type": "nonsense"}}}}}],
      "tool_choice": "required"}, "tools.1.function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools.0.function.name"),
    ({"tools": [TOOLS[1], TOOLS[1]]}, "tools.1.function.name"),
])
def test_bad_tool_fields_are_a_400_naming_the_field(fields, param):
    with pytest.raises(APIError) as err:
        plan(**fields)
    assert (err.value.status, err.value.param) == (400, param)


@pytest.mark.parametrize("messages, param", [
    ([{"role": "tool", "content": "18 C", "tool_call_id": "call_x"}], "messages.0.tool_call_id"),
    ([{"role": "tool", "content": "18 C"}], "messages.0.tool_call_id"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "f", "arguments": "{oops"}}]}], "messages.0.tool_calls.0.function.arguments"),
    ([{"role": "user", "content": "x", "tool_calls": [{"id": "c", "type": "function", "function": {
        "name": "f", "arguments": "{}"}}]}], "messages.0.tool_calls"),
])
def test_bad_tool_messages_are_a_400_naming_the_field(messages, param):
    req = ChatCompletionRequest.model_validate({"messages": messages})
    with pytest.raises(APIError) as err:
        tool_plan(req, "auto", "")
    assert (err.value.status, err.value.param) == (400, param)


HISTORY = [{"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": None, "tool_calls": [{
               "id": "call_1", "type": "function",
               "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
           {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
           {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]


def test_a_template_without_tools_gets_them_as_hermes_text():
    req = request(messages=HISTORY, tools=TOOLS)
    messages, extra = template_inputs(req.messages, plan(tools=TOOLS).shown_tools, "ChatML")
    assert extra == {}
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert "<tools>\n" + json.dumps(TOOLS[0]) in messages[0]["content"]
    assert messages[2]["content"] == CALL
    assert messages[3]["content"] == ("<tool_response>\n18 C\n</tool_response>\n"
                                      "<tool_response>\nsunny\n</tool_response>")


def test_a_template_with_tools_gets_them_and_structured_messages():
    req = request(messages=HISTORY, tools=TOOLS)
    messages, extra = template_inputs(req.messages, plan(tools=TOOLS).shown_tools,
                                      "{% for t in tools %}{% endfor %}")
    assert extra["tools"][0] == TOOLS[0]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                        "arguments": {"city": "Paris"}}
    assert messages[2] == {"role": "tool", "content": "18 C", "tool_call_id": "call_1"}


def test_auto_parser_is_hermes_for_chatml_and_tool_call_templates():
    assert parser_name("auto", "<|im_start|>") == "hermes"
    assert parser_name("auto", {"default": "x", "tool_use": "<tool_call>"}) == "hermes"
    assert parser_name("hermes", "") == "hermes"

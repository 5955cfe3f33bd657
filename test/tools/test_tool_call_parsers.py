"""The tool-call parsers beside hermes (llama3_json, mistral, pythonic, qwen3_coder): each reads
its sample outputs right, reads them the same when they stream split at any character, and never
lets markup into a content delta; ``auto`` picks each from its chat template."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mstar.api_server.tools.parsers.calls import Declared, ParsedOutput, ToolCall, collect, parse_all
from mstar.api_server.tools.parsers.registry import PARSERS, parser_name, stream_factory

WEATHER = {"type": "object", "properties": {"city": {"type": "string"},
                                            "days": {"type": "integer"}}}
DECLARED = Declared({"get_weather": WEATHER, "get_time": {}})
PARIS = ToolCall("get_weather", '{"city": "Paris", "days": 2}')
TIME = ToolCall("get_time", "{}")

# parser -> [(output, expected)], the markup of each format, with text around it.
CASES: dict[str, list[tuple[str, ParsedOutput]]] = {
    "llama3_json": [
        ('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
         ParsedOutput(None, [PARIS])),
        ('<|python_tag|>{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}; '
         '{"name": "get_time", "parameters": {}}', ParsedOutput(None, [PARIS, TIME])),
        ("Paris is sunny {today}.", ParsedOutput("Paris is sunny {today}.", [])),
        ('{"city": "Paris"}', ParsedOutput('{"city": "Paris"}', [])),
        ('{"name": "get_time", "parameters": {}} and then', ParsedOutput("and then", [TIME])),
    ],
    "mistral": [
        ('Let me see.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", '
         '"days": 2}}, {"name": "get_time", "arguments": {}}]',
         ParsedOutput("Let me see.", [PARIS, TIME])),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}[TOOL_CALLS]get_time[ARGS]{}',
         ParsedOutput(None, [PARIS, TIME])),
        ("a [TOOL_CALLS]not a call", ParsedOutput("a [TOOL_CALLS]not a call", [])),
        ("use [TOOL_CALL", ParsedOutput("use [TOOL_CALL", [])),
    ],
    "pythonic": [
        ('[get_weather(city="Paris", days=2), get_time()]', ParsedOutput(None, [PARIS, TIME])),
        ('<|python_start|>[get_weather(city="Paris]", days=2)]<|python_end|>',
         ParsedOutput(None, [ToolCall("get_weather", '{"city": "Paris]", "days": 2}')])),
        ("[1] is a footnote.", ParsedOutput("[1] is a footnote.", [])),
        ("It is [sunny", ParsedOutput("It is [sunny", [])),
    ],
    "qwen3_coder": [
        ("Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
         "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
         ParsedOutput("Checking.", [PARIS])),
        ("<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n</function>\n"
         "</tool_call><tool_call><function=get_time></function></tool_call>",
         ParsedOutput(None, [ToolCall("get_weather", '{"city": "42"}'), TIME])),
        ("<tool_call>\n<function=get_weather>\nParis\n</function>\n</tool_call>",
         ParsedOutput("<tool_call>\n<function=get_weather>\nParis\n</function>\n</tool_call>", [])),
    ],
}
ALL = [(name, text, expected) for name, cases in CASES.items() for text, expected in cases]
MARKUP = ("<tool_call", "<function", "<parameter", "[TOOL_CALLS", "[ARGS", "<|python")


def read(name: str, text: str) -> ParsedOutput:
    return parse_all(stream_factory(name)(DECLARED), text)


@pytest.mark.parametrize("name, text, expected", ALL)
def test_each_parser_reads_its_format(name, text, expected):
    assert read(name, text) == expected


@pytest.mark.parametrize("name, text, expected", ALL)
def test_a_stream_split_anywhere_reads_as_the_whole_text(name, text, expected):
    for cut in range(len(text) + 1):
        for second in (cut, (cut + len(text)) // 2):
            stream = stream_factory(name)(DECLARED)
            pieces = (stream.feed(text[:cut]) + stream.feed(text[cut:second])
                      + stream.feed(text[second:]) + stream.finish())
            assert collect(pieces) == expected, (cut, second)


@pytest.mark.parametrize("name, text, expected", [c for c in ALL if c[2].calls])
def test_streamed_content_never_shows_markup(name, text, expected):
    stream = stream_factory(name)(DECLARED)
    pieces = [p for ch in text for p in stream.feed(ch)] + stream.finish()
    content = [p for p in pieces if isinstance(p, str)]
    assert not any(m in "".join(content) for m in MARKUP), content
    assert collect(pieces) == expected


@pytest.mark.parametrize("name, text", [
    ("llama3_json", '{"name": "rm_rf", "parameters": {}}'),
    ("mistral", "[TOOL_CALLS]rm_rf[ARGS]{}"),
    ("pythonic", "[rm_rf()]"),
    ("qwen3_coder", "<tool_call><function=rm_rf></function></tool_call>"),
])
def test_a_call_to_an_undeclared_function_stays_text_or_is_dropped(name, text):
    assert read(name, text) == ParsedOutput(text, [])
    dropped = parse_all(stream_factory(name)(Declared(DECLARED.functions, "drop")), text)
    assert dropped == ParsedOutput(None, [])


@pytest.mark.parametrize("template, name", [
    ("{% for t in tools %}<tool_call>\n<function={{ t.name }}>\n<parameter=x>{% endfor %}",
     "qwen3_coder"),
    ("{{ '<tool_call>' }}", "hermes"),
    ("{{ '[TOOL_CALLS]' }}", "mistral"),
    ('[func_name1(params_name1=params_value1, params_name2=params_value2...)]', "pythonic"),
    ('Respond in the format {"name": function name, "parameters": dictionary}', "llama3_json"),
    ("<|im_start|>{{ m.content }}", "hermes"),
])
def test_auto_picks_the_parser_from_the_chat_template(template, name):
    assert parser_name("auto", template) == name


FRAGMENTS = ["<tool_call>", "</tool_call>", "<function=get_time>", "</function>", "<parameter=a>",
             "</parameter>", "[TOOL_CALLS]", "[ARGS]", "<|python_tag|>", "<|python_start|>",
             "<|python_end|>", '{"name": "get_time", "parameters": {}}', "get_time", "get_time()",
             '{"a": 1}', "[", "]", "{", "}", "(", ")", ";", ",", " ", "\n", "x", "<", '"']


@given(st.sampled_from(sorted(PARSERS)),
       st.lists(st.sampled_from(FRAGMENTS), max_size=12).map("".join),
       st.lists(st.integers(0, 200), max_size=4))
@settings(max_examples=300, deadline=None)
def test_any_text_streamed_in_any_pieces_reads_as_the_whole_text(name, text, cuts):
    whole = read(name, text)
    stream = stream_factory(name)(DECLARED)
    bounds = [0, *sorted(min(c, len(text)) for c in cuts), len(text)]
    pieces = [p for a, b in itertools.pairwise(bounds) for p in stream.feed(text[a:b])]
    assert collect(pieces + stream.finish()) == whole

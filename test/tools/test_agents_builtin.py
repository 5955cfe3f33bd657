"""openai-agents over the Responses API (its default model path) and over chat completions,
written the way its docs show for a non-OpenAI server, against `mstar serve` on the built-in model
(the shared server). The protocol is judged: the run ends with a final output, tools are called
with valid arguments."""

from __future__ import annotations

import pytest
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)

agents = pytest.importorskip("agents")
pydantic = pytest.importorskip("pydantic")

MODEL = "SmolLM2-135M-Instruct"


def use_server(server, api: str) -> None:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0, timeout=60)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_default_openai_api(api)
    agents.set_tracing_disabled(True)


@pytest.fixture()
def responses_api(builtin_server):
    use_server(builtin_server, "responses")


class Weather(pydantic.BaseModel):
    city: str = pydantic.Field(max_length=40)  # bounded: the JSON always fits max_tokens
    summary: str = pydantic.Field(max_length=60)


def _weather_agent(calls: list[str], **kw):
    @agents.function_tool  # strict, as openai-agents makes every function tool by default
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        calls.append(city)
        return "18 C and sunny"

    return agents.Agent(name="Assistant", instructions="Answer briefly.", model=MODEL,
                        tools=[get_weather], **kw)


@pytest.mark.parametrize(("api", "stream"), [("responses", False), ("responses", True),
                                             ("chat_completions", False)],
                         ids=["responses", "responses-streamed", "chat-completions"])
def test_an_agent_calls_its_strict_tool_and_answers(builtin_server, api, stream):
    use_server(builtin_server, api)
    calls: list[str] = []
    settings = agents.ModelSettings(tool_choice="required", max_tokens=40, temperature=0)
    agent = _weather_agent(calls, model_settings=settings)
    question = "What is the weather in Paris?"
    if stream:
        import asyncio

        async def run():
            result = agents.Runner.run_streamed(agent, question, max_turns=4)
            async for _ in result.stream_events():
                pass
            return result

        result = asyncio.run(run())
    else:
        result = agents.Runner.run_sync(agent, question, max_turns=4)
    assert calls and all(isinstance(city, str) for city in calls)
    assert isinstance(result.final_output, str) and result.final_output.strip()


def test_an_agent_with_a_strict_tool_and_an_output_type(responses_api):
    """Default settings: the strict tool and the output type's text.format go together. The run
    ends in the output type, or (the 135M model's choice, not judged) keeps calling its tool."""
    calls: list[str] = []
    agent = _weather_agent(calls, output_type=Weather,
                           model_settings=agents.ModelSettings(max_tokens=100))
    try:
        output = agents.Runner.run_sync(agent, "What is the weather in Paris?",
                                        max_turns=3).final_output
    except agents.MaxTurnsExceeded:
        output = None
    assert isinstance(output, Weather) or (output is None and calls)

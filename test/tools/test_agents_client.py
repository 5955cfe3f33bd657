"""openai-agents against `mstar serve` on the built-in model, written the way its docs show: an
Agent with a tool (strict, the library's default) and an ``output_type``, over chat completions.

The library sends the tool (``strict: true``) together with a json_schema ``response_format``;
each turn must be answered, and the run must end in the output type or in the tool being called.
The 135M model's choices are not judged: a run that keeps calling its tool until ``max_turns`` is
a protocol success too.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import pytest
from pydantic import BaseModel
from serve_helpers import hard_timeout  # noqa: F401 (hard_timeout: autouse)

agents = pytest.importorskip("agents")


class Forecast(BaseModel):
    sunny: bool


def test_an_agent_with_a_strict_tool_and_an_output_type(builtin_server):
    from openai import AsyncOpenAI

    calls: list[str] = []

    @agents.function_tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """The current weather in a city."""
        calls.append(city)
        return "18 degrees and sunny"

    agents.set_tracing_disabled(True)  # no trace export: nothing leaves the machine
    client = AsyncOpenAI(base_url=builtin_server.url + "/v1", api_key="x", max_retries=0)
    model = agents.OpenAIChatCompletionsModel(model="SmolLM2-135M-Instruct", openai_client=client)
    agent = agents.Agent(name="weather", instructions="Answer about the weather.", model=model,
                         tools=[get_weather], output_type=Forecast,
                         model_settings=agents.ModelSettings(temperature=0, max_tokens=80))

    async def run():
        try:
            result = await agents.Runner.run(agent, "Is it sunny in Paris?", max_turns=3)
        except agents.MaxTurnsExceeded:
            return None
        return result.final_output

    output = asyncio.run(run())
    assert isinstance(output, Forecast) or (output is None and calls)

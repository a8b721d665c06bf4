"""An agent of the OpenAI Agents SDK (``openai-agents``) traced by OpenInference's
instrumentation (``openinference-instrumentation-openai-agents``), exporting with the OTel SDK
configured by the standard variables alone, as a user runs one:
``python -m tests.traces.openai_agents_agent``. ``OPENAI_BASE_URL`` is the model it calls (the
chat completions API). It asks one question, which its one tool answers. ``--with-openai``
instruments the OpenAI client too (``openinference-instrumentation-openai``), as a user with
both does: each model call is then recorded twice, the SDK's ``generation`` span over the
client's ``ChatCompletion``."""

from __future__ import annotations

import os
import sys

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
)
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"rain in {city}"


def main() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    # Only OpenInference's processor: the SDK's own exports to OpenAI's platform.
    OpenAIAgentsInstrumentor().instrument(tracer_provider=tracer_provider, exclusive_processor=True)
    if "--with-openai" in sys.argv:
        from openinference.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=tracer_provider)
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="test-key")
    agent = Agent(
        name="Weather agent",
        instructions="Be brief.",
        model=OpenAIChatCompletionsModel(model="gpt-4o", openai_client=client),
        tools=[get_weather],
    )
    print(Runner.run_sync(agent, "Weather in Paris?").final_output)
    tracer_provider.shutdown()


if __name__ == "__main__":
    main()

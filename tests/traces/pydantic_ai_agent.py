"""A Pydantic AI agent with its instrumentation on (``Agent.instrument_all``), exporting with
the OTel SDK configured by the standard variables alone, as a user runs one:
``python -m tests.traces.pydantic_ai_agent``. ``OPENAI_BASE_URL`` is the model it calls (the
chat completions API). It asks one question, which its one tool answers."""

from __future__ import annotations

import os

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


def main() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    Agent.instrument_all(InstrumentationSettings(tracer_provider=tracer_provider))
    provider = OpenAIProvider(base_url=os.environ["OPENAI_BASE_URL"], api_key="test-key")
    agent = Agent(OpenAIChatModel("gpt-4o", provider=provider), system_prompt="Be brief.")

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"rain in {city}"

    print(agent.run_sync("Weather in Paris?").output)
    tracer_provider.shutdown()


if __name__ == "__main__":
    main()

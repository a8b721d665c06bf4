"""A LangChain agent (``langchain-core`` with ``langchain-openai``) traced by OpenInference's
instrumentation (``openinference-instrumentation-langchain``), configured by the standard
variables alone, as a user runs one: ``python -m tests.traces.langchain_agent`` sets up the
OTel SDK in code; ``opentelemetry-instrument python -m tests.traces.langchain_agent
--zero-code`` leaves it all to OpenTelemetry's zero-code instrumentation (the agent itself
has no OTel code). ``OPENAI_BASE_URL`` is the model it calls. It asks one question, which its
one tool answers: the model asks for the tool, the agent calls it and gives the model its
result."""

from __future__ import annotations

import sys
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"rain in {city}"


def ask(question: str) -> Any:
    """The agent's answer to ``question``."""
    model = ChatOpenAI(model="gpt-4o").bind_tools([get_weather])  # OPENAI_API_KEY, OPENAI_BASE_URL

    def answer(question: str) -> Any:
        messages: list[BaseMessage] = [SystemMessage("Be brief."), HumanMessage(question)]
        while True:
            reply = model.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                return reply.content
            for call in reply.tool_calls:
                result = get_weather.invoke(call["args"])
                messages.append(ToolMessage(result, tool_call_id=call["id"]))

    return RunnableLambda(answer).with_config(run_name="weather agent").invoke(question)


def main() -> None:
    if "--zero-code" in sys.argv:
        print(ask("Weather in Paris?"))  # opentelemetry-instrument exports at exit
        return
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    LangChainInstrumentor().instrument(tracer_provider=tracer_provider)
    print(ask("Weather in Paris?"))
    tracer_provider.shutdown()


if __name__ == "__main__":
    main()

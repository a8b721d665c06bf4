"""An agent whose OpenAI calls an instrumentation records, configured by the standard
variables alone, as a user runs one: ``python -m tests.traces.openai_agent <instrumentation>``,
one of ``otel`` (OpenTelemetry's own, ``opentelemetry-instrumentation-openai-v2``),
``openinference`` (Arize's, ``openinference-instrumentation-openai``) and ``openllmetry``
(Traceloop's, ``opentelemetry-instrumentation-openai``).

``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_HEADERS`` say where its spans (and log
records) go (OTLP/HTTP protobuf), ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` and
``OTEL_SEMCONV_STABILITY_OPT_IN`` how OpenTelemetry's instrumentation records the model call,
and ``OPENAI_BASE_URL`` which model it calls. It asks one question, offering a tool, inside a
span of its own, then shuts its providers down: the log records go first, as they do when an
exporter's schedule sends them before the span has ended.
"""

from __future__ import annotations

import sys

import openai
from openai.types.chat import ChatCompletionFunctionToolParam
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

WEATHER_TOOL: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def instrument(name: str, tracer_provider: TracerProvider, logger_provider: LoggerProvider) -> None:
    if name == "otel":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(
            tracer_provider=tracer_provider, logger_provider=logger_provider
        )
    elif name == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        OpenInference().instrument(tracer_provider=tracer_provider)
    elif name == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetry

        OpenLLMetry().instrument(tracer_provider=tracer_provider)
    else:
        raise SystemExit(f"unknown instrumentation {name!r}: otel, openinference, openllmetry")


def main() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    instrument(sys.argv[1] if len(sys.argv) > 1 else "otel", tracer_provider, logger_provider)
    client = openai.OpenAI()
    with tracer_provider.get_tracer("weather.agent").start_as_current_span("weather agent"):
        client.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
            ],
            tools=[WEATHER_TOOL],
        )
    logger_provider.shutdown()
    tracer_provider.shutdown()


if __name__ == "__main__":
    main()

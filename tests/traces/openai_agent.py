"""An agent instrumented with OpenTelemetry's own OpenAI instrumentation
(``opentelemetry-instrumentation-openai-v2``), configured by the standard variables alone,
as a user runs one: ``python -m tests.traces.openai_agent``.

``OTEL_EXPORTER_OTLP_ENDPOINT`` and ``OTEL_EXPORTER_OTLP_HEADERS`` say where its spans and log
records go (OTLP/HTTP protobuf), ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` and
``OTEL_SEMCONV_STABILITY_OPT_IN`` how the instrumentation records the model call, and
``OPENAI_BASE_URL`` which model it calls. It asks one question inside a span of its own, then
shuts its providers down: the log records go first, as they do when an exporter's schedule
sends them before the span has ended.
"""

from __future__ import annotations

import openai
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor


def main() -> None:
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
    OpenAIInstrumentor().instrument(
        tracer_provider=tracer_provider, logger_provider=logger_provider
    )
    client = openai.OpenAI()
    with tracer_provider.get_tracer("weather.agent").start_as_current_span("weather agent"):
        client.chat.completions.create(
            model="gpt-4o",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
            ],
        )
    logger_provider.shutdown()
    tracer_provider.shutdown()


if __name__ == "__main__":
    main()

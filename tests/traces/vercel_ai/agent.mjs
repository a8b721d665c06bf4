// A Vercel AI SDK agent as a user runs one: telemetry on, the OpenTelemetry Node SDK with the
// OTLP/HTTP protobuf exporter (the OTLP/JSON one with OTEL_EXPORTER_OTLP_PROTOCOL=http/json),
// configured by OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS alone; the model at
// OPENAI_BASE_URL (the chat completions API). One generateText call that calls a tool, then
// answers.
import { NodeSDK } from "@opentelemetry/sdk-node";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { OTLPTraceExporter as OTLPJsonTraceExporter } from "@opentelemetry/exporter-trace-otlp-http";
import { generateText, stepCountIs, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { z } from "zod";

const json = process.env.OTEL_EXPORTER_OTLP_PROTOCOL === "http/json";
const sdk = new NodeSDK({
  traceExporter: json ? new OTLPJsonTraceExporter() : new OTLPTraceExporter(),
});
sdk.start();
const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: "test-key" });
const result = await generateText({
  model: openai.chat("gpt-4o"),
  prompt: "Weather in Paris?",
  tools: {
    getWeather: tool({
      description: "The weather in a city",
      inputSchema: z.object({ city: z.string() }),
      execute: async ({ city }) => ({ city, sky: "rain" }),
    }),
  },
  stopWhen: stepCountIs(3),
  experimental_telemetry: { isEnabled: true, functionId: "weather" },
});
console.log(result.text);
await sdk.shutdown();

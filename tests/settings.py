"""Settings for the test suite: the project's settings on PostgreSQL, with fast hashing."""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault(
    "DATABASE_URL",
    os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/devassist"),
)
os.environ.setdefault("DEVASSIST_VAR_DIR", tempfile.mkdtemp(prefix="devassist-test-var-"))
os.environ.setdefault("LOG_FORMAT", "console")
os.environ.setdefault("LOG_LEVEL", "WARNING")
# The suite chooses its own services and model: the developer's environment must not leak in.
for name in (
    "REDIS_URL",
    "LLM_BASE_URL",
    "LLM_BACKEND",
    "AGENT_PROTOCOL",
    "LLM_MODEL",
    "LLM_API_KEY",
    "CHROMA_URL",
    "EMBEDDINGS_BACKEND",
    "EMBEDDINGS_MODEL",
    "EMBEDDINGS_BASE_URL",
    "EMBEDDINGS_API_KEY",
    "EMBEDDINGS_TIMEOUT_S",
    "EMBEDDINGS_MAX_RETRIES",
    "EMBEDDINGS_BATCH_SIZE",
    "EMBEDDINGS_DIMENSIONS",
    "EMBEDDINGS_DEVICE",
    "EMBEDDINGS_ALLOW_DOWNLOAD",
    "LANGFUSE_PUBLIC_KEY",
    "LANGFUSE_SECRET_KEY",
    "LANGFUSE_BASE_URL",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_SDK_DISABLED",
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
):
    os.environ.pop(name, None)
# Chroma and the BM25 indexes never touch the repository's var/.
os.environ["CHROMA_PATH"] = tempfile.mkdtemp(prefix="devassist-test-chroma-")
# A model title is one more model call after a conversation's first exchange, which would take
# a reply from every scripted model's script: the tests of titles ask for it themselves.
os.environ["CHAT_TITLES"] = "heuristic"

from devassist.settings import *  # noqa: E402, F403

SANDBOX_WARM_ON_START = False
# Lease tests beat by hand (agent.leases.LeaseKeeper.beat): no thread of this process reaps
# the stale runs they make. Servers the tests start keep their keeper.
RUN_LEASE_KEEPER = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")

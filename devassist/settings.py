"""DevAssist settings. Production differs from development only by environment variables.

See the configuration table in README.md for every variable read here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import dj_database_url

from devassist.env import (
    env_bool,
    env_choice,
    env_float,
    env_http_url,
    env_int,
    env_json,
    env_list,
    env_str,
    persistent_secret_key,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("DEVASSIST_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", default=False)
# Without SECRET_KEY a random key is generated once and kept in var/, so a fresh install is
# secure and sessions survive restarts.
SECRET_KEY = env_str("SECRET_KEY") or persistent_secret_key(VAR_DIR / "secret_key")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "ninja",  # serves Swagger UI from its own static files, not a CDN
    "template_partials",
    "devassist",
    "traces",
    "sandbox",
    "agent",
    "chat",
]

MIDDLEWARE = [
    "devassist.middleware.RequestIdMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    # The language: the language cookie (set from the user's stored choice by the switch and
    # at login, devassist/views.py), else the browser's Accept-Language (docs/i18n.md).
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Pages need a login (Django's, sending a page's HTMX requests to it whole); the API's
    # views are exempt (devassist/urls.py) and answer 401 in the error envelope themselves
    # (a session, or a bearer token).
    "devassist.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "devassist.urls"
ASGI_APPLICATION = "devassist.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "devassist.context_processors.preferences",
                "devassist.context_processors.catalog",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'devassist.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql" and env_bool(
    "DATABASE_POOL", default=True
):
    # Django's ASGI handler runs each request's ORM work on a thread of its own, so without a
    # pool every request opens a new connection (several ms each).
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": env_int("DATABASE_POOL_MIN", 2),
        "max_size": env_int("DATABASE_POOL_MAX", 20),
        "timeout": 10,
    }
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Concurrent readers beside the one writer, and writers wait instead of failing at once.
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }

REDIS_URL = env_str("REDIS_URL")
#: A group entry of a process that died (or lost its connection) is gone after this long;
#: followers re-join their groups well before it passes.
CHANNELS_GROUP_EXPIRY_S = env_int("CHANNELS_GROUP_EXPIRY_S", 300)
#: Messages waiting on one channel before more are dropped: a process reads every event of
#: every run and trace it follows through one channel (devassist/follow.py).
CHANNEL_CAPACITY = 10_000
if REDIS_URL:
    from devassist.channel_layer import redis_layer_config

    CHANNEL_LAYERS = {
        "default": redis_layer_config(
            REDIS_URL,
            prefix=env_str("CHANNELS_PREFIX", "devassist"),
            group_expiry_s=CHANNELS_GROUP_EXPIRY_S,
            capacity=CHANNEL_CAPACITY,
        )
    }
else:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels.layers.InMemoryChannelLayer",
            "CONFIG": {"capacity": CHANNEL_CAPACITY},
        }
    }

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

# The UI's languages (docs/i18n.md): English, the default, and Simplified Chinese. A browser
# asking for zh, zh-CN or zh-SG gets zh-hans.
LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
# The language cookie holds the user's choice (devassist/views.py): it outlives the browser
# session, as the choice does, and no script reads it.
LANGUAGE_COOKIE_AGE = 365 * 24 * 60 * 60
LANGUAGE_COOKIE_HTTPONLY = True
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "static"
# "artifacts": the files programs write (traces/artifacts.py), on the local disk by default;
# ARTIFACT_STORAGE_BACKEND names another (storages.backends.s3.S3Storage from django-storages,
# say) with ARTIFACT_STORAGE_OPTIONS as a JSON object.
STORAGES: dict[str, Any] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "artifacts": {
        "BACKEND": env_str(
            "ARTIFACT_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"
        ),
        "OPTIONS": env_json("ARTIFACT_STORAGE_OPTIONS") or {"location": str(VAR_DIR / "artifacts")},
    },
}

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", default=False)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
LANGUAGE_COOKIE_SECURE = SESSION_COOKIE_SECURE

# Request bodies above this are refused with 413 (the trace ingestion API relies on it).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 10 * 1024 * 1024)

# Trace store and API limits.
TRACE_BATCH_MAX_STEPS = 1000
TRACE_NODE_WINDOW_MAX = 500
TRACE_EVENT_PAGE_MAX = 1000

# A finished trace's whole tree (GET /api/traces/{id}/tree, compact) of at least
# TRACE_TREE_CACHE_MIN_STEPS steps is kept encoded after its first read, in each server
# process, for the TRACE_TREE_CACHE_ENTRIES trees read last (about 0.9 KB a step: 8 trees of
# 10,000 steps keep about 70 MB); 0 entries keeps none (docs/traces.md).
TRACE_TREE_CACHE_MIN_STEPS = env_int("TRACE_TREE_CACHE_MIN_STEPS", 2_000)
_TREE_CACHE_ENTRIES = env_int("TRACE_TREE_CACHE_ENTRIES", 8)
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "trace_trees": {
        # (LocMemCache with MAX_ENTRIES 0 would keep every tree: its cull drops a fraction.)
        "BACKEND": "django.core.cache.backends."
        + ("locmem.LocMemCache" if _TREE_CACHE_ENTRIES > 0 else "dummy.DummyCache"),
        "LOCATION": "trace-trees",
        "TIMEOUT": None,  # a kept tree makes way for newer ones, never for its age
        "OPTIONS": {"MAX_ENTRIES": _TREE_CACHE_ENTRIES, "CULL_FREQUENCY": 4},
    },
}

# OTLP/HTTP ingestion at /v1/traces (docs/opentelemetry.md): a request's body, decompressed,
# is at most MAX_REQUEST_BYTES; it holds at most OTLP_MAX_SPANS spans (more: 413); a span with
# more attributes (its own, or an event's, a link's, the resource's) or events or links than
# these, or a value longer than OTLP_MAX_VALUE_CHARS, is rejected (OTLP partial success).
OTLP_MAX_SPANS = env_int("OTLP_MAX_SPANS", 10_000)
OTLP_MAX_ATTRIBUTES = env_int("OTLP_MAX_ATTRIBUTES", 2_000)
OTLP_MAX_EVENTS = env_int("OTLP_MAX_EVENTS", 1_000)
OTLP_MAX_VALUE_CHARS = env_int("OTLP_MAX_VALUE_CHARS", 1_048_576)
# OTLP/gRPC ingestion (``manage.py otlp_grpc``, a process of its own) listens here.
OTLP_GRPC_ADDRESS = env_str("OTLP_GRPC_ADDRESS", "127.0.0.1:4317")

# Docker engine for the sandbox and /healthz; empty means docker-py's default (DOCKER_HOST or
# the local socket).
DOCKER_HOST = env_str("DOCKER_HOST")

# The sandbox image: built by `manage.py sandbox_image build` from sandbox/image/Dockerfile when
# a registry is reachable, otherwise with debootstrap from this Debian mirror (default: the one
# in the machine's apt sources) and `docker import`.
SANDBOX_IMAGE_REPOSITORY = env_str("SANDBOX_IMAGE_REPOSITORY", "devassist-sandbox")
SANDBOX_DEBIAN_MIRROR = env_str("SANDBOX_DEBIAN_MIRROR")
SANDBOX_DEBIAN_SUITE = env_str("SANDBOX_DEBIAN_SUITE", "bookworm")
SANDBOX_EXTRA_PACKAGES = env_list("SANDBOX_EXTRA_PACKAGES", [])

# Where untrusted code runs (Django's backend idiom). The options are the container limits.
SANDBOX: dict[str, Any] = {
    "BACKEND": env_str("SANDBOX_BACKEND", "sandbox.backends.docker.DockerSandbox"),
    "OPTIONS": {
        "memory_mb": env_int("SANDBOX_MEMORY_MB", 256),
        "pids_limit": env_int("SANDBOX_PIDS_LIMIT", 128),
        "cpus": env_float("SANDBOX_CPUS", 1.0),
        "tmpfs_mb": env_int("SANDBOX_TMPFS_MB", 64),
        "pool_size": env_int("SANDBOX_POOL_SIZE", 2),
        "output_limit_chars": env_int("SANDBOX_OUTPUT_LIMIT_CHARS", 20_000),
        # An OCI runtime the engine knows (`runsc` for gVisor); empty: the engine's default.
        "runtime": env_str("SANDBOX_RUNTIME"),
        # Set as the org.devassist.session label on every container (the test suite uses it to
        # tell its own servers' containers from others on the same engine); empty: no label.
        "session_label": env_str("SANDBOX_SESSION_LABEL"),
        # What one execution brings back from /tmp/outputs (its matplotlib figures included):
        # at most this many files, each and all together at most this many bytes; the rest
        # are listed as skipped, with the reason.
        "output_files_max": env_int("SANDBOX_OUTPUT_FILES_MAX", 20),
        "output_file_max_bytes": env_int("SANDBOX_OUTPUT_FILE_MAX_BYTES", 10 * 1024 * 1024),
        "output_files_max_bytes": env_int("SANDBOX_OUTPUT_FILES_MAX_BYTES", 25 * 1024 * 1024),
        # A run's interpreter (SANDBOX_STATE=run) serves it at most this long (then a fresh
        # one, and the observation says the state was lost); its container expires then, and
        # any process's reaper removes it.
        "session_max_s": env_float("SANDBOX_SESSION_MAX_S", 3600.0),
    },
}
# "run": a run's execute_code calls share one interpreter (variables, imports and files
# persist, as a notebook's cells do); "call": each call starts from nothing.
SANDBOX_STATE = env_choice("SANDBOX_STATE", "run", ("run", "call"))
# Files given to a run (copied read-only under /tmp/inputs for its executions): at most this
# many, each and all together at most this many bytes (413 past them). They take room in the
# container's /tmp (SANDBOX_TMPFS_MB) and its memory.
SANDBOX_INPUT_FILES_MAX = env_int("SANDBOX_INPUT_FILES_MAX", 10)
SANDBOX_INPUT_FILE_MAX_BYTES = env_int("SANDBOX_INPUT_FILE_MAX_BYTES", 10 * 1024 * 1024)
SANDBOX_INPUT_FILES_MAX_BYTES = env_int("SANDBOX_INPUT_FILES_MAX_BYTES", 20 * 1024 * 1024)
# Overrides of the AST scan's policy (sandbox.scanner.ScanPolicy.with_overrides), e.g.
# {"disabled_rules": ["dynamic"], "read_allowed_paths": {"add": ["/data"]}}.
SANDBOX_SCAN_POLICY: dict[str, Any] = {}
# Start the warm pool when the ASGI application loads, instead of at the first execution.
SANDBOX_WARM_ON_START = env_bool("SANDBOX_WARM_ON_START", default=True)
# Executions this process runs at once (sandbox/slots.py; more wait in turn), and how many of
# them one user may hold, running or waiting: one more answers 429 sandbox_busy.
SANDBOX_SLOTS = env_int("SANDBOX_SLOTS", 6)
SANDBOX_USER_SLOTS = env_int("SANDBOX_USER_SLOTS", max(1, SANDBOX_SLOTS // 2))

# The language model (only agent/llm/ talks to it). With no LLM_BASE_URL the offline provider
# answers: deterministic, network-free, still speaking the ReAct protocol.
LLM_BASE_URL = env_str("LLM_BASE_URL")
LLM_API_KEY = env_str("LLM_API_KEY")
LLM_MODEL = env_str("LLM_MODEL", "gpt-4o-mini" if LLM_BASE_URL else "offline")
LLM = {
    "BACKEND": env_str(
        "LLM_BACKEND",
        "agent.llm.openai_provider.OpenAIProvider"
        if LLM_BASE_URL
        else "agent.llm.offline.OfflineProvider",
    ),
    "OPTIONS": {
        "base_url": LLM_BASE_URL,
        "api_key": LLM_API_KEY,
        "model": LLM_MODEL,
        "timeout_s": env_float("LLM_TIMEOUT_S", 60.0),
        "max_retries": env_int("LLM_MAX_RETRIES", 2),
        "temperature": env_float("LLM_TEMPERATURE", 0.0),
        "max_tokens": env_int("LLM_MAX_TOKENS", 1024),
    },
}

# How the agent talks to the model (agent/protocols.py, docs/react-protocol.md): "react", the
# ReAct text protocol any model can follow, or "tools", native tool calling (OpenAI
# ``tools``/``tool_calls``) for models trained for it.
AGENT_PROTOCOL = env_choice("AGENT_PROTOCOL", "react", ("react", "tools"))

# Every running run has a lease held by the worker that executes it (agent/leases.py): the
# worker renews its runs' leases every RUN_HEARTBEAT_S, and any worker fails a run whose lease
# is older than RUN_LEASE_S (its worker died) with ``worker_lost``.
RUN_HEARTBEAT_S = env_float("RUN_HEARTBEAT_S", 10.0)
RUN_LEASE_S = env_float("RUN_LEASE_S", 30.0)
RUN_LEASE_KEEPER = True  # the test suite beats by hand
# Runs of this process that do their own work at once (agent/slots.py); a run waiting on the
# model or a tool holds none. 0: no limit.
AGENT_RUN_SLOTS = env_int("AGENT_RUN_SLOTS", 2)
# Seconds between SSE heartbeat comments (``: ping``) on a quiet stream.
SSE_HEARTBEAT_S = env_float("SSE_HEARTBEAT_S", 15.0)

# Knowledge (only agent/knowledge/ talks to Chroma). Chroma runs embedded under CHROMA_PATH
# unless CHROMA_URL names a Chroma server; the BM25 indexes always live under CHROMA_PATH.
CHROMA_PATH = Path(env_str("CHROMA_PATH", str(VAR_DIR / "chroma")))
CHROMA_URL = env_str("CHROMA_URL")
# Text to vectors (Django's backend idiom). The default is offline and lexical (BM25 ranks);
# a dense backend makes retrieval hybrid. Backends ignore the options they do not use.
EMBEDDINGS: dict[str, Any] = {
    "BACKEND": env_str(
        "EMBEDDINGS_BACKEND", "agent.knowledge.embeddings.lexical.LexicalEmbeddings"
    ),
    "OPTIONS": {
        "model": env_str("EMBEDDINGS_MODEL"),
        "base_url": env_str("EMBEDDINGS_BASE_URL"),
        "api_key": env_str("EMBEDDINGS_API_KEY"),
        # The openai backend: per-request timeout, the SDK's retries (connection errors,
        # timeouts, 408, 409, 429, 5xx), texts per request, and shorter vectors (0: the
        # model's own length).
        "timeout_s": env_float("EMBEDDINGS_TIMEOUT_S", 30.0),
        "max_retries": env_int("EMBEDDINGS_MAX_RETRIES", 2),
        "batch_size": env_int("EMBEDDINGS_BATCH_SIZE", 64),
        "dimensions": env_int("EMBEDDINGS_DIMENSIONS", 0) or None,
        # The sentence-transformers backend: torch device, and whether a model name missing
        # from the local Hugging Face cache may be downloaded (never, by default).
        "device": env_str("EMBEDDINGS_DEVICE", "cpu"),
        "allow_download": env_bool("EMBEDDINGS_ALLOW_DOWNLOAD", default=False),
    },
}
KNOWLEDGE_DEFAULT_COLLECTION = env_str("KNOWLEDGE_DEFAULT_COLLECTION", "devassist_docs")
# Uploads to /api/collections/{name}/documents above this many bytes (per request) get 413.
KNOWLEDGE_UPLOAD_MAX_BYTES = env_int("KNOWLEDGE_UPLOAD_MAX_BYTES", 5 * 1024 * 1024)

# Conversation memory (chat/memory.py): the last MEMORY_SHORT_TERM_TURNS turns go back to the
# model; turns older than that are summarised into facts (Chroma collection agent_memory) once
# MEMORY_SUMMARY_THRESHOLD of them have accumulated.
MEMORY = {
    "short_term_turns": env_int("MEMORY_SHORT_TERM_TURNS", 20),
    "cached_conversations": env_int("MEMORY_CACHED_CONVERSATIONS", 200),
    "summary_threshold": env_int("MEMORY_SUMMARY_THRESHOLD", 12),
    "max_facts": env_int("MEMORY_MAX_FACTS", 8),
    "recall_summaries": env_int("MEMORY_RECALL_SUMMARIES", 3),
    "collection": "agent_memory",
}

# Chat (docs/chat.md): conversation titles summarised by the model from the first exchange
# ("model"; the offline provider keeps the first message's) or always the first message's
# ("heuristic"); how long a deleted conversation can be restored.
CHAT_TITLES = env_choice("CHAT_TITLES", "model", ("model", "heuristic"))
CHAT_UNDO_DELETE_S = env_float("CHAT_UNDO_DELETE_S", 10.0)

# Langfuse (agent/langfuse.py): runs are exported as traces when both keys are set.
LANGFUSE_PUBLIC_KEY = env_str("LANGFUSE_PUBLIC_KEY")
LANGFUSE_SECRET_KEY = env_str("LANGFUSE_SECRET_KEY")
LANGFUSE_BASE_URL = env_str("LANGFUSE_BASE_URL", "https://cloud.langfuse.com")

# OpenTelemetry export of every run (agent/otel.py, docs/opentelemetry.md): on when an OTLP
# endpoint is set. The SDK reads the other standard OTEL_* variables (headers, timeout,
# compression, OTEL_BSP_* batching, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) itself.
OTLP_EXPORT_PROTOCOLS = ("http/protobuf", "grpc")  # the OTel SDK's exporters for Python
# The protocol: http/protobuf (the default) or grpc; the traces' own variable comes first, as the
# OTel specification has it. The Python SDK has no http/json exporter, so that value (or any
# other) stops the start with its reason rather than leaving the export silently off.
OTEL_EXPORTER_OTLP_PROTOCOL = env_choice(
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if env_str("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
    else "OTEL_EXPORTER_OTLP_PROTOCOL",
    "http/protobuf",
    OTLP_EXPORT_PROTOCOLS,
)
# Over OTLP/HTTP the endpoint is a URL: one without its scheme (collector:4318) stops the start,
# as the SDK would otherwise fail every export with an error in the log alone. gRPC's exporter
# also takes the collector's bare address (collector:4317).
_otlp_endpoint = env_http_url if OTEL_EXPORTER_OTLP_PROTOCOL == "http/protobuf" else env_str
OTEL_EXPORTER_OTLP_ENDPOINT = _otlp_endpoint("OTEL_EXPORTER_OTLP_ENDPOINT")
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = _otlp_endpoint("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
OTEL_SDK_DISABLED = env_bool("OTEL_SDK_DISABLED", default=False)
# The spans the export holds while its collector is slow or down (the SDK's BatchSpanProcessor
# queue; a run that does not fit is left out whole, agent.otel._QueueRoom), and the most it
# sends in one batch (cut to the queue's size: the SDK would refuse every export).
OTEL_BSP_MAX_QUEUE_SIZE = env_int("OTEL_BSP_MAX_QUEUE_SIZE", 2048, minimum=1)
OTEL_BSP_MAX_EXPORT_BATCH_SIZE = env_int("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, minimum=1)
# Prompts, completions, tool arguments and results leave only when this allows it (true,
# span_only, event_only, span_and_event; agent.otel.Capture). Any other value than these and
# the ones that say no stops the start: a misspelt "on" left the content out silently.
OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT = env_choice(
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT",
    "no_content",
    (
        "no_content",
        "false",
        "0",
        "no",
        "true",
        "1",
        "yes",
        "span_only",
        "event_only",
        "span_and_event",
    ),
)

LOG_FORMAT = env_str("LOG_FORMAT", "console" if DEBUG else "json")
LOG_LEVEL = env_str("LOG_LEVEL", "INFO")

from devassist.logs import configure_logging  # noqa: E402

configure_logging(log_format=LOG_FORMAT, level=LOG_LEVEL)
LOGGING_CONFIG = None

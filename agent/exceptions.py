"""The agent's domain errors: runs, the model, tools, the knowledge base.

They say what went wrong; ``devassist.api`` maps their kinds (``devassist.exceptions``) to HTTP
statuses. The loop, the tools and the providers raise them without knowing about HTTP.
"""

from __future__ import annotations

from devassist.exceptions import (
    Conflict,
    Forbidden,
    Internal,
    InvalidInput,
    NotFound,
    OutOfTime,
    Unavailable,
    UpstreamFailed,
    UpstreamTimeout,
)

# --- runs ---------------------------------------------------------------------------------


class AgentInputInvalid(InvalidInput):
    code = "agent_input_invalid"


class RunNotFound(NotFound):
    code = "run_not_found"


class RunFinished(Conflict):
    code = "run_finished"


class RunNotYours(Forbidden):
    """Only the user who started a run can stop it."""


class RunCancelled(Conflict):
    """A run the caller waited for was stopped. ``details``: ``run_id``, ``trace_id`` and,
    when it has one, ``conversation_id``."""

    code = "run_cancelled"


class RunFailed(Internal):
    """A run the caller waited for failed with an error this module has no class for; its
    stored code is kept. ``details`` as for ``RunCancelled``."""


class AgentMaxIterations(OutOfTime):
    """The loop used all its iterations (and the last "answer now" call) without a final
    answer."""

    code = "agent_max_iterations"


class AgentFormatErrors(UpstreamFailed):
    """The loop stopped because the model's replies could not be read: too many in a row
    were neither a tool call nor an answer (``LoopConfig.max_format_errors``), and the last
    "answer now" call gave none either."""

    code = "agent_format_errors"


# --- the model ----------------------------------------------------------------------------


class LLMUnavailable(UpstreamFailed):
    """The model endpoint failed (connection refused, 5xx, bad answer)."""

    code = "llm_unavailable"


class LLMTimeout(UpstreamTimeout):
    """The model endpoint did not answer in time (after the retries)."""

    code = "llm_timeout"


# --- tools --------------------------------------------------------------------------------


class ToolDefinitionInvalid(Internal):
    """A tool cannot be defined or registered as written (a programming error, raised at
    start-up)."""

    code = "tool_definition_invalid"


class ToolSchemaInvalid(ToolDefinitionInvalid):
    """A tool's argument or result schema is not a valid JSON Schema (draft 2020-12), or its
    argument schema is not an object schema."""

    code = "tool_schema_invalid"


class ToolInputInvalid(InvalidInput):
    """The arguments do not match the tool's schema. ``details``: ``tool``, ``path`` (a
    JSONPath into the arguments, ``$.top_k``), ``reason``, ``schema_path`` (a JSON Pointer
    into the schema)."""

    code = "tool_input_invalid"


class ToolAlreadyRegistered(Conflict):
    code = "tool_already_registered"


class ToolNotFound(NotFound):
    """``details``: ``tool``, ``available`` (sorted names), ``suggestion`` (or None)."""

    code = "tool_not_found"


class ToolFailed(Internal):
    """The handler raised. ``message`` is what the model should read; ``details`` carry
    ``tool``, ``error`` (the exception's type) and, for domain errors, their ``code``."""

    code = "tool_failed"


class ToolResultInvalid(Internal):
    """The handler's result does not match the tool's ``result_schema``."""

    code = "tool_result_invalid"


# --- the knowledge base -------------------------------------------------------------------


class CollectionNotFound(NotFound):
    """``details``: ``collection``, ``collections`` (the names that exist)."""

    code = "collection_not_found"


class CollectionInvalid(InvalidInput):
    code = "collection_name_invalid"


class IngestPathInvalid(InvalidInput):
    code = "ingest_path_invalid"


class DocumentNotFound(NotFound):
    code = "document_not_found"


class EmbeddingsUnavailable(Unavailable):
    """The backend cannot produce vectors (model missing, endpoint unreachable or refusing).
    The message says what to fix."""

    code = "embeddings_unavailable"


class EmbeddingsTimeout(UpstreamTimeout, EmbeddingsUnavailable):
    """The embeddings endpoint did not answer in time: unavailable, and a timeout by kind."""

    code = "embeddings_timeout"


class EmbeddingsMismatch(Conflict):
    """A collection was built with another embeddings backend; re-ingest it.
    ``details``: ``collection``, ``stored`` and ``configured`` backend names."""

    code = "embeddings_mismatch"

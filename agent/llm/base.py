"""The LLM provider protocol: the one interface the agent uses to talk to a model."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, Protocol, TypedDict

Role = Literal["system", "user", "assistant", "tool"]


class ToolCallMessage(TypedDict):
    """A tool call inside an assistant message, as the OpenAI protocol sends it back."""

    id: str
    type: Literal["function"]
    function: dict[str, str]  # {"name": ..., "arguments": <JSON text>}


class ChatMessage(TypedDict):
    """One message of a conversation with the model. ``tool_calls`` on an assistant message
    and ``tool_call_id`` on a ``tool`` message belong to native tool calling only."""

    role: Role
    content: str
    tool_calls: NotRequired[list[ToolCallMessage]]
    tool_call_id: NotRequired[str]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


@dataclass(frozen=True)
class ToolCallRequest:
    """A tool call the model asked for in native tool calling: ``arguments`` is the JSON text
    exactly as the model wrote it (it may not parse)."""

    id: str
    name: str
    arguments: str

    def as_message(self) -> ToolCallMessage:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class LLMResponse:
    """One completed model call. ``latency_ms`` is measured with a monotonic clock.

    ``usage`` is None when the server reported none (unknown, which is not zero);
    ``finish_reason`` ``"length"`` means the reply was cut at ``max_tokens``; ``tool_calls``
    are the native tool calls of the reply (empty in the text protocol)."""

    content: str
    model: str
    usage: Usage | None = None
    finish_reason: str | None = None
    latency_ms: int = 0
    tool_calls: tuple[ToolCallRequest, ...] = ()

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


@dataclass(frozen=True)
class LLMChunk:
    """A streamed piece: ``delta`` text, and on the last chunk the whole ``response``.

    A chunk with neither (``delta == ""``, no response) says a flush is due: text was passed
    on a moment ago (50 ms for the OpenAI provider), so a consumer sends on what it holds
    instead of waiting for the next token.
    ``calling_tools`` is true on every chunk from the moment the reply began a native tool
    call: its text is then no answer."""

    delta: str = ""
    response: LLMResponse | None = None
    calling_tools: bool = False


#: A tool as native tool calling sends it (OpenAI's ``tools`` entry).
ToolDefinition = Mapping[str, Any]


class LLMProvider(Protocol):
    #: The model name runs are recorded with ("offline" for the offline provider).
    model: str
    #: Whether the model answers any prompt (a summary, an answer from given passages). The
    #: offline provider speaks only the agent's ReAct protocol: callers write such text
    #: themselves (extractively) when this is false.
    writes_free_text: bool

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> LLMResponse:
        """One chat completion (``tools``: native tool calling's definitions). Raises
        ``LLMUnavailable`` / ``LLMTimeout``; cancelling the awaiting task is how a call is
        stopped (its HTTP request is abandoned)."""
        ...

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> AsyncGenerator[LLMChunk, None]:
        """The same call streamed: text deltas as the model produces them (and flush chunks,
        see ``LLMChunk``), then one last chunk carrying the whole ``LLMResponse`` (content,
        tool calls, usage when the server reports it). Cancelling the consuming task, or
        closing the generator, closes the HTTP response."""
        ...

    def describe(self) -> dict[str, Any]:
        """What to show people about this provider: name, model, endpoint (never the key)."""
        ...


def usage_data(usage: Usage | None) -> dict[str, int] | None:
    """``usage`` as stored with a model call: its three counts, or None when unknown."""
    return usage.as_dict() if usage is not None else None

"""The LLM provider protocol: the one interface the agent uses to talk to a model."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypedDict

Role = Literal["system", "user", "assistant"]


class ChatMessage(TypedDict):
    role: Role
    content: str


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class LLMResponse:
    """One completed model call. ``latency_ms`` is measured with a monotonic clock."""

    content: str
    model: str
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    latency_ms: int = 0


@dataclass(frozen=True)
class LLMChunk:
    """A streamed piece: ``delta`` text, and on the last chunk the whole ``response``."""

    delta: str = ""
    response: LLMResponse | None = None


class LLMProvider(Protocol):
    #: The model name runs are recorded with ("offline" for the offline provider).
    model: str
    #: Whether the model answers any prompt (a summary, an answer from given passages). The
    #: offline provider speaks only the agent's ReAct protocol: callers write such text
    #: themselves (extractively) when this is false.
    writes_free_text: bool

    async def complete(
        self, messages: Sequence[ChatMessage], *, stop: Sequence[str] | None = None
    ) -> LLMResponse:
        """One chat completion. Raises ``LLMUnavailable`` / ``LLMTimeout``; cancelling the
        awaiting task is how a call is stopped (its HTTP request is abandoned)."""
        ...

    def stream(
        self, messages: Sequence[ChatMessage], *, stop: Sequence[str] | None = None
    ) -> AsyncGenerator[LLMChunk, None]:
        """The same call streamed: text deltas as the model produces them, then one last chunk
        carrying the whole ``LLMResponse`` (content, usage when the server reports it).
        Cancelling the consuming task, or closing the generator, closes the HTTP response."""
        ...

    def describe(self) -> dict[str, Any]:
        """What to show people about this provider: name, model, endpoint (never the key)."""
        ...

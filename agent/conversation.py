"""What a run needs from the conversation it answers in, supplied by the run's caller.

The agent knows nothing of how conversations are stored (that is ``chat``'s business): a run
that belongs to a conversation is started with a ``RunConversation``, which gives the run its
history and takes what the run added to the conversation when it ends.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

if TYPE_CHECKING:
    from agent.llm.base import ChatMessage, LLMProvider
    from agent.models import AgentRun


@dataclass(frozen=True)
class TranscriptEntry:
    """A message the model wrote or was shown during the run: a raw model output
    (``assistant``, recorded by the ``thought`` step ``step_id``) or the text of a tool's
    observation (``tool``, recorded by the ``result`` step ``step_id``)."""

    role: Literal["assistant", "tool"]
    content: str
    step_id: uuid.UUID


@dataclass(frozen=True)
class RunAnswer:
    """A run's answer, recorded by the ``response`` step ``step_id`` (which holds what the
    answer carries besides its text, such as a RAG answer's ``sources``; the model and the
    mode are the run's). A run that did not complete has one only when it had streamed some
    of it (the step is then marked ``partial``)."""

    text: str
    step_id: uuid.UUID


class RunConversation(Protocol):
    """The conversation of one run."""

    async def history(self, run: AgentRun) -> list[ChatMessage]:
        """The conversation before the run's message, as the model is to see it. Called once,
        when the run starts; it may record what it recalled as steps of the run's trace
        (under the goal step, whose id is the run's)."""
        ...

    async def finished(
        self,
        run: AgentRun,
        *,
        status: str,
        transcript: Sequence[TranscriptEntry],
        answer: RunAnswer | None,
        llm: LLMProvider,
    ) -> None:
        """Store what the run added to the conversation: its ``transcript`` and its
        ``answer`` (for a run that did not complete, what it had written of one, recorded by
        a ``response`` step with ``partial: true``; None when it wrote none). Called once,
        with the run's final ``status``, before the run's end and its trace's end are stored
        (so it may still add steps to the trace); ``llm`` is the model the run used. An
        exception is logged and does not change the run's outcome."""
        ...

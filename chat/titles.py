"""Conversation titles summarised by the model from the first exchange.

A new conversation is titled at once from its first message (``chat.services.title_from``: its
first line of prose, without Markdown). When its first exchange completes and a model is
configured (``CHAT_TITLES=model``, the default), the model is asked for a short title of the
question and its answer; that call is a ``thought`` step (``title``) of the run's trace, like
every model call, and its title replaces the first one unless the user renamed the
conversation meanwhile. The offline provider, or ``CHAT_TITLES=heuristic``, keeps the first.
"""

from __future__ import annotations

import time

import structlog
from django.conf import settings

from agent.exceptions import LLMTimeout, LLMUnavailable
from agent.llm.base import ChatMessage, LLMProvider
from agent.models import AgentRun
from agent.recorder import model_call_step, unanswered_call_step
from chat.models import Conversation, TitleSource
from chat.services import conversation_title_set
from devassist.connections import in_thread
from traces.store import get_trace_store

logger = structlog.get_logger(__name__)

TITLE_PROMPT = (
    "Write a title for the conversation below: at most six words, in the language of the "
    "user's message, naming its subject. Reply with the title alone: no quotes, no Markdown, "
    "no final punctuation."
)
#: How much of the question and of the answer the model is shown, in characters.
TITLE_CONTEXT_CHARS = 1500


def wants_model_title(*, conversation: Conversation, llm: LLMProvider) -> bool:
    """Whether the conversation's title is still to be summarised by the model."""
    return (
        settings.CHAT_TITLES == "model"
        and llm.writes_free_text
        and conversation.title_source == TitleSource.AUTO
    )


async def title_from_model(
    *, run: AgentRun, question: str, answer: str, llm: LLMProvider
) -> str | None:
    """Ask ``llm`` for a title of the exchange, record the call as a ``title`` thought step
    of ``run``'s trace (failed, with the error, when the model fails), store the title
    (``conversation_title_set``) and return it; None when the model failed or the title was
    not stored. Never raises for the model."""
    assert run.trace_id is not None
    assert run.conversation_id is not None
    messages: list[ChatMessage] = [
        {"role": "system", "content": TITLE_PROMPT},
        {
            "role": "user",
            "content": (
                f"User: {question[:TITLE_CONTEXT_CHARS]}\n\n"
                f"Assistant: {answer[:TITLE_CONTEXT_CHARS]}"
            ),
        },
    ]
    started_at = time.time()
    try:
        response = await llm.complete(messages)
    except (LLMUnavailable, LLMTimeout) as exc:
        logger.warning("conversation_title_failed", run_id=str(run.id), error=str(exc))
        failed = unanswered_call_step(
            parent_id=run.id,
            name="title",
            model=llm.model,
            started_at=started_at,
            error=str(exc),
            error_code=exc.code,
            data={"input": messages},
        )
        await in_thread(get_trace_store().add_steps_sync, run.trace_id, [failed])
        return None
    title = response.content.strip().splitlines()[0] if response.content.strip() else ""
    stored = await in_thread(
        conversation_title_set, conversation_id=run.conversation_id, title=title
    )
    recorded = model_call_step(
        response,
        parent_id=run.id,
        name="title",
        started_at=started_at,
        description=title,
        # What it was asked: the trace page shows it, and the OTel export sends it as this
        # call's prompt (not the run's conversation, which it is no part of).
        data={"input": messages, "title_stored": stored},
    )
    await in_thread(get_trace_store().add_steps_sync, run.trace_id, [recorded])
    logger.info("conversation_titled", run_id=str(run.id), stored=stored)
    return title if stored else None

"""Chat turns: route a message, keep the conversation, and start the run that answers it.

A chat turn always belongs to a conversation: an existing one of the user's (its history comes
from the database), or a new one created for it (holding the ``history`` the client sent). The
user's message is stored before the run starts; the run (``agent.runs``) stores the answer, or
its error on the run, when it ends.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings

from agent.events import step_events
from agent.knowledge.store import collection_has_chunks, open_collection
from agent.models import AgentRun, RunMode
from agent.runs import run_create, run_outcome, run_start
from chat.models import Message, MessageKind, MessageRole
from chat.routing import Route, choose_route
from chat.services import NewMessage
from devassist.errors import BadRequest, PayloadTooLarge

logger = structlog.get_logger(__name__)

#: The longest message a chat turn accepts, in characters (longer ones are 413).
MESSAGE_MAX_CHARS = 32_000


class ChatInputInvalid(BadRequest):
    code = "chat_input_invalid"


class MessageTooLarge(PayloadTooLarge):
    code = "message_too_large"


@dataclass(frozen=True)
class ChatTurn:
    """A started turn: its run (executing as ``task``) and the route it took."""

    run: AgentRun
    route: Route
    task: asyncio.Task[None]


async def chat_turn_start(
    *,
    user: Any,
    message: str,
    conversation_id: uuid.UUID | None = None,
    history: Sequence[NewMessage] = (),
    use_agent: bool | None = None,
    use_rag: bool | None = None,
    collection: str | None = None,
    request_id: str = "",
) -> ChatTurn:
    """Route ``message`` (``chat.routing``) and start its run in the conversation.

    With ``conversation_id`` the conversation's own turns are the history and ``history`` is
    ignored; without it a new conversation is created holding ``history``. Raises
    ``ChatInputInvalid`` (400) for an empty message, ``MessageTooLarge`` (413) past
    ``MESSAGE_MAX_CHARS``, ``ConversationNotFound`` (404) for an unknown or foreign
    conversation, ``CollectionNotFound`` (404) when RAG is asked of a missing collection."""
    if not message.strip():
        raise ChatInputInvalid("The message is empty.")
    if len(message) > MESSAGE_MAX_CHARS:
        raise MessageTooLarge(
            f"The message is longer than {MESSAGE_MAX_CHARS} characters.",
            details={"max_chars": MESSAGE_MAX_CHARS, "chars": len(message)},
        )
    route = choose_route(
        message=message, use_agent=use_agent, use_rag=use_rag, documents_exist=True
    )
    # Only a question routed to RAG by the heuristic depends on documents: look only then.
    name = collection or settings.KNOWLEDGE_DEFAULT_COLLECTION
    if (
        route.mode == RunMode.RAG
        and route.reason == "heuristic"
        and not await sync_to_async(collection_has_chunks, thread_sensitive=False)(name)
    ):
        route = choose_route(
            message=message, use_agent=use_agent, use_rag=use_rag, documents_exist=False
        )
    if route.rag:
        # Asked for RAG on a collection that does not exist (the default one too): 404 now,
        # not a failed run.
        await sync_to_async(open_collection, thread_sensitive=False)(name)
    run = await run_create(
        user=user,
        message=message,
        request_id=request_id,
        conversation_id=conversation_id,
        history=history if conversation_id is None else None,
        mode=route.mode,
    )
    logger.info("chat_turn_started", run_id=str(run.id), route=route.mode, reason=route.reason)
    return ChatTurn(run=run, route=route, task=run_start(run, collection=collection))


async def chat_turn_result(*, turn: ChatTurn) -> dict[str, Any]:
    """Wait for the turn's run (it goes on if the caller goes away) and return
    ``{conversation_id, run_id, trace_id, route, model, reply, steps, sources}``. A run that
    did not complete raises ``ApiError`` with its code (409 when cancelled) and the run in
    ``details``."""
    run = await run_outcome(turn.run, turn.task)
    steps = (await sync_to_async(step_events)([run.id]))[run.id]
    answer = await Message.objects.filter(
        run=run, role=MessageRole.ASSISTANT, kind=MessageKind.TURN
    ).afirst()
    return {
        "conversation_id": run.conversation_id,
        "run_id": run.id,
        "trace_id": run.trace_id,
        "route": run.mode,
        "model": run.model,
        "reply": run.output,
        "steps": steps,
        "sources": (answer.metadata or {}).get("sources", []) if answer else [],
    }

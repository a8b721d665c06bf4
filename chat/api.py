"""The chat API: send a message (answered by chat, RAG or the agent, streamed or not), ask the
agent (``POST /agent``), and manage conversations."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field as NinjaField
from ninja import Query, Router, Schema

from agent.api import new_run_frames
from agent.schemas import AgentIn, AgentOut
from agent.sse import sse_response
from chat.debug import conversation_debug, debug_view_json
from chat.schemas import (
    ChatIn,
    ChatOut,
    ConversationListOut,
    ConversationOut,
    ConversationRenameIn,
    ConversationWithMessagesOut,
)
from chat.selectors import conversation_get_for, conversation_list_for, display_messages
from chat.services import NewMessage, conversation_delete, conversation_rename
from chat.turns import agent_turn_result, agent_turn_start, chat_turn_result, chat_turn_start
from devassist.auth import api_user

router = Router(tags=["chat"])


class StreamQuery(Schema):
    stream: bool = False


class ListQuery(Schema):
    q: str = NinjaField("", max_length=200, description="Search titles and messages.")
    cursor: str | None = NinjaField(None, max_length=200)
    limit: int = NinjaField(30, ge=1, le=100)


@router.post("", response=ChatOut, url_name="chat")
async def chat(
    request: HttpRequest, payload: ChatIn, query: Query[StreamQuery]
) -> StreamingHttpResponse | dict[str, Any]:
    """Answer ``message`` with the route it asks for (agent, RAG or chat). ``stream=true``
    answers with the SSE stream (``meta``, ``step``s, ``delta``s, ``error``, ``done``);
    otherwise with the whole result once done. The run goes on if the client goes away."""
    turn = await chat_turn_start(
        user=api_user(request),
        message=payload.message,
        conversation_id=payload.conversation_id,
        history=[NewMessage(role=m.role, content=m.content) for m in payload.history],
        use_agent=payload.use_agent,
        use_rag=payload.use_rag,
        collection=payload.collection_name,
        request_id=getattr(request, "request_id", ""),
    )
    if query.stream:
        return sse_response(new_run_frames(turn.run))
    return await chat_turn_result(turn=turn)


#: Mounted at /agent: the agent on a message, in one of your conversations or on its own.
agent_router = Router(tags=["agent"])


@agent_router.post("", response=AgentOut, url_name="agent")
async def agent(
    request: HttpRequest, payload: AgentIn, query: Query[StreamQuery]
) -> StreamingHttpResponse | dict[str, Any]:
    """Run the agent on ``message`` (with ``conversation_id``, as a turn of that conversation
    that takes the agent route). ``stream=true`` answers with the SSE stream (``meta``,
    ``step``s, ``delta``s, ``error``, ``done``); otherwise with the whole result once done. The
    run goes on if the client goes away."""
    turn = await agent_turn_start(
        user=api_user(request),
        message=payload.message,
        tools=payload.tools,
        conversation_id=payload.conversation_id,
        request_id=getattr(request, "request_id", ""),
    )
    if query.stream:
        return sse_response(new_run_frames(turn.run))
    return await agent_turn_result(turn=turn)


@router.get("/conversations", response=ConversationListOut, url_name="list_conversations")
def list_conversations(request: HttpRequest, query: Query[ListQuery]) -> dict[str, Any]:
    """Your conversations, most recently active first; ``q`` searches titles and messages;
    ``next_cursor`` fetches the next page."""
    page = conversation_list_for(
        user=api_user(request), query=query.q, cursor=query.cursor, limit=query.limit
    )
    return {"conversations": page.conversations, "next_cursor": page.next_cursor}


@router.get(
    "/conversations/{conversation_id}",
    response=ConversationWithMessagesOut,
    url_name="get_conversation",
)
def get_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> dict[str, Any]:
    """The conversation with its messages as the chat shows them (your messages and the
    final answers)."""
    conversation = conversation_get_for(user=api_user(request), conversation_id=conversation_id)
    messages = [asdict(m) for m in display_messages(conversation=conversation)]
    return {**ConversationOut.from_orm(conversation).dict(), "messages": messages}


#: Mounted at /api/conversations: the superuser debug data (docs/debug-panel.md).
debug_router = Router(tags=["debug"])


@debug_router.get("/{conversation_id}/debug", url_name="conversation_debug")
def debug_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> dict[str, Any]:
    """Superusers only (403 otherwise): the debug panel's data for one of your conversations
    (404 for anyone else's, as for a missing one): the runs' steps joined with the messages
    that record them, grouped by run, and the messages of no run. The fields are described in
    ``chat.debug`` and docs/debug-panel.md."""
    view = conversation_debug(user=api_user(request), conversation_id=conversation_id)
    return debug_view_json(view)


@router.patch(
    "/conversations/{conversation_id}", response=ConversationOut, url_name="rename_conversation"
)
def rename_conversation(
    request: HttpRequest, conversation_id: uuid.UUID, payload: ConversationRenameIn
) -> Any:
    conversation = conversation_get_for(user=api_user(request), conversation_id=conversation_id)
    return conversation_rename(conversation=conversation, title=payload.title)


@router.delete(
    "/conversations/{conversation_id}", response={204: None}, url_name="delete_conversation"
)
def delete_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    conversation = conversation_get_for(user=api_user(request), conversation_id=conversation_id)
    conversation_delete(conversation=conversation)
    return HttpResponse(status=204)

"""The chat API: send a message (answered by chat, RAG or the agent, streamed or not), ask the
agent (``POST /agent``), and manage conversations."""

from __future__ import annotations

import uuid
from dataclasses import asdict
from typing import Any

from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field as NinjaField
from ninja import Query, Router, Schema

from agent.api import new_run_frames
from agent.schemas import AgentIn, AgentOut
from agent.sse import sse_response
from chat.attachments import attachment_get_for, attachment_open
from chat.debug import conversation_debug, debug_view_json
from chat.models import Conversation
from chat.schemas import (
    BranchIn,
    ChatIn,
    ChatOut,
    ConversationListOut,
    ConversationOut,
    ConversationRenameIn,
    ConversationWithMessagesOut,
    EditIn,
    FeedbackIn,
    FeedbackOut,
)
from chat.selectors import (
    conversation_get_for,
    conversation_list_for,
    display_messages,
    message_get_for,
)
from chat.services import (
    NewMessage,
    answer_feedback_give,
    conversation_branch_choose,
    conversation_delete,
    conversation_rename,
    conversation_restore,
)
from chat.turns import (
    ChatTurn,
    agent_turn_result,
    agent_turn_start,
    chat_turn_edit,
    chat_turn_regenerate,
    chat_turn_result,
    chat_turn_start,
)
from chat.uploads import uploaded_files
from devassist.auth import api_user
from traces.artifacts import serving_headers

router = Router(tags=["chat"])


class StreamQuery(Schema):
    stream: bool = False


class ListQuery(Schema):
    q: str = NinjaField("", max_length=200, description="Search titles and messages.")
    cursor: str | None = NinjaField(None, max_length=200)
    limit: int = NinjaField(30, ge=1, le=100)


#: How an operation that takes files documents its multipart form.
UPLOADS_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["payload"],
                    "properties": {
                        "payload": {"type": "string", "description": "The JSON body."},
                        "files": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "Files for the run's code, read-only under "
                            "/tmp/inputs (SANDBOX_INPUT_FILES_MAX and the size limits).",
                        },
                    },
                }
            }
        }
    }
}


def _files(request: HttpRequest) -> list[tuple[str, bytes]]:
    return uploaded_files(request.FILES.getlist("files"))


@router.post("", response=ChatOut, url_name="chat", openapi_extra=UPLOADS_OPENAPI)
async def chat(
    request: HttpRequest, payload: ChatIn, query: Query[StreamQuery]
) -> StreamingHttpResponse | dict[str, Any]:
    """Answer ``message`` with the route it asks for (agent, RAG or chat). ``stream=true``
    answers with the SSE stream (``meta``, ``step``s, ``delta``s, ``error``, ``done``);
    otherwise with the whole result once done. The run goes on if the client goes away.
    Files go with a multipart request: the JSON body in a ``payload`` part, the files in
    ``files`` parts; they are attached to the message and given to the agent's code."""
    turn = await chat_turn_start(
        user=api_user(request),
        message=payload.message,
        conversation_id=payload.conversation_id,
        history=[NewMessage(role=m.role, content=m.content) for m in payload.history],
        use_agent=payload.use_agent,
        use_rag=payload.use_rag,
        collection=payload.collection_name,
        files=_files(request),
        request_id=getattr(request, "request_id", ""),
    )
    return await _turn_response(turn, stream=query.stream)


async def _turn_response(turn: ChatTurn, *, stream: bool) -> StreamingHttpResponse | dict[str, Any]:
    if stream:
        return sse_response(new_run_frames(turn.run))
    return await chat_turn_result(turn=turn)


class RegenerateQuery(StreamQuery):
    use_agent: bool | None = NinjaField(None, description="true: answer with the agent.")
    use_rag: bool | None = NinjaField(None, description="true: answer from the documentation.")
    collection_name: str | None = NinjaField(None, max_length=63)


@router.post("/messages/{message_id}/regenerate", response=ChatOut, url_name="regenerate")
async def regenerate(
    request: HttpRequest, message_id: uuid.UUID, query: Query[RegenerateQuery]
) -> StreamingHttpResponse | dict[str, Any]:
    """Answer one of your messages again (``message_id``: an answer to regenerate, or the
    user message; no body): a new run whose answer is another version beside the earlier
    ones (see ``versions`` on the conversation's messages). An answer keeps its route unless
    the query asks for one. Answers as ``POST /chat``; 409 ``conversation_busy`` while a run
    of the conversation is going."""
    turn = await chat_turn_regenerate(
        user=api_user(request),
        message_id=message_id,
        use_agent=query.use_agent,
        use_rag=query.use_rag,
        collection=query.collection_name,
        request_id=getattr(request, "request_id", ""),
    )
    return await _turn_response(turn, stream=query.stream)


@router.post("/messages/{message_id}/edit", response=ChatOut, url_name="edit_message")
async def edit_message(
    request: HttpRequest, message_id: uuid.UUID, payload: EditIn, query: Query[StreamQuery]
) -> StreamingHttpResponse | dict[str, Any]:
    """Send a new version of one of your messages: the conversation forks there (the earlier
    version and what followed it stay, as another branch) and the new message is answered.
    Answers as ``POST /chat``; 409 ``conversation_busy`` while a run of the conversation is
    going."""
    turn = await chat_turn_edit(
        user=api_user(request),
        message_id=message_id,
        message=payload.message,
        use_agent=payload.use_agent,
        use_rag=payload.use_rag,
        collection=payload.collection_name,
        request_id=getattr(request, "request_id", ""),
    )
    return await _turn_response(turn, stream=query.stream)


@router.post("/messages/{message_id}/feedback", response=FeedbackOut, url_name="feedback")
def feedback(request: HttpRequest, message_id: uuid.UUID, payload: FeedbackIn) -> dict[str, Any]:
    """Rate one of your answers, thumb up or down, with an optional comment: a ``feedback``
    step of its run's trace. The newest rating is the answer's ``feedback``."""
    user = api_user(request)
    answer = message_get_for(user=user, message_id=message_id)
    return answer_feedback_give(
        user=user, answer=answer, rating=payload.rating, comment=payload.comment
    )


@router.get(
    "/attachments/{attachment_id}",
    url_name="chat_attachment",
    openapi_extra={"responses": {200: {"description": "The file's bytes."}}},
)
def attachment(request: HttpRequest, attachment_id: uuid.UUID, download: bool = False) -> Any:
    """A file attached to one of your messages (404 for anyone else's, as for a missing one),
    served as the sandbox's artifacts are: raster images and plain text inline (unless
    ``download=true``), anything else a download; never sniffed, never allowed to run
    script."""
    found = attachment_get_for(user=api_user(request), attachment_id=attachment_id)
    response = FileResponse(attachment_open(found))
    record = {"name": found.name, "media_type": found.media_type}
    for header, value in serving_headers(record, download=download).items():
        response[header] = value
    return response


#: Mounted at /agent: the agent on a message, in one of your conversations or on its own.
agent_router = Router(tags=["agent"])


@agent_router.post("", response=AgentOut, url_name="agent", openapi_extra=UPLOADS_OPENAPI)
async def agent(
    request: HttpRequest, payload: AgentIn, query: Query[StreamQuery]
) -> StreamingHttpResponse | dict[str, Any]:
    """Run the agent on ``message`` (with ``conversation_id``, as a turn of that conversation
    that takes the agent route). ``stream=true`` answers with the SSE stream (``meta``,
    ``step``s, ``delta``s, ``error``, ``done``); otherwise with the whole result once done. The
    run goes on if the client goes away. Files go with a multipart request (as ``POST
    /chat``), read-only under ``/tmp/inputs`` for the run's code."""
    turn = await agent_turn_start(
        user=api_user(request),
        message=payload.message,
        tools=payload.tools,
        conversation_id=payload.conversation_id,
        collection=payload.collection_name,
        files=_files(request),
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
    return _with_messages(conversation)


def _with_messages(conversation: Conversation) -> dict[str, Any]:
    messages = [
        {**asdict(m), "version": m.version} for m in display_messages(conversation=conversation)
    ]
    return {**ConversationOut.from_orm(conversation).dict(), "messages": messages}


@router.post(
    "/conversations/{conversation_id}/branch",
    response=ConversationWithMessagesOut,
    url_name="choose_branch",
)
def choose_branch(
    request: HttpRequest, conversation_id: uuid.UUID, payload: BranchIn
) -> dict[str, Any]:
    """Show another version of a turn: the conversation's messages become the branch through
    ``message_id`` (to its newest turn), which later messages continue. 409
    ``conversation_busy`` while a run of the conversation is going."""
    conversation = conversation_get_for(user=api_user(request), conversation_id=conversation_id)
    conversation_branch_choose(conversation=conversation, message_id=payload.message_id)
    return _with_messages(conversation)


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
    """Delete the conversation; ``POST …/restore`` brings it back within
    ``CHAT_UNDO_DELETE_S`` seconds, after which it is gone for good."""
    user = api_user(request)
    conversation = conversation_get_for(user=user, conversation_id=conversation_id)
    conversation_delete(conversation=conversation)
    return HttpResponse(status=204)


@router.post(
    "/conversations/{conversation_id}/restore",
    response=ConversationOut,
    url_name="restore_conversation",
)
def restore_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> Any:
    """Undo a delete made less than ``CHAT_UNDO_DELETE_S`` seconds ago (404 after that)."""
    return conversation_restore(user=api_user(request), conversation_id=conversation_id)

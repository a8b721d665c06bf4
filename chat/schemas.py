"""Request and response schemas of the chat API."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from ninja import Field, Schema

from agent.schemas import StepEventOut
from devassist.schemas import InputSchema


class HistoryMessageIn(InputSchema):
    role: Literal["system", "user", "assistant"]
    content: str = Field(..., max_length=100_000)


class ChatIn(InputSchema):
    message: str = Field(..., description="The user's message (at most 32,000 characters).")
    conversation_id: uuid.UUID | None = Field(
        None,
        description="Continue this conversation of yours (its stored turns are the history; "
        "`history` is ignored). Without it a new conversation is created.",
    )
    history: list[HistoryMessageIn] = Field(
        default_factory=list,
        max_length=200,
        description="Earlier turns, for a new conversation.",
    )
    use_agent: bool | None = Field(None, description="true: answer with the agent (tools).")
    use_rag: bool | None = Field(None, description="true: answer from the documentation.")
    collection_name: str | None = Field(
        None,
        max_length=63,
        description="The knowledge collection RAG answers from and the agent's search_docs "
        "searches (unless the model names another).",
    )


class SourceOut(Schema):
    number: int
    source: str
    chunk_index: int | None
    title: str
    label: str


class ChatOut(Schema):
    conversation_id: uuid.UUID
    run_id: uuid.UUID
    trace_id: uuid.UUID | None
    route: str
    model: str
    reply: str
    steps: list[StepEventOut]
    sources: list[SourceOut]


class ConversationOut(Schema):
    id: uuid.UUID
    title: str
    created_at: datetime
    updated_at: datetime


class ConversationListOut(Schema):
    conversations: list[ConversationOut]
    next_cursor: str | None


class FeedbackOut(Schema):
    rating: Literal["up", "down"]
    comment: str
    at: datetime


class AttachmentOut(Schema):
    id: uuid.UUID
    name: str
    size: int
    media_type: str
    url: str = Field(..., description="Where its owner downloads it (add ?download=true).")


class MessageOut(Schema):
    id: uuid.UUID
    role: str
    content: str = Field(
        ..., description="An answer whose run failed or was stopped holds what it wrote before."
    )
    sequence: int
    created_at: datetime
    run_id: uuid.UUID | None
    mode: str
    model: str
    sources: list[dict[str, Any]]
    run_status: str
    error: str
    parent_id: uuid.UUID | None = Field(
        None, description="The turn this one follows (the user message an answer answers)."
    )
    versions: list[uuid.UUID] = Field(
        default_factory=list,
        description="The turns this one switches between (itself included), oldest first: "
        "the answers to the same message, or the edits of the same message.",
    )
    version: int = Field(1, description="Which of `versions` this is, from 1.")
    answered: bool = Field(False, description="A user message: whether any answer is stored.")
    feedback: FeedbackOut | None = None
    trace_id: uuid.UUID | None = None
    attachments: list[AttachmentOut] = Field(
        default_factory=list, description="A user message's files."
    )


class ConversationWithMessagesOut(ConversationOut):
    messages: list[MessageOut]


class RouteIn(InputSchema):
    use_agent: bool | None = Field(None, description="true: answer with the agent (tools).")
    use_rag: bool | None = Field(None, description="true: answer from the documentation.")
    collection_name: str | None = Field(None, max_length=63)


class EditIn(RouteIn):
    message: str = Field(..., description="The new version of the message.")


class BranchIn(InputSchema):
    message_id: uuid.UUID = Field(
        ..., description="A turn of the conversation: show the branch through it."
    )


class FeedbackIn(InputSchema):
    rating: Literal["up", "down"]
    comment: str = Field("", max_length=2000)


class ConversationRenameIn(InputSchema):
    title: str = Field(..., min_length=1, max_length=200)

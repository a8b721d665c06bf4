"""Conversations and their messages.

A conversation keeps every message a model saw in its runs, in ``sequence`` order: the user's
messages and the answers (``kind=turn``: what the chat shows and short-term memory
remembers) and, in between, the model's raw outputs and the tool observations of each run
(``kind=step``) and the long-term memory the run was given (``kind=memory``), which only the
debug panel shows.

Turns form a tree by ``parent``: a user message follows the turn it was sent after, an answer
the user message it answers. Regenerating an answer adds a sibling answer; editing a user
message adds a sibling user message (a fork). The chat shows one branch, from the root to the
conversation's ``current`` turn; siblings of the same role are the versions a turn switches
between. Every run of a chat turn ends with its answer turn, also when it failed or was
stopped (its text is then what was written before, possibly nothing).
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.conf import settings
from django.db import models
from django.utils import timezone

from devassist.storable import StorableCharField, StorableJSONField, StorableTextField


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class MessageKind(models.TextChoices):
    TURN = "turn", "a user message or a final answer"
    STEP = "step", "a model output or tool observation inside a run"
    MEMORY = "memory", "long-term memory given to a run"


class TitleSource(models.TextChoices):
    AUTO = "auto", "taken from the first message"
    MODEL = "model", "summarised by the model from the first exchange"
    USER = "user", "set by the user"


#: The ratings feedback on an answer takes (a thumb up or down).
FEEDBACK_RATINGS = ("up", "down")


def undo_delay() -> timedelta:
    """How long a deleted conversation can be restored (``CHAT_UNDO_DELETE_S``)."""
    return timedelta(seconds=float(settings.CHAT_UNDO_DELETE_S))


class ConversationQuerySet(models.QuerySet["Conversation"]):
    def owned_by(self, user: models.Model) -> ConversationQuerySet:
        """The user's conversations, those deleted (and still undoable) left out."""
        return self.filter(owner=user, deleted_at__isnull=True)

    def restorable_by(self, user: models.Model) -> ConversationQuerySet:
        """The user's conversations deleted less than ``undo_delay()`` ago: Undo brings them
        back."""
        return self.filter(owner=user, deleted_at__gte=timezone.now() - undo_delay())


class Conversation(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="conversations"
    )
    title = StorableCharField(max_length=200, blank=True)
    title_source = models.CharField(
        max_length=8, choices=TitleSource.choices, default=TitleSource.AUTO
    )
    #: The turn at the end of the branch the chat shows (``chat.selectors.conversation_path``);
    #: empty: the newest turn.
    current = models.ForeignKey(
        "Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    #: Deleted by its owner at this time: hidden, and purged once the undo delay has passed
    #: (``chat.services.conversations_purge``).
    deleted_at = models.DateTimeField(null=True, blank=True)
    #: The sequence of the newest message (messages are numbered from 1 without gaps).
    last_sequence = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [models.Index(fields=["owner", "-updated_at"], name="conversation_owner_recent")]

    def __str__(self) -> str:
        return self.title or str(self.id)


class MessageQuerySet(models.QuerySet["Message"]):
    def turns(self) -> MessageQuerySet:
        return self.filter(kind=MessageKind.TURN)


class Message(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    kind = models.CharField(max_length=16, choices=MessageKind.choices, default=MessageKind.TURN)
    content = StorableTextField()
    run = models.ForeignKey(
        "agent.AgentRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="messages",
    )
    #: The trace step this message records (the run's ``goal`` for its user message, a model
    #: call's ``thought``, a tool call's ``result``, the ``memory_read`` of long-term memory,
    #: the ``response`` for the answer); empty for messages outside a run and once the step
    #: is deleted.
    #: The turn this one follows (turns only; empty for the first): see the module docstring.
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    step = models.ForeignKey(
        "traces.Step",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="messages",
    )
    request_id = models.CharField(max_length=128, blank=True)
    sequence = models.PositiveIntegerField()
    metadata = StorableJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()

    class Meta:
        ordering = ["conversation", "sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "sequence"], name="message_unique_sequence"
            )
        ]
        indexes = [
            models.Index(fields=["conversation", "kind", "sequence"], name="message_kind_order")
        ]

    def __str__(self) -> str:
        return f"{self.role}: {self.content[:60]}"


class MemorySummary(models.Model):
    """Long-term memory: facts summarised from a conversation's turns that fell out of the
    short-term window, up to ``through_sequence``. The facts are searchable in the Chroma
    collection ``agent_memory`` under this row's id; this row is what says how far the
    conversation has been summarised."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="memory_summaries"
    )
    from_sequence = models.PositiveIntegerField()
    through_sequence = models.PositiveIntegerField()
    facts = StorableJSONField(default=list)
    model = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["conversation", "through_sequence"]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation", "through_sequence"], name="memory_summary_unique_end"
            )
        ]

    def __str__(self) -> str:
        return f"{self.conversation_id} through {self.through_sequence}"


class Attachment(models.Model):
    """A file the user attached to a message (``chat.attachments``): its bytes in the artifact
    storage under ``storage_name``, given read-only to the code of the message's runs under
    ``/tmp/inputs/<name>``. An edited message keeps its original's files (rows of its own,
    the same stored bytes)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attachments")
    name = StorableCharField(max_length=200)
    media_type = models.CharField(max_length=100)
    size = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    storage_name = models.CharField(max_length=255)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["message", "created_at", "name"]

    def __str__(self) -> str:
        return self.name

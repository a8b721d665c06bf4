"""Conversations: messages numbered in order without gaps, titles from the first message."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from chat.exceptions import ConversationNotFound
from chat.models import Conversation, MessageKind
from chat.selectors import branch_turns, conversation_get_for
from chat.services import NewMessage, conversation_create, messages_append, title_from


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_get_distinct_consecutive_sequences(user):
    conversation = conversation_create(owner=user)

    def write(n: int) -> None:
        try:
            for i in range(5):
                messages_append(
                    conversation_id=conversation.id,
                    messages=[NewMessage("user", f"w{n}-{i}"), NewMessage("assistant", "ok")],
                )
        finally:
            connection.close()

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    sequences = sorted(conversation.messages.values_list("sequence", flat=True))
    assert sequences == list(range(1, 41))
    conversation.refresh_from_db()
    assert conversation.last_sequence == 40


@pytest.mark.django_db
def test_the_first_user_turn_titles_the_conversation(user):
    conversation = conversation_create(owner=user)

    messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage("system", "Long-term memory:", kind=MessageKind.MEMORY),
            NewMessage("user", "  How do I configure\nthe sandbox?"),
        ],
    )
    messages_append(conversation_id=conversation.id, messages=[NewMessage("user", "Second")])

    conversation.refresh_from_db()
    assert conversation.title == "How do I configure"


def test_long_titles_are_cut_at_a_word():
    title = title_from("word " * 40)

    assert len(title) <= 80
    assert title.endswith("word…")


@pytest.mark.django_db
def test_an_invalid_role_writes_nothing(user):
    conversation = conversation_create(owner=user)

    with pytest.raises(ValueError, match="invalid message role"):
        messages_append(
            conversation_id=conversation.id,
            messages=[NewMessage("user", "fine"), NewMessage("robot", "no")],
        )

    assert not conversation.messages.exists()


@pytest.mark.django_db
def test_conversations_are_visible_to_their_owner_only(user, other_user):
    conversation = conversation_create(owner=user)

    assert conversation_get_for(user=user, conversation_id=conversation.id) == conversation
    with pytest.raises(ConversationNotFound):
        conversation_get_for(user=other_user, conversation_id=conversation.id)
    assert Conversation.objects.owned_by(other_user).count() == 0


@pytest.mark.django_db
def test_turns_leave_run_steps_out(user):
    conversation = conversation_create(owner=user)
    messages_append(
        conversation_id=conversation.id,
        messages=[
            NewMessage("user", "q"),
            NewMessage("assistant", "Thought: x", kind=MessageKind.STEP),
            NewMessage("tool", "Observation: {}", kind=MessageKind.STEP),
            NewMessage("assistant", "a"),
        ],
    )

    turns = branch_turns(conversation_id=conversation.id, through_id=None, limit=10)

    assert [(m.role, m.content, m.sequence) for m in turns] == [
        ("user", "q", 1),
        ("assistant", "a", 4),
    ]

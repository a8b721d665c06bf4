"""Conversation memory: what a chat turn's run remembers of its conversation.

- Short-term: the last ``short_term_turns`` turns (user messages and answers) of the branch
  that leads to the new message (turns form a tree: ``chat.models``), read from the database,
  with an in-process LRU cache over ``cached_conversations`` conversations. A branch ending at
  a given turn never changes (turns are only added), so a cached window is current when it
  ends at the turn the new message follows; it is extended as its branch grows.
- Long-term: turns that fall out of the short-term window accumulate; once there are
  ``summary_threshold`` of them, the model summarises them into at most ``max_facts`` stable
  facts (the offline provider picks them out of the text), kept as a ``MemorySummary`` row and
  as a record of the Chroma collection ``agent_memory`` tagged with the conversation id and
  the sequence of the last turn it summarises. A new message recalls the ``recall_summaries``
  summaries nearest to it among those of its own branch (an edited message's branch does not
  remember what the abandoned one said), given to the model as one system message
  ``Long-term memory:`` followed by ``- fact`` lines. Memories never cross conversations:
  every lookup filters on the conversation id.

An answer with no text (its run failed or was stopped before it wrote any) is left out of the
history the model is given.

The long-term store failing never fails a run: ``recall`` and ``consolidate`` log the failure
and report it (the run records it on its ``memory_read`` / ``memory_write`` steps).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Max

from agent.knowledge.store import query_texts, upsert_texts
from agent.llm.base import ChatMessage, LLMProvider, LLMResponse
from chat.models import MemorySummary, Message, MessageKind, MessageRole
from chat.selectors import branch_turns, turn_tree
from devassist.connections import in_thread

logger = structlog.get_logger(__name__)

MEMORY_PREFIX = "Long-term memory:"
FACT_MAX_CHARS = 200
#: At most this many turns go into one summary (older ones first).
SUMMARY_MAX_TURNS = 60

SUMMARY_PROMPT = (
    "You maintain the long-term memory of a conversation between a developer and an "
    "assistant. From the transcript below, write at most {max_facts} short, stable facts "
    "worth remembering later: who the user is, their project, stack, preferences, decisions "
    "and results. Leave out greetings, questions without answers and anything temporary. "
    "Write one fact per line, each starting with '- ', in the language of the transcript, "
    "and nothing else."
)


@dataclass(frozen=True)
class MemoryConfig:
    short_term_turns: int = 20
    cached_conversations: int = 200
    summary_threshold: int = 12
    max_facts: int = 8
    recall_summaries: int = 3
    collection: str = "agent_memory"


@lru_cache(maxsize=1)
def memory_config() -> MemoryConfig:
    return MemoryConfig(**getattr(settings, "MEMORY", {}))


@dataclass(frozen=True)
class Turn:
    role: str
    content: str
    sequence: int
    id: uuid.UUID | None = None


def _turn(message: Message) -> Turn:
    return Turn(message.role, message.content, message.sequence, message.id)


# --- short-term ----------------------------------------------------------------------------


@dataclass
class _Window:
    through: uuid.UUID | None  # the turn the window's branch ends at
    turns: deque[Turn]


class ShortTermMemory:
    """The last ``turns`` turns of a branch of up to ``conversations`` conversations (one
    branch each), least recently used evicted first, each with one more turn (the newest
    message, which a run gets apart from its history). Thread-safe."""

    def __init__(self, *, turns: int, conversations: int) -> None:
        self.turns = turns
        self.size = turns + 1
        self.capacity = conversations
        self._windows: OrderedDict[uuid.UUID, _Window] = OrderedDict()
        self._lock = threading.Lock()

    def window(
        self, conversation_id: uuid.UUID, *, through_id: uuid.UUID | None
    ) -> tuple[list[Turn], bool]:
        """The last ``turns + 1`` turns of the branch ending at the turn ``through_id`` (the
        newest turn when None), oldest first, and whether they came from the cache. Reads the
        database on a miss."""
        with self._lock:
            cached = self._windows.get(conversation_id)
            if cached is not None and through_id is not None and cached.through == through_id:
                self._windows.move_to_end(conversation_id)
                return list(cached.turns), True
        rows = branch_turns(conversation_id=conversation_id, through_id=through_id, limit=self.size)
        turns = [_turn(m) for m in rows]
        through = turns[-1].id if turns else None
        self._put(conversation_id, _Window(through, deque(turns, maxlen=self.size)))
        return turns, False

    def appended(self, conversation_id: uuid.UUID, messages: Sequence[Message]) -> None:
        """Messages were appended: extend the cached window with the turns that continue its
        branch, forget it when one does not (a fork, or another branch written)."""
        with self._lock:
            cached = self._windows.get(conversation_id)
            if cached is None:
                return
            for message in messages:
                if message.kind != MessageKind.TURN:
                    continue
                if message.parent_id != cached.through:
                    del self._windows[conversation_id]
                    return
                cached.turns.append(_turn(message))
                cached.through = message.id

    def holds_whole(self, conversation_id: uuid.UUID, *, through_id: uuid.UUID) -> bool:
        """Whether the cached window is every turn of the branch ending at ``through_id``: it
        ends there, and it is not full."""
        with self._lock:
            cached = self._windows.get(conversation_id)
            return (
                cached is not None
                and cached.through == through_id
                and len(cached.turns) < self.size
            )

    def forget(self, conversation_id: uuid.UUID) -> None:
        with self._lock:
            self._windows.pop(conversation_id, None)

    def clear(self) -> None:
        with self._lock:
            self._windows.clear()

    def __len__(self) -> int:
        return len(self._windows)

    def _put(self, conversation_id: uuid.UUID, window: _Window) -> None:
        with self._lock:
            self._windows[conversation_id] = window
            self._windows.move_to_end(conversation_id)
            while len(self._windows) > self.capacity:
                self._windows.popitem(last=False)


@lru_cache(maxsize=1)
def short_term_memory() -> ShortTermMemory:
    config = memory_config()
    return ShortTermMemory(turns=config.short_term_turns, conversations=config.cached_conversations)


# --- recall ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recollection:
    """What a run is given of its conversation: the short-term turns before the new message,
    the recalled facts (from ``summaries`` summaries) and the long-term store's error, if
    it failed."""

    turns: list[Turn]
    cached: bool
    facts: list[str] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    error: str = ""
    #: False when the long-term store was not asked: no turn has left the short-term window
    #: yet, so nothing of the conversation can have been summarised.
    searched: bool = True

    def messages(self) -> list[ChatMessage]:
        """The history to put before the new message: the long-term memory message (when
        something was recalled), then the turns."""
        history: list[ChatMessage] = []
        if self.facts:
            history.append({"role": "system", "content": long_term_message(self.facts)})
        history += [
            {"role": _chat_role(t.role), "content": t.content}
            for t in self.turns
            if t.content or t.role != MessageRole.ASSISTANT
        ]
        return history


def long_term_message(facts: Sequence[str]) -> str:
    return "\n".join([MEMORY_PREFIX, *(f"- {fact}" for fact in facts)])


async def recall(*, conversation_id: uuid.UUID, asked_id: uuid.UUID, query: str) -> Recollection:
    """The memory for the new message ``asked_id`` (itself left out): the short-term window of
    its branch, and the long-term facts of that branch nearest to ``query``. A failing
    long-term store gives no facts and its error; the database failing raises."""
    memory = short_term_memory()
    window, cached = await in_thread(memory.window, conversation_id, through_id=asked_id)
    config = memory_config()
    turns = [t for t in window if t.id != asked_id][-config.short_term_turns :]
    if len(window) < memory.size:
        # Every turn of the branch is in the window: none was ever summarised.
        return Recollection(turns=turns, cached=cached, searched=False)
    try:
        sequences = await in_thread(_branch_sequences, conversation_id, asked_id)
        hits = await sync_to_async(query_texts, thread_sensitive=False)(
            config.collection,
            text=query,
            n=config.recall_summaries,
            where={
                "$and": [
                    {"conversation_id": str(conversation_id)},
                    {"through_sequence": {"$in": sequences}},
                ]
            },
        )
    except Exception as exc:
        logger.warning("memory_recall_failed", conversation_id=str(conversation_id), error=str(exc))
        return Recollection(turns=turns, cached=cached, error=_error_text(exc))
    facts: list[str] = []
    for hit in hits:
        for line in hit.text.splitlines():
            if line.strip() and line.strip() not in facts:
                facts.append(line.strip())
    return Recollection(turns=turns, cached=cached, facts=facts, summaries=[hit.id for hit in hits])


def _branch_sequences(conversation_id: uuid.UUID, through_id: uuid.UUID) -> list[int]:
    tree = turn_tree(conversation_id=conversation_id)
    return [node.sequence for node in tree.branch(tree.nodes.get(through_id))]


# --- consolidation ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SummaryCall:
    """The model call that summarised: the messages it was sent, when (epoch seconds), and
    its reply (None when it failed)."""

    messages: list[ChatMessage]
    started_at: float
    response: LLMResponse | None = None


@dataclass(frozen=True)
class Consolidation:
    """A summary written (``summary_id``), or why none was: ``error`` when the store or the
    model failed; ``call``, the model call it made (None when the turns were summarised
    without a model)."""

    summary_id: str = ""
    from_sequence: int = 0
    through_sequence: int = 0
    summarised_turns: int = 0
    facts: list[str] = field(default_factory=list)
    error: str = ""
    call: SummaryCall | None = None


async def consolidate(
    *, conversation_id: uuid.UUID, llm: LLMProvider, through_id: uuid.UUID | None = None
) -> Consolidation | None:
    """Summarise the turns of the branch ending at ``through_id`` (the newest turn when None)
    that fell out of the short-term window, once at least ``summary_threshold`` of them are not
    summarised yet. Returns None when there is nothing to do; never raises for the model or the
    long-term store failing (the result carries the error, and the turns stay pending for the
    next time). With ``through_id``, a branch whose every turn the short-term cache holds has
    none out of the window, and the database is not asked."""
    config = memory_config()
    if through_id is not None and short_term_memory().holds_whole(
        conversation_id, through_id=through_id
    ):
        return None
    pending = await in_thread(_pending_turns, conversation_id, through_id, config)
    if len(pending) < config.summary_threshold:
        return None
    pending = pending[:SUMMARY_MAX_TURNS]
    first, last = pending[0].sequence, pending[-1].sequence
    call = None
    try:
        if llm.writes_free_text:
            call = SummaryCall(summary_messages(pending, max_facts=config.max_facts), time.time())
            response = await llm.complete(call.messages)
            call = replace(call, response=response)
            facts = model_facts(response, pending, max_facts=config.max_facts)
        else:
            facts = extractive_facts(pending, max_facts=config.max_facts)
        if not facts:
            return None
        summary_id = await in_thread(
            _store_summary, conversation_id, first, last, facts, llm.model, config
        )
    except Exception as exc:
        logger.warning(
            "memory_consolidation_failed", conversation_id=str(conversation_id), error=str(exc)
        )
        return Consolidation(
            from_sequence=first,
            through_sequence=last,
            summarised_turns=len(pending),
            error=_error_text(exc),
            call=call,
        )
    logger.info(
        "memory_consolidated",
        conversation_id=str(conversation_id),
        through_sequence=last,
        facts=len(facts),
    )
    return Consolidation(
        summary_id=summary_id,
        from_sequence=first,
        through_sequence=last,
        summarised_turns=len(pending),
        facts=facts,
        call=call,
    )


def _pending_turns(
    conversation_id: uuid.UUID, through_id: uuid.UUID | None, config: MemoryConfig
) -> list[Turn]:
    """The branch's turns older than its short-term window and newer than the last summary of
    the branch (along a branch, sequences only grow)."""
    tree = turn_tree(conversation_id=conversation_id)
    leaf = tree.nodes.get(through_id) if through_id is not None else tree.newest()
    branch = tree.branch(leaf)
    if len(branch) <= config.short_term_turns:
        return []
    older = branch[: -config.short_term_turns]
    summarised = MemorySummary.objects.filter(
        conversation_id=conversation_id,
        through_sequence__in=[node.sequence for node in branch],
    ).aggregate(through=Max("through_sequence"))["through"]
    ids = [node.id for node in older if node.sequence > (summarised or 0)]
    rows = Message.objects.filter(pk__in=ids).only("role", "content", "sequence")
    return [_turn(m) for m in sorted(rows, key=lambda m: m.sequence)]


def _store_summary(
    conversation_id: uuid.UUID,
    first: int,
    last: int,
    facts: list[str],
    model: str,
    config: MemoryConfig,
) -> str:
    # The row commits only once the facts are in Chroma: a failed write leaves the turns
    # pending, to be summarised the next time.
    with transaction.atomic():
        summary = MemorySummary.objects.create(
            conversation_id=conversation_id,
            from_sequence=first,
            through_sequence=last,
            facts=facts,
            model=model,
        )
        upsert_texts(
            config.collection,
            ids=[str(summary.id)],
            texts=["\n".join(facts)],
            metadatas=[
                {
                    "conversation_id": str(conversation_id),
                    "from_sequence": first,
                    "through_sequence": last,
                }
            ],
        )
    return str(summary.id)


def summary_messages(turns: Sequence[Turn], *, max_facts: int) -> list[ChatMessage]:
    """What the model is asked for at most ``max_facts`` facts from ``turns``."""
    transcript = "\n".join(f"{t.role}: {t.content}" for t in turns)
    return [
        {"role": "system", "content": SUMMARY_PROMPT.format(max_facts=max_facts)},
        {"role": "user", "content": transcript},
    ]


def model_facts(response: LLMResponse, turns: Sequence[Turn], *, max_facts: int) -> list[str]:
    """At most ``max_facts`` facts: the fact lines of the model's ``response`` to
    ``summary_messages``, else (it wrote none) extractive ones from ``turns``."""
    facts = _fact_lines(response.content)[:max_facts]
    return facts or extractive_facts(turns, max_facts=max_facts)


_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+|(?<=[。！？])|\n+")
_FACT_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*\S)\s*$")
_CJK = re.compile(r"[\u3400-\u9fff]")


def extractive_facts(turns: Sequence[Turn], *, max_facts: int) -> list[str]:
    """Facts picked out of the text without a model: the user's statements first (what they
    said about themselves, their project and their choices), then the first statement of each
    answer; questions and fragments left out, duplicates once, each cut to 200 characters."""
    user_sentences: list[str] = []
    answer_sentences: list[str] = []
    for turn in turns:
        sentences = [s.strip() for s in _SENTENCE_END.split(turn.content) if s.strip()]
        statements = [s for s in sentences if _is_statement(s)]
        if turn.role == MessageRole.USER:
            user_sentences += [f"User: {s}" for s in statements]
        elif statements:
            answer_sentences.append(f"Assistant: {statements[0]}")
    facts: list[str] = []
    for sentence in [*user_sentences, *answer_sentences]:
        fact = _clip(" ".join(sentence.split()), FACT_MAX_CHARS)
        if fact not in facts:
            facts.append(fact)
        if len(facts) == max_facts:
            break
    return facts


def _is_statement(sentence: str) -> bool:
    if sentence.endswith(("?", "？")):
        return False
    if _CJK.search(sentence):
        return len(_CJK.findall(sentence)) >= 4
    return len(sentence.split()) >= 3


def _fact_lines(text: str) -> list[str]:
    facts = []
    for line in text.splitlines():
        match = _FACT_LINE.match(line)
        if match:
            fact = _clip(match.group(1), FACT_MAX_CHARS)
            if fact not in facts:
                facts.append(fact)
    return facts


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _chat_role(role: str) -> Any:
    return role if role in ("user", "assistant", "system") else "user"


def _error_text(exc: BaseException) -> str:
    message = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {message}"[:500]

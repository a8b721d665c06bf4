"""What a recorded input asks (``traces.messages.asked_in``), in each instrumentation's shape:
what a trace recorded over OTLP is named after."""

from __future__ import annotations

from typing import Any

import pytest

from traces.messages import asked_in, last_user_text, part_answer, part_call, split_message

GENAI_PARTS = [
    {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
    {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
]
AI_SDK_BLOCKS = [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}]


@pytest.mark.parametrize(
    ("value", "asked"),
    [
        ([{"role": "user", "content": "Weather in Paris?"}], "Weather in Paris?"),
        (GENAI_PARTS, "Weather in Paris?"),
        (AI_SDK_BLOCKS, "Weather in Paris?"),
        # The last user message that says something: the latest question of a conversation.
        (
            [
                {"role": "user", "content": "First?"},
                {"role": "assistant", "content": "Yes."},
                {"role": "user", "content": "  Second?  "},
                {"role": "user", "content": [{"type": "image", "url": "x"}]},
            ],
            "Second?",
        ),
        ({"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}, "Hi"),
        ({"system": "Be brief.", "prompt": "Weather in Paris?"}, "Weather in Paris?"),
        ({"args": ["Weather in Paris?"], "kwargs": {}}, "Weather in Paris?"),
        ({"args": [], "kwargs": {"question": "Weather in Paris?"}}, "Weather in Paris?"),
        # Agent frameworks' own structures, the question a level or more down.
        (
            {
                "messages": [
                    {"type": "system", "data": {"content": "Be brief."}},
                    {"type": "human", "data": {"content": "Weather in Paris?"}},
                ]
            },
            "Weather in Paris?",
        ),
        (
            [
                {
                    "lc": 1,
                    "type": "constructor",
                    "id": ["langchain", "HumanMessage"],
                    "kwargs": {"content": "Weather in Paris?"},
                }
            ],
            "Weather in Paris?",
        ),
        # OpenInference's parts of a LlamaIndex message; LangChain's chunks and own roles.
        (
            [
                {
                    "role": "user",
                    "contents": [{"message_content": {"type": "text", "text": "Weather?"}}],
                }
            ],
            "Weather?",
        ),
        ([{"type": "HumanMessageChunk", "data": {"content": "Weather?"}}], "Weather?"),
        ([{"type": "chat", "data": {"role": "user", "content": "Weather?"}}], "Weather?"),
        ([{"type": "chat", "data": {"content": "no role"}}], ""),
        ({"task": "Weather in Paris?", "cancellation_token": None}, "Weather in Paris?"),
        ({"input_args": {"question": "Weather in Paris?"}}, "Weather in Paris?"),
        ({"data": {"retriever": {"query": "Weather in Paris?"}}}, "Weather in Paris?"),
        ({"input": "Weather in Paris?", "model": "gpt-4o"}, "Weather in Paris?"),
        # The nearest the top wins.
        ({"query": "first", "data": {"task": "second"}}, "first"),
        ({"a": {"question": "deeper"}, "b": [{"question": "deeper still"}]}, "deeper"),
        # Nothing that asks anything.
        ({"a": {"b": {"c": {"d": {"question": "past the levels looked at"}}}}}, ""),
        ([{"role": "system"}, {"role": "user"}], ""),
        ([{"type": "human", "data": {"content": "Hi"}}, {"type": "unknown"}], ""),
        ({"args": ["a", "b"], "kwargs": {}}, ""),
        ({"args": [3], "kwargs": {}}, ""),
        ({"args": ["x"], "kwargs": {}, "other": 1}, ""),
        ([{"role": "system", "content": "Be brief."}], ""),
        # Google ADK's stand-in for the messages it keeps out: a question of a deeper level
        # still asks.
        ([{"role": "system", "content": "<elided>"}, {"role": "user", "content": "<elided>"}], ""),
        ({"question": "<elided>", "state": {"query": "Weather?"}}, "Weather?"),
        ([{"content": "no role"}], ""),
        ([], ""),
        ({"messages": "not a list", "prompt": 5}, ""),
        ("a string is the caller's to use", ""),
        (None, ""),
    ],
)
def test_what_an_input_asks(value: Any, asked: str) -> None:
    assert asked_in(value) == asked


def test_a_list_that_is_not_a_conversation_asks_nothing() -> None:
    assert last_user_text([{"role": "user", "content": "Hi"}, "stray"]) == ""


@pytest.mark.parametrize(
    ("part", "text", "call", "answer"),
    [
        # Amazon Bedrock's Converse blocks (Strands Agents').
        ({"text": "Hi"}, "Hi", None, None),
        (
            {"toolUse": {"toolUseId": "c1", "name": "add", "input": {"a": 1}}},
            "",
            ("add", {"a": 1}),
            None,
        ),
        (
            {"toolResult": {"toolUseId": "c1", "content": [{"text": "1"}]}},
            "",
            None,
            ([{"text": "1"}], "c1"),
        ),
        # Google's Part, its other fields null (Google ADK's).
        ({"text": "Hi", "function_call": None, "thought": None}, "Hi", None, None),
        (
            {"text": None, "function_call": {"id": "c2", "name": "add", "args": {"a": 1}}},
            "",
            ("add", {"a": 1}),
            None,
        ),
        (
            {"functionResponse": {"id": "c2", "name": "add", "response": {"result": 1}}},
            "",
            None,
            ({"result": 1}, "c2"),
        ),
        # Not one of them: two fields given, a text that is not one, an unknown key, a type.
        ({"text": "Hi", "thought": True}, "", None, None),
        ({"text": 5}, "", None, None),
        ({"image": "a.png"}, "", None, None),
        ({"type": "image", "text": "Hi"}, "", None, None),
        ({"toolUse": "add"}, "", None, None),
    ],
)
def test_parts_told_by_their_one_key(part: Any, text: str, call: Any, answer: Any) -> None:
    found, rest = split_message({"role": "user", "content": [part]})
    assert (found, rest) == (text, {} if text else {"content": [part]})
    assert part_call(part) == call
    assert part_answer(part) == answer

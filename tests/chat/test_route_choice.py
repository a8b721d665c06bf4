"""Routing of chat messages: explicit flags first, then the keyword heuristic."""

from __future__ import annotations

import pytest

from chat.route_choice import choose_route


@pytest.mark.parametrize(
    ("message", "use_agent", "use_rag", "documents", "expected"),
    [
        # explicit flags win, the agent first
        ("hello", True, True, True, "agent"),
        ("hello", True, None, False, "agent"),
        ("hello", None, True, False, "rag"),
        ("hello", False, True, True, "rag"),
        ("write a parser", False, None, True, "chat"),
        ("how do I configure it?", None, False, True, "chat"),
        # agent keywords, Chinese
        ("写一个 add(a,b) 并用 execute_code 验证", None, None, False, "agent"),
        ("帮我写快速排序", None, None, False, "agent"),
        ("运行这段代码", None, None, True, "agent"),
        ("执行 print(1)", None, None, False, "agent"),
        ("请一步一步分析", None, None, False, "agent"),
        # agent keywords, English, as words
        ("Write a function that adds two numbers", None, None, False, "agent"),
        ("please implement quicksort", None, None, False, "agent"),
        ("run this for me", None, None, False, "agent"),
        ("Execute the tests", None, None, False, "agent"),
        ("verify that 2+2 is 4", None, None, False, "agent"),
        ("explain it step by step", None, None, False, "agent"),
        ("search the docs for the timeout then write a config", None, None, True, "agent"),
        # words that merely contain a keyword are not one
        ("prune the old branches", None, None, False, "chat"),
        ("the runtime is slow", None, None, False, "chat"),
        ("what does rerun mean", None, None, False, "chat"),
        # questions go to RAG only when documents exist
        ("How do I configure the sandbox?", None, None, True, "rag"),
        ("How do I configure the sandbox?", None, None, False, "chat"),
        ("沙箱怎么配置", None, None, True, "rag"),
        ("为什么会超时？", None, None, True, "rag"),
        ("导入时报错了", None, None, True, "rag"),
        ("Traceback (most recent call last): KeyError", None, None, True, "rag"),
        ("I get an exception on start", None, None, True, "rag"),
        # a task that is also a question goes to the agent
        ("can you write a script to check it?", None, None, True, "agent"),
        # everything else is chat
        ("hello there", None, None, True, "chat"),
        ("谢谢", None, None, True, "chat"),
    ],
)
def test_route_table(message, use_agent, use_rag, documents, expected):
    route = choose_route(
        message=message, use_agent=use_agent, use_rag=use_rag, documents_exist=documents
    )
    assert route.mode == expected
    assert route.agent == (expected == "agent")
    assert route.rag == (expected == "rag")


def test_explicit_and_heuristic_reasons():
    assert choose_route(message="hi", use_agent=True, documents_exist=False).reason == "explicit"
    assert choose_route(message="hi", documents_exist=False).reason == "heuristic"


def test_files_take_the_agent_unless_a_route_is_asked_for():
    files = choose_route(message="What is in it?", documents_exist=True, has_files=True)
    assert (files.mode, files.reason) == ("agent", "files")
    asked = choose_route(message="hi", use_rag=True, documents_exist=True, has_files=True)
    assert (asked.mode, asked.reason) == ("rag", "explicit")
    ruled_out = choose_route(message="hi", use_agent=False, documents_exist=False, has_files=True)
    assert (ruled_out.mode, ruled_out.reason) == ("chat", "heuristic")

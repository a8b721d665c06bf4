"""parse_reply: the ReAct reply format, the tolerated variants, and the errors fed back."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.parser import (
    FORMAT_REMINDER,
    OBSERVATION_STOP_SEQUENCES,
    ParsedReply,
    ToolCall,
    parse_reply,
    streamable_answer,
)

TOOLS = ("execute_code", "search_docs", "list_files")

CODE = 'def f(x):\n    return {"a": x}  # }\nprint(f("{"), \'}\')\n'


def parse(text: str) -> ParsedReply:
    reply = parse_reply(text, tool_names=TOOLS)
    assert [reply.action, reply.final, reply.error].count(None) == 2, reply
    assert reply.raw == text
    return reply


TOOL_CALLS = [
    pytest.param(
        'Thought: look it up\nAction: tool:search_docs\nargs: {"query": "channels"}',
        "search_docs",
        {"query": "channels"},
        id="canonical",
    ),
    pytest.param(
        'thought: x\naction: tool:search_docs\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="lowercase-keywords",
    ),
    pytest.param(
        'THOUGHT : x\nAction : tool:search_docs\nARGS : {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="uppercase-keywords-spaced-colons",
    ),
    pytest.param(
        '  thought: x\n action:  tool:search_docs\n  args: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="indented-keywords",
    ),
    pytest.param(
        'Action: TOOL:search_docs\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="uppercase-tool-prefix",
    ),
    pytest.param(
        'Action: Tool : search_docs\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="spaced-tool-prefix",
    ),
    pytest.param(
        'Action: tool: search_docs\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="space-after-tool-colon",
    ),
    pytest.param(
        'Action: tool:execute_code args: {"code": "1+1"}',
        "execute_code",
        {"code": "1+1"},
        id="args-on-action-line",
    ),
    pytest.param(
        'Action: tool:execute_code, args: {"code": "1+1"}',
        "execute_code",
        {"code": "1+1"},
        id="args-on-action-line-after-comma",
    ),
    pytest.param(
        'Action: tool:execute_code {"code": "1+1"}',
        "execute_code",
        {"code": "1+1"},
        id="object-right-after-name",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {\n  "query": "q",\n  "limit": 3\n}',
        "search_docs",
        {"query": "q", "limit": 3},
        id="multi-line-object",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs:\n```json\n{"query": "q"}\n```',
        "search_docs",
        {"query": "q"},
        id="json-fence-after-args",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: ```\n{\n  "query": "q"\n}\n```\nDone.',
        "search_docs",
        {"query": "q"},
        id="bare-fence-on-args-line",
    ),
    pytest.param(
        'Action: tool:search_docs\n```json\n{"query": "q"}\n```',
        "search_docs",
        {"query": "q"},
        id="fence-without-args-keyword",
    ),
    pytest.param(
        'Action: tool:search_docs\n{"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="object-on-next-line-without-args-keyword",
    ),
    pytest.param(
        'Action: tool:search_docs\n\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="blank-line-before-args",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {"query": "q"} and then I will read the result.',
        "search_docs",
        {"query": "q"},
        id="text-after-json-ignored",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {"query": "q", "tags": ["a", "b",],}',
        "search_docs",
        {"query": "q", "tags": ["a", "b"]},
        id="trailing-commas-repaired",
    ),
    pytest.param(
        "Action: tool:search_docs\nargs: {'query': 'say \"hi\"', 'n': 2}",
        "search_docs",
        {"query": 'say "hi"', "n": 2},
        id="single-quotes-repaired",
    ),
    pytest.param(
        "Action: tool:search_docs\nargs: {'query': 'it\\'s', 'exact': True, 'tag': None}",
        "search_docs",
        {"query": "it's", "exact": True, "tag": None},
        id="python-literals-repaired",
    ),
    pytest.param(
        "Action: tool:execute_code\nargs: {'code': 'x = {1: \"}\"}'}",
        "execute_code",
        {"code": 'x = {1: "}"}'},
        id="python-dict-brace-inside-single-quoted-string",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: "{\\"query\\": \\"q\\"}"',
        "search_docs",
        {"query": "q"},
        id="args-encoded-twice",
    ),
    pytest.param(
        "Action: tool:execute_code\nargs: " + json.dumps({"code": CODE}),
        "execute_code",
        {"code": CODE},
        id="code-with-braces-quotes-and-escaped-newlines",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {"query": "don\'t {stop}"}',
        "search_docs",
        {"query": "don't {stop}"},
        id="apostrophe-and-braces-in-json-string",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {"filter": {"lang": {"in": ["py"]}}, "query": "q"}',
        "search_docs",
        {"filter": {"lang": {"in": ["py"]}}, "query": "q"},
        id="nested-objects",
    ),
    pytest.param(
        'Thought: 查一下文档\nAction: tool:search_docs\nargs: {"query": "异步视图"}',
        "search_docs",
        {"query": "异步视图"},
        id="chinese-args",
    ),
    pytest.param(
        'Thought: x\r\nAction: tool:search_docs\r\nargs: {\r\n"query": "q"\r\n}\r\n',
        "search_docs",
        {"query": "q"},
        id="crlf-line-endings",
    ),
    pytest.param(
        '\n\n   Thought: x\nAction: tool:search_docs\nargs: {"query": "q"}   \n\n',
        "search_docs",
        {"query": "q"},
        id="surrounding-whitespace",
    ),
    pytest.param("Thought: x\nAction: tool:list_files", "list_files", {}, id="no-args-line-at-end"),
    pytest.param(
        "Action: tool:list_files\n\nThought: then I will read one",
        "list_files",
        {},
        id="no-args-line-before-next-keyword",
    ),
    pytest.param("Action: tool:list_files\nargs: {}", "list_files", {}, id="explicit-empty-object"),
    pytest.param("Action: tool:list_files.", "list_files", {}, id="sentence-period-after-name"),
    pytest.param(
        'Action: search_docs\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="bare-name-from-tool-names",
    ),
    pytest.param(
        'Action: search_docs\nAction Input: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="langchain-action-input",
    ),
    pytest.param(
        'Action: tool:search_docs\narguments: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="arguments-keyword",
    ),
    pytest.param(
        'Action:\ntool:search_docs\nargs: {"query": "q"}',
        "search_docs",
        {"query": "q"},
        id="action-value-on-next-line",
    ),
    pytest.param(
        'Action: tool:execute_code\nargs: {"code": "print(\'Final Answer: 1\')"}',
        "execute_code",
        {"code": "print('Final Answer: 1')"},
        id="final-answer-text-inside-args",
    ),
]


@pytest.mark.parametrize(("text", "name", "args"), TOOL_CALLS)
def test_tool_call_forms(text: str, name: str, args: dict[str, Any]) -> None:
    reply = parse(text)

    assert reply.error is None
    assert reply.action is not None
    assert (reply.action.name, reply.action.args) == (name, args)
    assert reply.final is None
    assert reply.ignored_actions == 0


FINALS = [
    pytest.param("Thought: done\nAction: final: 4", "4", id="canonical"),
    pytest.param("Thought:\nAction: final: 4", "4", id="empty-thought-does-not-swallow"),
    pytest.param("action: FINAL : 4", "4", id="case-and-spacing"),
    pytest.param("Action: Final Answer: 4", "4", id="action-final-answer"),
    pytest.param("Action: final_answer: 4", "4", id="action-final-underscore-answer"),
    pytest.param("Action: final\nThe answer is 4.", "The answer is 4.", id="final-without-colon"),
    pytest.param(
        "Action: final:\nFirst line.\n\nSecond paragraph.",
        "First line.\n\nSecond paragraph.",
        id="empty-final-line-takes-the-rest",
    ),
    pytest.param(
        "Action: final: Two steps:\n1. install\n2. run",
        "Two steps:\n1. install\n2. run",
        id="final-continues-on-following-lines",
    ),
    pytest.param(
        "Action: final: Use this:\n```python\nif x:\n    print({'a': 1})\n```",
        "Use this:\n```python\nif x:\n    print({'a': 1})\n```",
        id="code-fence-and-indentation-kept",
    ),
    pytest.param(
        "Action: final: Write it like this:\n```\nThought: ...\nAction: tool:search_docs\n```",
        "Write it like this:\n```\nThought: ...\nAction: tool:search_docs\n```",
        id="action-inside-code-block-is-answer-text",
    ),
    pytest.param("Thought: x\nFinal Answer: 42", "42", id="langchain-final-answer"),
    pytest.param("final answer:\n42\nmore", "42\nmore", id="final-answer-multi-line"),
    pytest.param("Thought: 算一下\nAction: final: 答案是 4。", "答案是 4。", id="chinese-final"),
    pytest.param("Action: final: a\r\nb\r\n", "a\nb", id="crlf-final"),
    pytest.param("Action: final:    \n\n  4  \n\n", "4", id="surrounding-whitespace-stripped"),
    pytest.param("Action:\n\nfinal: 4", "4", id="action-value-on-next-line"),
    pytest.param(
        "Action: final: Done.\nThought: this line is part of the answer",
        "Done.\nThought: this line is part of the answer",
        id="thought-after-final-kept",
    ),
]


@pytest.mark.parametrize(("text", "final"), FINALS)
def test_final_answer_forms(text: str, final: str) -> None:
    reply = parse(text)

    assert reply.error is None
    assert reply.final == final
    assert reply.action is None


ERRORS = [
    pytest.param("", "empty", id="empty-reply"),
    pytest.param(" \n\t\n", "empty", id="whitespace-only"),
    pytest.param("Thought: I should search first.", "no Action line", id="only-a-thought"),
    pytest.param("The answer is probably 4.", "no Action line", id="plain-text"),
    pytest.param("Thought: easy. Action: final: 4", "must start its own line", id="inline-action"),
    pytest.param("Thought: x\nAction:", "Action line is empty", id="empty-action"),
    pytest.param("Action: tool:\nargs: {}", "tool name", id="empty-tool-name"),
    pytest.param("Action: tool: args: {}", "tool name", id="args-where-name-should-be"),
    pytest.param('Action: tool:{"query": "q"}', "tool name", id="object-where-name-should-be"),
    pytest.param("Action: tool:123\nargs: {}", "not valid: `123`", id="invalid-tool-name"),
    pytest.param('Action: web_search\nargs: {"q": "x"}', "got `web_search`", id="unknown-bare"),
    pytest.param(
        'Action: tool:search_docs("channels")', "Unexpected text", id="call-syntax-after-name"
    ),
    pytest.param(
        "Action: tool:search_docs\nI will search for channels.",
        'no "args:" line',
        id="prose-instead-of-args-line",
    ),
    pytest.param("Action: tool:search_docs\nargs:", "args line is empty", id="empty-args-line"),
    pytest.param(
        'Action: tool:search_docs\nargs: {"query": "q"',
        "never closed",
        id="unbalanced-object",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {"query": "q}',
        "never closed",
        id="unterminated-string",
    ),
    pytest.param('Action: tool:search_docs\nargs: ["q"]', "not an array", id="args-array"),
    pytest.param(
        'Action: tool:search_docs\nargs: "channels"', "JSON string, not an object", id="args-string"
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: "[1, 2]"',
        "JSON string, not an object",
        id="args-string-encoding-an-array",
    ),
    pytest.param(
        "Action: tool:search_docs\nargs: 42", 'starting with "{", got `42`', id="args-number"
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: query="channels"',
        'got `query="channels"`',
        id="args-keyword-syntax",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {\n  "query": "q"\n  "limit": 3\n}',
        "Expecting ',' delimiter at line 3 column 3",
        id="invalid-json-says-where",
    ),
    pytest.param(
        "Action: tool:search_docs\nargs: {'query': 'don't'}",
        "not valid JSON",
        id="ambiguous-single-quotes-not-repaired",
    ),
    pytest.param(
        'Action: tool:search_docs\nargs: {"query": query}',
        "not valid JSON",
        id="unquoted-value",
    ),
    pytest.param('Action: tool:search_docs\nargs: {"limit": NaN}', "NaN", id="nan"),
    pytest.param("Thought: x\nAction: final:", "final answer is empty", id="empty-final"),
    pytest.param("Final Answer:   \n", "final answer is empty", id="empty-final-answer"),
    pytest.param(
        'Observation: {"result": 1}\nAction: final: 1',
        "starts with an Observation line",
        id="reply-starts-with-observation",
    ),
]


@pytest.mark.parametrize(("text", "fragment"), ERRORS)
def test_unusable_replies_give_a_specific_error(text: str, fragment: str) -> None:
    reply = parse(text)

    assert reply.error is not None
    assert fragment in reply.error
    assert reply.action is None
    assert reply.final is None


def test_bare_tool_name_needs_tool_names() -> None:
    reply = parse_reply('Action: search_docs\nargs: {"query": "q"}')

    assert reply.action is None
    assert reply.error == 'Action must be "tool:<name>" or "final: <answer>", got `search_docs`.'


def test_tool_prefix_names_are_not_checked_against_tool_names() -> None:
    reply = parse("Action: tool:no_such_tool\nargs: {}")

    assert reply.action == ToolCall(
        name="no_such_tool", args={}, raw="Action: tool:no_such_tool\nargs: {}"
    )


def test_json_error_names_the_object_rule() -> None:
    reply = parse('Action: tool:search_docs\nargs: {"query" "q"}')

    assert reply.error == (
        "args is not valid JSON (Expecting ':' delimiter at line 1 column 10); "
        "args must be one JSON object."
    )


THOUGHTS = [
    pytest.param("Thought: a\nb\nAction: final: x", "a\nb", id="multi-line"),
    pytest.param("Thought:\nAction: final: x", "", id="empty"),
    pytest.param("Thought:\nreasoning below\nAction: final: x", "reasoning below", id="next-line"),
    pytest.param("Let me check.\nAction: final: x", "Let me check.", id="no-keyword-preamble"),
    pytest.param("Sure!\nThought: a\nAction: final: x", "a", id="preamble-before-keyword"),
    pytest.param("Thought: a\nThought: b\nAction: final: x", "a\nb", id="repeated-keyword"),
    pytest.param("Thought: 我需要先查文档。\nAction: final: x", "我需要先查文档。", id="chinese"),
    pytest.param("Thought: only thinking", "only thinking", id="kept-on-missing-action"),
    pytest.param("Thought: x\r\ny\r\nAction: final: z", "x\ny", id="crlf"),
]


@pytest.mark.parametrize(("text", "thought"), THOUGHTS)
def test_thought(text: str, thought: str) -> None:
    assert parse(text).thought == thought


SEVERAL_ACTIONS = [
    pytest.param(
        "Action: tool:list_files\nargs: {}\nAction: tool:search_docs\nargs: {}",
        "list_files",
        None,
        1,
        id="two-tool-calls-first-runs",
    ),
    pytest.param(
        "Action: tool:list_files\nAction: tool:search_docs\nAction: final: x",
        "list_files",
        None,
        2,
        id="three-actions",
    ),
    pytest.param(
        "Action: tool:list_files\nargs: {}\nAction: final: there are 3 files",
        "list_files",
        None,
        1,
        id="tool-then-final-runs-tool",
    ),
    # The first action decides (so an answer can stream as it is written): a later action
    # only ends the answer.
    pytest.param(
        "Action: final: 3 files\nAction: tool:list_files\nargs: {}",
        None,
        "3 files",
        1,
        id="final-then-tool-answers",
    ),
    pytest.param(
        "Final Answer: 3\nAction: tool:list_files",
        None,
        "3",
        1,
        id="langchain-final-then-tool-answers",
    ),
    pytest.param(
        "Action: final: a\nAction: final: b", None, "a", 1, id="two-finals-first-wins-up-to-next"
    ),
    pytest.param(
        "Action: final: see\n```\nAction: tool:list_files\n```",
        None,
        "see\n```\nAction: tool:list_files\n```",
        0,
        id="fenced-action-in-final-not-counted",
    ),
]


@pytest.mark.parametrize(("text", "name", "final", "ignored"), SEVERAL_ACTIONS)
def test_several_actions(text: str, name: str | None, final: str | None, ignored: int) -> None:
    reply = parse(text)

    assert (reply.action.name if reply.action else None) == name
    assert reply.final == final
    assert reply.ignored_actions == ignored


def test_first_tool_call_with_bad_args_is_not_replaced_by_the_next() -> None:
    reply = parse('Action: tool:search_docs\nargs: {"query": }\nAction: tool:list_files')

    assert reply.action is None
    assert reply.error is not None
    assert reply.ignored_actions == 1


OBSERVATIONS = [
    pytest.param(
        "Thought: x\nAction: tool:list_files\nargs: {}\nObservation: 3 files\n"
        "Thought: done\nAction: final: 3",
        id="canonical",
    ),
    pytest.param(
        'Action: tool:list_files\nargs: {}\n  observation : ["a"]\nAction: final: a',
        id="indented-lowercase",
    ),
    pytest.param(
        "Action: tool:list_files\r\nargs: {}\r\nOBSERVATION: x\r\nAction: final: a", id="crlf"
    ),
]


@pytest.mark.parametrize("text", OBSERVATIONS)
def test_hallucinated_observation_and_everything_after_it_is_cut(text: str) -> None:
    reply = parse(text)

    assert reply.truncated_at_observation
    assert reply.action is not None
    assert reply.action.name == "list_files"
    assert reply.final is None
    assert reply.ignored_actions == 0


def test_observation_mid_line_is_not_cut() -> None:
    reply = parse("Thought: the Observation: field is empty\nAction: final: ok")

    assert not reply.truncated_at_observation
    assert reply.thought == "the Observation: field is empty"


def test_reply_without_observation_is_not_marked_truncated() -> None:
    assert not parse("Action: final: 1").truncated_at_observation


@pytest.mark.parametrize("stop", OBSERVATION_STOP_SEQUENCES)
def test_every_stop_sequence_is_also_cut_by_the_parser(stop: str) -> None:
    reply = parse(f"Thought: x\nAction: final: 4{stop} invented")

    assert reply.truncated_at_observation
    assert reply.final == "4"


def test_stop_sequences_fit_the_openai_limit() -> None:
    assert 1 <= len(OBSERVATION_STOP_SEQUENCES) <= 4
    assert all(stop.startswith("\n") for stop in OBSERVATION_STOP_SEQUENCES)


def test_tool_call_raw_is_the_action_as_written() -> None:
    reply = parse(
        'Thought: x\nAction: tool:search_docs\nargs:\n```json\n{"query": "q"}\n```\nthen I wait'
    )

    assert reply.action is not None
    assert reply.action.raw == 'Action: tool:search_docs\nargs:\n```json\n{"query": "q"}\n```'


def test_reply_raw_is_the_text_as_received() -> None:
    text = "Thought: x\r\nAction: final: y\r\nObservation: z"

    assert parse(text).raw == text


def test_non_ascii_is_kept_everywhere() -> None:
    reply = parse('Thought: 先看看\nAction: tool:search_docs\nargs: {"query": "日本語 ü"}')

    assert reply.thought == "先看看"
    assert reply.action is not None
    assert reply.action.args == {"query": "日本語 ü"}


def test_format_reminder_is_one_line_naming_both_forms() -> None:
    assert "\n" not in FORMAT_REMINDER
    assert "Action: tool:<name>" in FORMAT_REMINDER
    assert "args:" in FORMAT_REMINDER
    assert "Action: final:" in FORMAT_REMINDER


# -- streamable_answer: the one rule for "final answer" and "may stream" ------------------

STREAMED_REPLIES = [
    "Thought: x\nAction: final: Hello world\nsecond line",
    "Observation: {}\nAction: final: 1",
    "Thought: a\nAction: final answer: 42",
    "Action: final: 3 files\nAction: tool:list_files\nargs: {}",
    "Action: final: see\n```\nAction: tool:list_files\n```\nok",
    'Thought: t\nAction: tool:echo\nargs: {"a": 1}',
    "Final Answer: 3\nObservation: 4",
    "Action:\n\nfinal: 4 and more\n  Observation : no",
    "Thought: x\nAction: final: a\n  thought: b\nFinal Answer: c",
    "Action: final: 答案是 4。\n下一行",
    "no format at all\nAction: final: late",
]


@given(
    text=st.sampled_from(STREAMED_REPLIES)
    | st.text(alphabet="AaObTtFfinl:ction sevrwu \n`{}", max_size=80),
    cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=12),
)
def test_streamed_answer_text_is_never_taken_back(text: str, cuts: list[int]) -> None:
    """Whatever pieces a reply arrives in, each answer streamed is a prefix of the next, and
    of the final answer ``parse_reply`` finds in the whole reply (none at all when the reply
    turns out not to be one)."""
    final = parse_reply(text).final
    sent = ""
    for cut in [*sorted(c for c in cuts if c < len(text)), len(text)]:
        answer = streamable_answer(text[:cut]) or ""
        if sent:
            assert answer.startswith(sent), (text, cut, sent, answer)
        sent = answer or sent
    assert (final or "").startswith(sent), (text, final, sent)


def test_a_reply_that_begins_with_an_observation_never_streams() -> None:
    """The real-model defect: deltas of an answer went out, then the parser rejected the reply
    (it began with ``Observation:``) and the run failed."""
    reply = 'Observation: {"x": 1}\nAction: final: The answer.'
    for cut in range(len(reply) + 1):
        assert streamable_answer(reply[:cut]) is None
    assert parse_reply(reply).final is None


def test_a_line_that_may_still_become_a_keyword_is_held_back() -> None:
    assert streamable_answer("Action: final: one\nObserv") == "one"
    assert streamable_answer("Action: final: one\nObservation: x") == "one"
    assert streamable_answer("Action: final: one\nObserved") == "one\nObserved"
    assert streamable_answer("Action: final ans") is None
    assert streamable_answer("Action: final answer: 42") == "42"

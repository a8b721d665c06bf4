"""The system prompt, observation messages and the step-limit prompt."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.parser import parse_reply
from agent.prompt import (
    MIN_OBSERVATION_LIMIT,
    ToolSpec,
    final_answer_prompt,
    observation_message,
    system_prompt,
)

EXECUTE_CODE = ToolSpec(
    name="execute_code",
    description="Run Python code in the sandbox and return stdout, stderr and the exit code.",
    parameters={
        "type": "object",
        "required": ["code"],
        "properties": {
            "timeout": {"type": "integer", "description": "seconds"},
            "code": {"type": "string", "description": "Python 源代码"},
        },
    },
)
LIST_FILES = ToolSpec(name="list_files", description="List the files of the workspace.")
PREFIX = "Observation: "


def example(prompt: str, heading: str) -> str:
    """The example block that follows ``heading`` in the prompt."""
    block = prompt.split(heading + "\n\n", 1)[1]
    return block.split("\n\n", 1)[0]


def test_system_prompt_lists_every_tool_with_its_sorted_schema() -> None:
    prompt = system_prompt([EXECUTE_CODE, LIST_FILES])

    assert f"- execute_code: {EXECUTE_CODE.description}\n" in prompt
    assert (
        '  parameters: {"properties": {"code": {"description": "Python 源代码", "type": "string"}, '
        '"timeout": {"description": "seconds", "type": "integer"}}, "required": ["code"], '
        '"type": "object"}\n'
    ) in prompt
    assert '- list_files: List the files of the workspace.\n  parameters: {"properties": {}, ' in (
        prompt
    )


def test_system_prompt_explains_the_protocol() -> None:
    prompt = system_prompt([EXECUTE_CODE])

    assert "Action: tool:<tool name>\nargs: " in prompt
    assert "Action: final: <your answer to the user>" in prompt
    assert "Exactly one Action per reply" in prompt
    assert "single JSON object" in prompt
    assert 'Never write a line starting with "Observation:"' in prompt
    assert "language the user writes in" in prompt


def test_system_prompt_tool_example_parses_to_a_call_of_the_first_tool() -> None:
    block = example(system_prompt([EXECUTE_CODE, LIST_FILES]), "Example of a tool call:")
    reply = parse_reply(block)

    assert reply.action is not None
    assert reply.action.name == "execute_code"
    assert reply.action.args == {"code": "..."}


def test_system_prompt_final_example_parses_to_a_final_answer() -> None:
    block = example(system_prompt([EXECUTE_CODE]), "Example of a final answer:")

    assert parse_reply(block).final is not None


def test_system_prompt_example_for_a_tool_without_required_args() -> None:
    block = example(system_prompt([LIST_FILES]), "Example of a tool call:")
    reply = parse_reply(block)

    assert reply.action is not None
    assert (reply.action.name, reply.action.args) == ("list_files", {})


def test_system_prompt_without_tools_only_offers_the_final_form() -> None:
    prompt = system_prompt([])

    assert "No tools are available" in prompt
    assert "Example of a tool call:" not in prompt
    assert "Example of a final answer:" in prompt


def test_system_prompt_indents_multi_line_descriptions() -> None:
    tool = ToolSpec(name="list_files", description="List files.\nHidden files are skipped.")

    assert "- list_files: List files.\n  Hidden files are skipped.\n" in system_prompt([tool])


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty"),
        pytest.param("run code", id="space"),
        pytest.param("1tool", id="leading-digit"),
        pytest.param("final", id="final"),
        pytest.param("Final_Answer", id="final-answer"),
        pytest.param("args", id="args"),
        pytest.param("action_input", id="action-input"),
    ],
)
def test_system_prompt_rejects_names_the_parser_cannot_read_back(name: str) -> None:
    with pytest.raises(ValueError, match="cannot be used"):
        system_prompt([ToolSpec(name=name, description="x")])


def test_tool_spec_defaults_to_an_empty_object_schema() -> None:
    assert LIST_FILES.parameters == {"type": "object", "properties": {}}


def test_observation_message_is_sorted_compact_json_with_non_ascii_kept() -> None:
    text, truncated = observation_message(
        {"stdout": "héllo 世界", "exit_code": 0, "z": {"b": 1, "a": 2}}
    )

    assert text == 'Observation: {"exit_code": 0, "stdout": "héllo 世界", "z": {"a": 2, "b": 1}}'
    assert not truncated


def test_observation_message_at_exactly_the_limit_is_not_truncated() -> None:
    payload = "x" * 98

    text, truncated = observation_message(payload, limit=100)

    assert text == f'{PREFIX}"{payload}"'
    assert not truncated


LONG_PAYLOADS = [
    pytest.param({"stdout": "a" * 20_000}, 8000, id="plain-default-limit"),
    pytest.param({"stdout": "a" * 101}, 100, id="just-over"),
    pytest.param({"stdout": '"\\' * 5000}, 1000, id="quotes-and-backslashes"),
    pytest.param({"stdout": "结果" * 5000}, 500, id="non-ascii"),
    pytest.param({"lines": ["\n\t"] * 3000}, MIN_OBSERVATION_LIMIT, id="control-chars-minimum"),
]


@pytest.mark.parametrize(("payload", "limit"), LONG_PAYLOADS)
def test_long_observation_is_valid_truncated_json_within_the_limit(
    payload: Any, limit: int
) -> None:
    full = json.dumps(payload, ensure_ascii=False, sort_keys=True)

    text, truncated = observation_message(payload, limit=limit)

    assert truncated
    assert text.startswith(PREFIX)
    body = text.removeprefix(PREFIX)
    assert len(body) <= limit
    data = json.loads(body)
    assert list(data) == ["result_truncated", "result"]
    assert data["result_truncated"] is True
    assert full.startswith(data["result"])
    longer = {"result_truncated": True, "result": full[: len(data["result"]) + 1]}
    assert len(json.dumps(longer, ensure_ascii=False)) > limit


def test_truncated_observation_keeps_non_ascii_unescaped() -> None:
    text, _ = observation_message({"stdout": "结果" * 5000}, limit=500)

    assert "结果结果" in text
    assert "\\u" not in text


def test_observation_message_rejects_a_limit_too_small_for_the_wrapper() -> None:
    with pytest.raises(ValueError, match="limit"):
        observation_message("x", limit=MIN_OBSERVATION_LIMIT - 1)


def test_observation_message_rejects_payloads_that_are_not_json() -> None:
    with pytest.raises(TypeError):
        observation_message({"when": object()})


def test_final_answer_prompt_asks_for_a_final_answer_without_tools() -> None:
    prompt = final_answer_prompt()

    assert "Do not call any more tools" in prompt
    assert "Action: final:" in prompt

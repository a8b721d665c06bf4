"""Native tool calling (``AGENT_PROTOCOL=tools``) against the scripted model server: the
tools go as the request's ``tools``, several calls of one reply run in order and are each
answered by a ``role: tool`` message, bad calls become results the model can act on, and a
run records the same steps and events as with the text protocol."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import agent.modes
import agent.services
from agent.exceptions import AgentFormatErrors
from agent.executor import run_start
from agent.loop import LoopConfig, run_react
from agent.models import RunEvent
from agent.protocols import ToolsProtocol, protocol_named
from agent.services import run_create
from agent.tools.registry import Tool, ToolContext, ToolRegistry
from tests.agent.test_loop import Recorded, registry
from traces.models import Step

TOOLS = ToolsProtocol()


def tool_reply(*calls: tuple[str, Any], content: str = "") -> dict[str, Any]:
    return {"content": content, "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}


async def react(provider: Any, recorder: Recorded, **config: Any) -> str:
    return await run_react(
        task="Do the task.",
        llm=provider,
        tools=registry(),
        recorder=recorder,
        context=ToolContext(user=None),
        config=LoopConfig(**config),
        protocol=TOOLS,
    )


async def test_tools_go_as_the_request_tools_with_no_reply_format(openai_provider, fake_openai):
    fake_openai.script(["The answer is 42."])
    recorder = Recorded()
    assert await react(openai_provider, recorder) == "The answer is 42."
    request = fake_openai.requests[0]
    names = [tool["function"]["name"] for tool in request["tools"]]
    assert names == ["count", "echo", "flaky", "slow"]
    assert request["tools"][0]["function"]["parameters"]["required"] == ["n"]
    assert "stop" not in request
    assert "Action:" not in request["messages"][0]["content"]
    # One sentence could still have been a preamble to a tool call: it goes out at the end.
    assert recorder.answers == [("The answer is 42.", False)]


async def test_an_answer_longer_than_a_preamble_streams_while_it_is_written(
    openai_provider, fake_openai
):
    answer = "First paragraph.\n\nSecond paragraph, with more words to stream."
    fake_openai.script([answer])
    recorder = Recorded()
    assert await react(openai_provider, recorder) == answer
    assert recorder.answers == [(answer, True)]
    assert len(recorder.deltas) > 3
    assert "".join(recorder.deltas) == answer


async def test_several_calls_in_one_reply_run_in_order_each_answered_by_its_id(
    openai_provider, fake_openai
):
    fake_openai.script(
        [
            tool_reply(("echo", {"value": "a"}), ("count", {"n": 2}), content="Two at once."),
            "Done: a and [0, 1].",
        ]
    )
    recorder = Recorded()
    assert await react(openai_provider, recorder) == "Done: a and [0, 1]."
    assert recorder.tools_started == ["echo", "count"]
    assert [i.call_id for i in recorder.iterations] == ["call_1", "call_2"]
    assert [i.index for i in recorder.iterations] == [1, 1]
    assert recorder.iterations[0].reply is not None
    assert recorder.iterations[0].reply.thought == "Two at once."
    second = fake_openai.requests[1]["messages"]
    assistant = second[2]
    assert assistant["role"] == "assistant"
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_1", "call_2"]
    assert json.loads(assistant["tool_calls"][1]["function"]["arguments"]) == {"n": 2}
    results = second[3:]
    assert [(m["role"], m["tool_call_id"]) for m in results] == [
        ("tool", "call_1"),
        ("tool", "call_2"),
    ]
    assert json.loads(results[0]["content"]) == "a"
    assert json.loads(results[1]["content"]) == [0, 1]
    # The text before the calls was a thought, never an answer.
    assert "Two at once." not in "".join(recorder.deltas)


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        pytest.param(("ecko", {"value": 1}), "There is no tool named 'ecko'", id="unknown-tool"),
        pytest.param(("echo", '{"value": '), "are not valid JSON", id="invalid-json"),
        pytest.param(("echo", "[1, 2]"), "must be one JSON object, not list", id="not-object"),
        pytest.param(("count", {"n": 99}), "Invalid arguments at $.n", id="schema-violation"),
    ],
)
async def test_a_bad_call_becomes_a_result_the_model_can_act_on(
    openai_provider, fake_openai, call, expected
):
    fake_openai.script([tool_reply(call), "Recovered."])
    recorder = Recorded()
    assert await react(openai_provider, recorder) == "Recovered."
    (iteration,) = recorder.iterations
    assert iteration.error is not None
    assert expected in iteration.error
    answer = fake_openai.requests[1]["messages"][-1]
    assert answer["role"] == "tool"
    assert expected in json.loads(answer["content"])["error"]


async def test_an_empty_reply_is_a_format_error_and_the_cap_names_it(openai_provider, fake_openai):
    fake_openai.script(["", "  ", "\n", ""])
    with pytest.raises(AgentFormatErrors) as stopped:
        await react(openai_provider, Recorded())
    assert stopped.value.details["stopped_by"] == "format_errors"
    assert len(fake_openai.requests) == 4
    correction = fake_openai.requests[1]["messages"][-1]
    assert correction["role"] == "user"
    assert "no text and no tool call" in correction["content"]


async def test_the_answer_now_call_after_the_cap_is_answered_without_tools(
    openai_provider, fake_openai
):
    fake_openai.script([tool_reply(("echo", {"value": 1}))] * 2 + ["Best I can say: 1."])
    recorder = Recorded()
    assert await react(openai_provider, recorder, max_iterations=2) == "Best I can say: 1."
    last = fake_openai.requests[-1]["messages"][-1]
    assert last["role"] == "user"
    assert "Do not call any more tools" in last["content"]


def test_unknown_protocol_names_are_refused() -> None:
    with pytest.raises(ValueError, match="choose one of react, tools"):
        protocol_named("json")


# -- a whole run ----------------------------------------------------------------------------

pytestmark_db = pytest.mark.django_db(transaction=True)
EMPTY = {"type": "object", "properties": {"value": {}}, "additionalProperties": False}


@pytestmark_db
async def test_a_run_records_the_same_shapes_as_the_text_protocol(
    scripted, settings, monkeypatch, user
):
    settings.AGENT_PROTOCOL = "tools"
    tools = ToolRegistry(
        [Tool(name="echo", description="Echo.", parameters=EMPTY, handler=lambda a, c: a)]
    )
    monkeypatch.setattr(agent.modes, "default_registry", lambda: tools)
    monkeypatch.setattr(agent.services, "default_registry", lambda: tools)
    scripted.script(
        [
            tool_reply(("echo", {"value": 1}), ("echo", {"value": 2}), content="Both."),
            "Got 1 and 2.",
        ]
    )
    run = await run_create(user=user, message="echo twice")
    await asyncio.wait_for(run_start(run), timeout=15)

    steps = [s async for s in Step.objects.filter(trace_id=str(run.trace_id)).order_by("seq")]
    kinds = [s.step_type for s in steps]
    assert kinds == [
        "goal",
        "thought",
        "action",
        "result",
        "action",
        "result",
        "thought",
        "response",
    ]
    thought = steps[1]
    assert thought.data["thought"] == "Both."
    assert [c["name"] for c in thought.data["tool_calls"]] == ["echo", "echo"]
    assert [steps[2].data["call_id"], steps[4].data["call_id"]] == ["call_1", "call_2"]
    assert steps[2].parent_id == steps[4].parent_id == thought.id
    assert steps[3].data["result"] == {"value": 1}
    events = [e.payload async for e in RunEvent.objects.filter(run_id=run.id).order_by("seq")]
    step_events = [e for e in events if e["type"] == "step"]
    assert [(e["step_index"], e["tool_name"], e["tool_args"]) for e in step_events] == [
        (1, "echo", {"value": 1}),
        (2, "echo", {"value": 2}),
    ]
    assert step_events[0]["step_id"] == step_events[1]["step_id"] == str(thought.id)
    actions = [step.id for step in steps if step.step_type == "action"]
    assert [e["action_id"] for e in step_events] == [str(a) for a in actions]
    assert "".join(e["content"] for e in events if e["type"] == "delta") == "Got 1 and 2."
    assert events[-1] == {"type": "done", "run_id": str(run.id), "status": "completed"}


@pytestmark_db
async def test_the_offline_provider_speaks_native_tool_calling(settings, user, sandbox_image):
    """With no model configured and ``AGENT_PROTOCOL=tools``, code in the message still runs:
    the offline provider answers with a ``tool_calls`` reply."""
    settings.AGENT_PROTOCOL = "tools"
    run = await run_create(user=user, message="run: print(6 * 7)")
    await asyncio.wait_for(run_start(run), timeout=60)
    await run.arefresh_from_db()
    assert run.status == "completed"
    action = await Step.objects.aget(trace_id=str(run.trace_id), step_type="action")
    assert action.data["tool_name"] == "execute_code"
    assert action.data["call_id"] == "call_1"
    result = await Step.objects.aget(trace_id=str(run.trace_id), step_type="result")
    assert result.data["result"]["stdout"] == "42\n"

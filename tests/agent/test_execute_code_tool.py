"""The ``execute_code`` tool over the real scan and the real Docker sandbox."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

import pytest

from agent.exceptions import ToolFailed, ToolInputInvalid
from agent.tools import ToolContext, ToolRegistry, default_registry
from agent.tools.execute_code import TOOL
from devassist.api import http_status
from sandbox.backends.docker import DockerSandbox
from sandbox.slots import get_sandbox_slots, slot_owner

pytestmark = pytest.mark.docker


def registry() -> ToolRegistry:
    return default_registry().subset(["execute_code"])


async def run(args: dict[str, Any]) -> Any:
    return await registry().call("execute_code", args, ToolContext(user=None))


def test_the_tool_is_in_the_default_registry():
    assert "execute_code" in default_registry()
    assert default_registry().get("execute_code") is TOOL
    assert TOOL.is_async
    (spec,) = [
        t["function"]
        for t in default_registry().to_openai_tools()
        if t["function"]["name"] == "execute_code"
    ]
    assert spec["parameters"]["required"] == ["code"]
    assert spec["parameters"]["additionalProperties"] is False


async def test_it_runs_code_and_returns_the_output(sandbox_image):
    observation = await run({"code": "print(1+1)"})
    assert observation["stdout"] == "2\n"
    assert observation["stderr"] == ""
    assert observation["exit_code"] == 0
    assert observation["timed_out"] is False
    assert observation["oom_killed"] is False
    assert observation["cancelled"] is False
    assert observation["truncated"] is False
    assert isinstance(observation["duration_ms"], int)
    assert "safety" not in observation
    assert "blocked" not in observation


async def test_an_error_in_the_code_is_an_observation(sandbox_image):
    observation = await run({"code": "raise SystemExit('nope')"})
    assert observation["exit_code"] == 1
    assert "nope" in observation["stderr"]


async def test_blocked_code_comes_back_as_an_observation_with_the_report():
    observation = await run({"code": "import socket\nsocket.socket()"})
    assert observation["blocked"] is True
    assert observation["safety"].startswith("Safety check BLOCKED:")
    assert "socket" in observation["safety"]
    assert observation["findings"]
    assert all(set(f) == {"rule_id", "level", "line"} for f in observation["findings"])
    assert {"rule_id": "network.socket", "level": "blocked", "line": 1} in observation["findings"]
    assert "stdout" not in observation


async def test_warnings_ride_along_with_the_output(sandbox_image):
    observation = await run({"code": "print(eval('1 + 1'))"})
    assert observation["stdout"] == "2\n"
    assert observation["safety"].startswith("Safety check WARNING:")


async def test_a_timeout_is_reported_in_the_observation(sandbox_image):
    observation = await run({"code": "while True:\n    pass", "timeout_s": 1})
    assert observation["timed_out"] is True
    assert observation["exit_code"] is None


async def test_cancelling_the_call_stops_the_container_promptly(sandbox_image):
    slots = get_sandbox_slots()
    owner = slot_owner(None)
    task = asyncio.create_task(run({"code": "import time\ntime.sleep(30)", "timeout_s": 60}))
    await until(lambda: slots.held(owner) == 1)
    await asyncio.sleep(1.0)

    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task
    # The claim lasts as long as the sandbox thread's job: it ends once the container is
    # stopped, long before the code's 30 s are up.
    await until(lambda: slots.held(owner) == 0)


async def until(condition: Callable[[], bool], *, timeout_s: float = 20) -> None:
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the condition never held")


@pytest.mark.parametrize(
    ("args", "path"),
    [
        ({"code": "print(1)", "timeout_s": 0}, "$.timeout_s"),
        ({"code": "print(1)", "timeout_s": 61}, "$.timeout_s"),
        ({"code": "print(1)", "timeout_s": "5"}, "$.timeout_s"),
        ({}, "$"),
        ({"code": ""}, "$.code"),
        ({"code": 42}, "$.code"),
        ({"code": "print(1)", "language": "bash"}, "$"),
        ({"code": "x" * (100 * 1024 + 1)}, "$.code"),
    ],
)
async def test_invalid_arguments_are_refused_before_anything_runs(args, path):
    with pytest.raises(ToolInputInvalid) as caught:
        await run(args)
    assert http_status(caught.value) == HTTPStatus.BAD_REQUEST
    assert caught.value.details["tool"] == "execute_code"
    assert caught.value.details["path"] == path


async def test_code_over_the_byte_limit_fails_with_the_sandbox_reason():
    code = "#" + "é" * 60_000  # within maxLength (characters), over the byte limit
    with pytest.raises(ToolFailed) as caught:
        await run({"code": code})
    assert caught.value.details["code"] == "sandbox_code_too_large"
    assert "bytes" in caught.value.message


async def test_an_unreachable_engine_is_a_tool_failure_the_model_can_read(settings, monkeypatch):
    settings.DOCKER_HOST = "unix:///nonexistent/docker.sock"
    unreachable = DockerSandbox(pool_size=0)
    monkeypatch.setattr("sandbox.services.get_sandbox", lambda: unreachable)
    with pytest.raises(ToolFailed) as caught:
        await run({"code": "print(1)"})
    assert caught.value.message.startswith("code execution is unavailable: ")
    assert caught.value.details["tool"] == "execute_code"
    assert caught.value.details["error"] == "SandboxUnavailable"
    assert "sandbox_image build" in caught.value.details["hint"]

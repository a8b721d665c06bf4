"""Fair sandboxes: the process's sandbox threads and the per-user cap, on their own and through
POST /api/sandbox/execute, the agent's execute_code tool and /healthz (real Docker)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient

from agent.exceptions import ToolFailed
from agent.loop import LoopConfig, _result_of
from agent.protocols import Call
from agent.tools import ToolContext, default_registry
from devassist.api import http_status
from sandbox.exceptions import SandboxBusy
from sandbox.services import code_execute, run_scanned
from sandbox.slots import SandboxSlots, get_sandbox_slots
from tests.conftest import post_as
from traces.models import Trace

SLEEPER = "import time\ntime.sleep(60)"


@pytest.fixture
def slots(settings: Any) -> Iterator[Any]:
    """Fresh process slots for the test; the test sets ``settings.SANDBOX_SLOTS`` and
    ``settings.SANDBOX_USER_SLOTS`` before its first execution."""
    settings.SANDBOX_SLOTS = 2
    settings.SANDBOX_USER_SLOTS = 1
    get_sandbox_slots.cache_clear()
    yield settings
    get_sandbox_slots().executor.shutdown(wait=True)
    get_sandbox_slots.cache_clear()


async def settle(condition: Any, *, timeout_s: float = 20.0) -> None:
    """Wait until ``condition()`` holds (polling); fail after about ``timeout_s``."""
    for _ in range(int(timeout_s / 0.02)):
        if condition():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"still not so after {timeout_s:g} s")


# --- the slots on their own -------------------------------------------------------------------


async def test_a_user_past_their_slots_is_refused_at_once_and_others_are_not():
    slots = SandboxSlots(size=2, per_user=1)
    with slots.claim("alice"):
        with pytest.raises(SandboxBusy) as refused, slots.claim("alice"):
            pass
        with slots.claim("bob") as bob:
            assert await bob.run(lambda: "ran") == "ran"
    assert http_status(refused.value) == HTTPStatus.TOO_MANY_REQUESTS
    assert refused.value.code == "sandbox_busy"
    assert refused.value.details == {"user_slots": 1}
    assert "1 code execution running" in refused.value.message
    assert (slots.held("alice"), slots.held("bob")) == (0, 0)
    slots.executor.shutdown()


async def test_a_started_job_keeps_its_claim_until_it_returns_even_if_its_caller_is_cancelled():
    slots = SandboxSlots(size=1, per_user=1)
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        release.wait(10)

    async def execute() -> None:
        with slots.claim("alice") as claim:
            await claim.run(job)

    task = asyncio.create_task(execute())
    await settle(started.is_set)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    # The thread still runs (the real caller stops its container through a cancel event).
    assert slots.held("alice") == 1
    with pytest.raises(SandboxBusy), slots.claim("alice"):
        pass
    release.set()
    await settle(lambda: slots.held("alice") == 0)
    slots.executor.shutdown()


async def test_jobs_beyond_the_process_slots_wait_in_turn_and_a_cancelled_wait_never_runs():
    slots = SandboxSlots(size=1, per_user=5)
    release = threading.Event()
    ran: list[str] = []

    async def execute(owner: str) -> None:
        def job() -> None:
            ran.append(owner)
            release.wait(10)

        with slots.claim(owner) as claim:
            await claim.run(job)

    first = asyncio.create_task(execute("alice"))
    await settle(lambda: ran == ["alice"])
    waiting = asyncio.create_task(execute("bob"))
    cancelled = asyncio.create_task(execute("carol"))
    await settle(lambda: slots.held("carol") == 1)
    cancelled.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled
    assert slots.held("carol") == 0
    release.set()
    await asyncio.gather(first, waiting)
    assert ran == ["alice", "bob"]
    slots.executor.shutdown()


def test_slots_must_be_at_least_one(slots):
    slots.SANDBOX_USER_SLOTS = 0
    with pytest.raises(ImproperlyConfigured, match="SANDBOX_USER_SLOTS"):
        get_sandbox_slots()
    get_sandbox_slots.cache_clear()
    slots.SANDBOX_USER_SLOTS = 1


def test_the_default_user_cap_is_half_the_process_slots_and_at_least_one():
    from devassist import settings as project_settings

    size, per_user = project_settings.SANDBOX_SLOTS, project_settings.SANDBOX_USER_SLOTS
    assert per_user == max(1, size // 2)


# --- through the API and the agent's tool (real Docker) ---------------------------------------


async def execute(user: User, code: str) -> httpx.Response:
    """POST /api/sandbox/execute as ``user`` through the ASGI application."""
    return await post_as(user, "/api/sandbox/execute", {"code": code})


@pytest.mark.django_db(transaction=True)
async def test_a_user_with_an_execution_running_gets_429_and_another_user_still_runs(
    slots, user, other_user, sandbox_image
):
    running = asyncio.create_task(code_execute(user=user, code=SLEEPER, timeout_s=60))
    try:
        await settle(lambda: get_sandbox_slots().held(user.pk) == 1)

        refused = await execute(user, "print(1)")
        assert refused.status_code == HTTPStatus.TOO_MANY_REQUESTS
        body = refused.json()
        assert body["error"]["code"] == "sandbox_busy"
        assert body["error"]["details"] == {"user_slots": 1}
        assert body["request_id"] == refused.headers["X-Request-ID"]
        # Refused before anything was recorded: only the running execution has a trace.
        assert await Trace.objects.filter(user=user).acount() == 1

        served = await execute(other_user, "print(6 * 7)")
        assert served.status_code == HTTPStatus.OK, served.content
        assert served.json()["stdout"] == "42\n"
        assert not running.done()
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    await settle(lambda: get_sandbox_slots().held(user.pk) == 0)
    trace = await Trace.objects.aget(user=user)
    await settle_trace(trace)


async def settle_trace(trace: Trace) -> None:
    """Wait until the cancelled execution's trace is finished (its last writes are shielded
    from the cancellation), so nothing writes after the test."""
    for _ in range(500):
        await trace.arefresh_from_db()
        if trace.status != "running":
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the cancelled execution's trace is still running")


@pytest.mark.django_db(transaction=True)
async def test_the_tool_tells_the_model_that_the_sandbox_is_busy(slots, user, sandbox_image):
    tools = default_registry().subset(["execute_code"])
    context = ToolContext(user=user)
    with get_sandbox_slots().claim(user.pk):
        with pytest.raises(ToolFailed) as failed:
            await tools.call("execute_code", {"code": "print(1)"}, context)
        call = Call(name="execute_code", args={"code": "print(1)"}, raw="")
        observation = await _result_of(tools, call, context, LoopConfig())
    assert failed.value.details["code"] == "sandbox_busy"
    assert failed.value.details["user_slots"] == 1
    assert "code execution is busy" in failed.value.message
    # The loop hands it to the model once (no retry) as the step's error.
    assert set(observation) == {"error", "suggestion"}
    assert observation["error"].startswith("execute_code failed: ")
    assert "Wait for one to finish" in observation["error"]
    assert (await tools.call("execute_code", {"code": "print(1)"}, context))["stdout"] == "1\n"


@pytest.mark.django_db(transaction=True)
async def test_healthz_answers_while_every_sandbox_slot_is_busy(slots, user, sandbox_image):
    # More sleeping executions than the event loop's default thread pool has threads: when
    # executions ran there, /healthz's Docker check queued behind them.
    count = min(32, (os.cpu_count() or 1) + 4) + 2
    slots.SANDBOX_USER_SLOTS = count
    tasks = [
        asyncio.create_task(run_scanned(user=user, code=SLEEPER, timeout_s=60))
        for _ in range(count)
    ]
    try:
        await settle(lambda: get_sandbox_slots().held(user.pk) == count)
        response = await asyncio.wait_for(AsyncClient().get("/healthz"), timeout=30)
        assert response.status_code == HTTPStatus.OK, response.content
        assert response.json()["checks"]["docker"]["ok"] is True
        assert not any(task.done() for task in tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    await settle(lambda: get_sandbox_slots().held(user.pk) == 0, timeout_s=60)

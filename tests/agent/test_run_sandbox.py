"""A run's sandbox, end to end with the scripted model and real Docker: its ``execute_code``
calls share one interpreter (``SANDBOX_STATE=run``) in a container labelled with the run's id,
which is gone when the run ends, is cancelled or its worker is lost; the files code writes are
stored as the trace's artifacts and the model reads only their description; input files are
readable by the code and named to the model."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta
from http import HTTPStatus
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from agent.executor import run_start, stop_local
from agent.leases import reap_lost
from agent.models import AgentRun, RunEvent, RunStatus
from agent.services import run_create
from sandbox.backends import get_sandbox
from sandbox.backends.docker import LABEL_OWNER
from sandbox.engine import docker_client
from sandbox.files import input_files
from tests.conftest import token_client
from traces.models import Step

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = "Thought: done\nAction: final: done"
PLOT = (
    "import matplotlib.pyplot as plt\n"
    "plt.plot([1, 2, 3], [3, 1, 2])\n"
    "plt.show()\n"
    "open('/tmp/outputs/sales.csv', 'w').write('month,sales\\njan,3\\n')\n"
)


def call(code: str, timeout_s: float = 30) -> str:
    args = json.dumps({"code": code, "timeout_s": timeout_s})
    return f"Thought: run it\nAction: tool:execute_code\nargs: {args}"


def owned(run: AgentRun) -> list[str]:
    """The run's sandbox containers (labelled with its id)."""
    client = docker_client(timeout_s=10)
    try:
        listed = client.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={run.id}"})
    finally:
        client.close()
    return [entry["Id"] for entry in listed]


async def until(condition: Any, timeout_s: float = 30) -> None:
    async with asyncio.timeout(timeout_s):
        while True:
            if await sync_to_async(condition)():
                return
            await asyncio.sleep(0.1)


async def finished_run(user: Any, **create: Any) -> AgentRun:
    inputs = create.get("inputs", ())
    run = await run_create(user=user, message="analyse", tools=["execute_code"], **create)
    await asyncio.wait_for(run_start(run, inputs=inputs), 120)
    return await AgentRun.objects.aget(pk=run.id)


async def observations(run: AgentRun) -> list[dict[str, Any]]:
    """The structured results of the run's tool calls, in order (its ``step`` events)."""
    events = RunEvent.objects.filter(run_id=run.id, type="step").order_by("seq")
    return [event.payload["observation"] async for event in events]


def model_saw(scripted: Any, index: int) -> str:
    """The last message of the model's ``index``-th request (the observation it was sent)."""
    return str(scripted.requests[index]["messages"][-1]["content"])


async def test_variables_persist_across_the_calls_of_a_run_and_not_across_runs(
    scripted, sandbox_image, user
):
    scripted.script(
        [
            call("import statistics\nx = 41"),
            call("x += 1\nprint(x, statistics.mean([1, 3]))"),
            FINAL,
            call("print('x' in globals())"),
            FINAL,
        ]
    )

    first = await finished_run(user)
    second = await finished_run(user)

    assert first.status == second.status == RunStatus.COMPLETED
    assert [o["stdout"] for o in await observations(first)] == ["", "42 2\n"]
    assert [o["stdout"] for o in await observations(second)] == ["False\n"]
    assert await sync_to_async(owned)(first) == []
    assert await sync_to_async(owned)(second) == []


async def test_the_container_is_the_runs_while_it_runs_and_gone_when_it_ends(
    scripted, sandbox_image, user
):
    scripted.script([call("import time\ntime.sleep(3)"), FINAL])
    run = await run_create(user=user, message="wait", tools=["execute_code"])
    task = run_start(run)

    await until(lambda: owned(run))
    during = await sync_to_async(owned)(run)
    await asyncio.wait_for(task, 60)

    assert len(during) == 1
    assert await sync_to_async(owned)(run) == []


async def test_a_cancelled_run_removes_its_container(scripted, sandbox_image, user):
    scripted.script([call("x = 1"), call("import time\ntime.sleep(30)", timeout_s=60)])
    run = await run_create(user=user, message="sleep", tools=["execute_code"])
    task = run_start(run)
    trace_id = run.trace_id
    assert trace_id is not None
    await until(lambda: Step.objects.filter(trace_id=trace_id, step_type="result").exists())
    await until(lambda: owned(run))

    stop_local(run.id)
    await asyncio.wait_for(task, 20)

    stored = await AgentRun.objects.aget(pk=run.id)
    assert stored.status == RunStatus.CANCELLED
    assert await sync_to_async(owned)(run) == []


async def test_a_plot_and_a_csv_are_stored_and_the_model_reads_only_their_description(
    scripted, sandbox_image, user, other_user
):
    scripted.script([call(PLOT), FINAL])

    run = await finished_run(user)

    [observation] = await observations(run)
    records = {record["name"]: record for record in observation["artifacts"]}
    assert records["figure-1.png"]["media_type"] == "image/png"
    assert (records["figure-1.png"]["width"], records["figure-1.png"]["height"]) == (640, 480)
    assert records["sales.csv"]["media_type"] == "text/csv"
    seen = model_saw(scripted, 1)
    assert '"name": "figure-1.png"' in seen
    assert '"width": 640' in seen
    assert records["figure-1.png"]["id"] not in seen
    assert records["figure-1.png"]["sha256"] not in seen
    assert "PNG\\r\\n" not in seen
    assert run.trace_id is not None
    result = await Step.objects.aget(trace_id=run.trace_id, step_type="result")
    assert result.data["result"]["artifacts"] == observation["artifacts"]

    url = f"/api/traces/{run.trace_id}/artifacts/{records['figure-1.png']['id']}"
    owner = await sync_to_async(lambda: token_client(user).get(url))()
    foreign = await sync_to_async(lambda: token_client(other_user).get(url))()
    assert owner.status_code == HTTPStatus.OK
    assert owner.content.startswith(b"\x89PNG")
    assert foreign.status_code == HTTPStatus.NOT_FOUND


async def test_an_input_file_is_readable_by_the_code_and_named_to_the_model(
    scripted, sandbox_image, user
):
    inputs = input_files([("../sales.csv", b"month,sales\njan,3\nfeb,5\n")])
    scripted.script(
        [
            call(
                "import pandas\ndf = pandas.read_csv('/tmp/inputs/sales.csv')\n"
                "print(df['sales'].sum())"
            ),
            call("print(len(df))"),
            FINAL,
        ]
    )

    run = await finished_run(user, inputs=inputs)

    assert [o["stdout"] for o in await observations(run)] == ["8\n", "2\n"]
    task = model_saw(scripted, 0)
    assert task.startswith("analyse\n\nThe user attached these files")
    assert "- /tmp/inputs/sales.csv (text/csv, 24 bytes)" in task
    goal = await Step.objects.aget(pk=run.id)
    assert goal.data["inputs"] == [inputs[0].describe()]


async def test_a_crash_tells_the_model_the_state_was_lost_and_the_next_call_starts_afresh(
    scripted, sandbox_image, user
):
    scripted.script(
        [
            call("x = 1"),
            call("import os\nos._exit(3)"),
            call("print('x' in globals())"),
            call("print('x' in globals())"),
            FINAL,
        ]
    )

    run = await finished_run(user)

    _, crashed, fresh, settled = await observations(run)
    assert (crashed["exit_code"], crashed["state_lost"]) == (3, True)
    assert "variables, imports and files of earlier calls are gone" in crashed["state"]
    assert (fresh["stdout"], fresh["state_restarted"]) == ("False\n", True)
    assert "state_restarted" not in settled
    assert "state_lost" not in settled
    assert "The interpreter stopped during this call" in model_saw(scripted, 2)


async def test_a_timeout_holds_per_call_and_loses_the_state(scripted, sandbox_image, user):
    scripted.script(
        [call("x = 1"), call("while True:\n    pass", timeout_s=2), call("print(1)"), FINAL]
    )

    run = await finished_run(user)

    _, timed_out, after = await observations(run)
    assert (timed_out["timed_out"], timed_out["state_lost"]) == (True, True)
    assert timed_out["duration_ms"] < 5000
    assert after["stdout"] == "1\n"
    assert after["state_restarted"] is True


async def test_with_sandbox_state_call_each_call_starts_afresh(
    scripted, sandbox_image, user, settings
):
    settings.SANDBOX_STATE = "call"
    scripted.script([call("x = 1"), call("print('x' in globals())"), FINAL])

    run = await finished_run(user)

    assert [o["stdout"] for o in await observations(run)] == ["", "False\n"]
    assert await sync_to_async(owned)(run) == []


async def test_a_lost_run_has_its_container_removed_by_whoever_reaps_it(sandbox_image, user):
    run = await run_create(user=user, message="left behind", tools=["execute_code"])
    session = get_sandbox().session(owner=str(run.id))
    try:
        await sync_to_async(session.run, thread_sensitive=False)(code="x = 1", timeout_s=10)
        assert len(await sync_to_async(owned)(run)) == 1
        then = timezone.now() - timedelta(minutes=10)
        await AgentRun.objects.filter(pk=run.id).aupdate(owner="gone:1:x", heartbeat_at=then)

        assert await sync_to_async(reap_lost)() == [run.id]

        assert await sync_to_async(owned)(run) == []
    finally:
        await sync_to_async(session.close, thread_sensitive=False)()


async def test_the_run_goes_on_when_no_engine_can_remove_a_lost_runs_container(user, monkeypatch):
    from sandbox.exceptions import SandboxUnavailable

    def unavailable(owner: str) -> int:
        raise SandboxUnavailable("no engine")

    monkeypatch.setattr(get_sandbox(), "remove_owned", unavailable)
    run = await run_create(user=user, message=f"lost {uuid.uuid4()}")
    then = timezone.now() - timedelta(minutes=10)
    await AgentRun.objects.filter(pk=run.id).aupdate(owner="gone:1:x", heartbeat_at=then)

    assert await sync_to_async(reap_lost)() == [run.id]

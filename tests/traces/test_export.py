"""Exporting a trace as one JSON document: every step with its full data, streamed in chunks."""

from __future__ import annotations

import json
from http import HTTPStatus

import pytest
from django.contrib.auth.models import User
from django.test import AsyncClient

from tests.traces.factories import step
from traces import selectors
from traces.models import Trace
from traces.store import StepCreate, get_trace_store

pytestmark = pytest.mark.django_db(transaction=True)


async def export(client: AsyncClient, trace: Trace) -> tuple[dict, int]:
    response = await client.get(f"/traces/{trace.id}/export.json")
    assert response.status_code == HTTPStatus.OK
    assert response.streaming
    assert response["Content-Type"] == "application/json"
    assert response["Content-Disposition"] == f'attachment; filename="trace-{trace.id}.json"'
    chunks = [chunk async for chunk in response.streaming_content]  # type: ignore[attr-defined]
    return json.loads(b"".join(chunks)), len(chunks)


async def signed_in(user: User) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def test_a_trace_exports_every_step_with_its_data_in_chunks(
    user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "EXPORT_CHUNK", 7)
    trace = await make_trace_async(user)
    root = step("goal", data={"task": "<b>x</b>", "big": "z" * 50_000})
    children = [
        step("thought", parent=root, data={"i": i}, error="e" if i == 3 else "") for i in range(20)
    ]
    await add_async(trace, root, *children)

    body, chunks = await export(await signed_in(user), trace)

    assert body["trace"]["trace_id"] == str(trace.id)
    assert body["trace"]["total_steps"] == 21
    assert [s["step_id"] for s in body["steps"]] == [str(root.id)] + [str(c.id) for c in children]
    assert body["steps"][0]["data"]["big"] == "z" * 50_000
    assert body["steps"][4]["error"] == "e"
    assert body["steps"][5]["path"] == [body["steps"][0]["seq"]]
    # head, three full chunks of 7, the end
    assert chunks == 5


async def test_an_empty_trace_exports_no_steps(user: User) -> None:
    trace = await make_trace_async(user)

    body, _ = await export(await signed_in(user), trace)

    assert body["steps"] == []


async def test_someone_elses_trace_does_not_export(user: User, other_user: User) -> None:
    trace = await make_trace_async(other_user)

    response = await (await signed_in(user)).get(f"/traces/{trace.id}/export.json")

    assert response.status_code == HTTPStatus.NOT_FOUND


async def make_trace_async(user: User) -> Trace:
    return await get_trace_store().create_trace(user=user, task="export me")


async def add_async(trace: Trace, *steps: StepCreate) -> None:
    await get_trace_store().add_steps(trace.id, list(steps))

"""The runs API: follow a run over SSE, re-attach, cancel; staff run listings. (Runs are
started by ``POST /chat`` and ``POST /agent``, in ``chat.api``.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import asdict
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.http import HttpRequest, StreamingHttpResponse
from ninja import Field as NinjaField
from ninja import Query, Router, Schema

from agent.events import follow_run
from agent.langfuse import langfuse_link, run_get_for_langfuse
from agent.models import AgentRun
from agent.schemas import RunListOut, RunOut, RunWithStepsOut
from agent.selectors import RunOutcome, run_get, run_outcomes, run_steps, runs_newest
from agent.services import run_cancel, run_meta
from agent.sse import HEARTBEAT, frame, sse_response
from devassist.auth import api_user, require_staff
from devassist.storable import MAX_INT

runs_router = Router(tags=["agent"])
staff_router = Router(tags=["agent"])


class EventsQuery(Schema):
    after_seq: int = NinjaField(0, ge=0, le=MAX_INT)


class PageQuery(Schema):
    limit: int = NinjaField(20, ge=1, le=100)
    offset: int = NinjaField(0, ge=0, le=MAX_INT)


class LangfuseLinkOut(Schema):
    run_id: uuid.UUID
    available: bool
    url: str | None = None
    reason: Literal["trace_not_available", "langfuse_unavailable"] | None = None


def run_dict(run: AgentRun, outcome: RunOutcome) -> dict[str, Any]:
    """The run as ``RunOut``, with its answer and error as its trace records them."""
    return {
        "run_id": run.id,
        "trace_id": run.trace_id,
        "conversation_id": run.conversation_id,
        "mode": run.mode,
        "status": run.status,
        "input": run.input,
        "answer": outcome.answer,
        "error": outcome.error,
        "error_code": run.error_code,
        "tools": run.tools,
        "model": run.model,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "first_output_at": run.first_output_at,
        "finished_at": run.finished_at,
    }


async def run_out(run: AgentRun) -> dict[str, Any]:
    """``run_dict`` of one run (its outcome read in one query)."""
    outcomes = await sync_to_async(run_outcomes)([run])
    return run_dict(run, outcomes[run.id])


async def sse_frames(run_id: uuid.UUID, after_seq: int) -> AsyncIterator[bytes]:
    """The run's SSE frames. The stream holds no database connection while it waits for
    events: ``follow_run`` reads the log in the request's thread and gives the connection
    back after each read."""
    async for item in follow_run(run_id, after_seq=after_seq):
        yield HEARTBEAT if item is None else frame(*item)


async def new_run_frames(run: AgentRun) -> AsyncIterator[bytes]:
    """The SSE frames of a run just created by this request: its ``meta`` event (stored with
    the run by ``run_create``) goes out at once, without reading it back, then the rest as
    ``sse_frames`` gives them."""
    yield frame(1, run_meta(run))
    async for chunk in sse_frames(run.id, 1):
        yield chunk


@runs_router.get("/{run_id}", response=RunOut, url_name="get_run")
async def get_run(request: HttpRequest, run_id: uuid.UUID) -> dict[str, Any]:
    return await run_out(await run_get(user=api_user(request), run_id=run_id))


@runs_router.get("/{run_id}/events", url_name="run_events")
async def run_events(
    request: HttpRequest, run_id: uuid.UUID, query: Query[EventsQuery]
) -> StreamingHttpResponse:
    """Re-attach: the events after ``Last-Event-ID`` (or ``?after_seq=``) once, then live."""
    run = await run_get(user=api_user(request), run_id=run_id)
    after = query.after_seq
    last_event_id = request.headers.get("Last-Event-ID", "")
    if last_event_id.isascii() and last_event_id.isdigit():
        digits = last_event_id.lstrip("0") or "0"
        # Past 19 digits it is past every seq (and int() refuses 4,300 of them).
        after = MAX_INT if len(digits) > 19 else min(int(digits), MAX_INT)
    return sse_response(sse_frames(run.id, after))


@runs_router.post("/{run_id}/cancel", response=RunOut, url_name="cancel_run")
async def cancel_run(request: HttpRequest, run_id: uuid.UUID) -> dict[str, Any]:
    """Stop one of your runs; answers ``cancelled`` once it has stopped, ``cancelling`` while
    it is still stopping (on another worker, say)."""
    user = api_user(request)
    run = await run_cancel(user=user, run=await run_get(user=user, run_id=run_id))
    return {**await run_out(run), "status": run.status if run.is_finished else "cancelling"}


@runs_router.get(
    "/{run_id}/langfuse", response=LangfuseLinkOut, url_name="run_langfuse", exclude_none=True
)
async def run_langfuse(request: HttpRequest, run_id: uuid.UUID) -> dict[str, Any]:
    """The Langfuse URL of one of your runs (superusers only), or why there is none."""
    run = await run_get_for_langfuse(user=api_user(request), run_id=run_id)
    return asdict(await sync_to_async(langfuse_link, thread_sensitive=False)(run=run))


@staff_router.get("", response=RunListOut, url_name="agent_traces")
async def agent_traces(request: HttpRequest, page: Query[PageQuery]) -> dict[str, Any]:
    """Runs newest first, with their flat steps (staff only)."""
    require_staff(request)
    runs, more = await sync_to_async(runs_newest)(offset=page.offset, limit=page.limit)
    steps = await sync_to_async(run_steps)(runs)
    outcomes = await sync_to_async(run_outcomes)(runs)
    return {
        "runs": [{**run_dict(run, outcomes[run.id]), "steps": steps[run.id]} for run in runs],
        "limit": page.limit,
        "offset": page.offset,
        "next_offset": page.offset + page.limit if more else None,
    }


@staff_router.get("/{run_id}", response=RunWithStepsOut, url_name="agent_trace")
async def agent_trace(request: HttpRequest, run_id: uuid.UUID) -> dict[str, Any]:
    run = await run_get(user=require_staff(request), run_id=run_id)
    return {**await run_out(run), "steps": (await sync_to_async(run_steps)([run]))[run.id]}

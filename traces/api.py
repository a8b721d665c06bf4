"""Trace REST API: ingestion for any agent, and reads that stay fast on huge traces."""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Field as NinjaField
from ninja import Query, Router, Schema, Status
from ninja.errors import ValidationError

from devassist.auth import api_user
from devassist.exceptions import Forbidden
from devassist.responses import json_response
from devassist.storable import MAX_INT
from traces import selectors
from traces.access import can_write
from traces.artifacts import artifact_bytes, serving_headers
from traces.models import Trace
from traces.projections import step_dict, trace_dict
from traces.schemas import (
    EventsOut,
    NodeOut,
    StepFullOut,
    StepIn,
    StepPatch,
    StepsAddedOut,
    TraceCompleteIn,
    TraceIn,
    TraceListOut,
    TraceModeName,
    TraceOut,
    TraceStatusName,
    TreeOut,
    WaitingLogRecordsOut,
    WaitingStepsOut,
)
from traces.selectors import CHILD_WINDOW, MAX_DEPTH
from traces.store import StepCreate, get_trace_store

router = Router(tags=["traces"])

#: The tree endpoint answers at most this many steps; bigger traces page with the node endpoint.
TREE_MAX_STEPS = 50_000


class TraceListQuery(Schema):
    mode: TraceModeName | None = None
    status: TraceStatusName | None = None
    agent_type: str | None = NinjaField(None, max_length=100)
    q: str | None = NinjaField(None, max_length=500)
    limit: int = NinjaField(20, ge=1, le=100)
    cursor: str | None = NinjaField(None, max_length=200)


class TreeQuery(Schema):
    view: str = NinjaField("compact", pattern="^(compact|full)$")
    max_depth: int | None = NinjaField(None, ge=1, le=MAX_DEPTH)


class NodeQuery(Schema):
    expand: bool = NinjaField(False, description="Include every node's full data.")
    max_depth: int = NinjaField(1, ge=1, le=MAX_DEPTH)
    offset: int = NinjaField(0, ge=0, le=MAX_INT)
    limit: int = NinjaField(CHILD_WINDOW, ge=1, le=settings.TRACE_NODE_WINDOW_MAX)


class EventsQuery(Schema):
    after_seq: int = NinjaField(0, ge=0, le=MAX_INT)
    limit: int = NinjaField(1000, ge=1, le=settings.TRACE_EVENT_PAGE_MAX)


class WaitingQuery(Schema):
    offset: int = NinjaField(0, ge=0, le=MAX_INT)
    limit: int = NinjaField(100, ge=1, le=1000)


async def _visible_trace(request: HttpRequest, trace_id: uuid.UUID) -> Trace:
    return await sync_to_async(selectors.trace_get_for)(viewer=api_user(request), trace_id=trace_id)


async def _writable_trace(request: HttpRequest, trace_id: uuid.UUID) -> Trace:
    trace = await _visible_trace(request, trace_id)
    if not can_write(api_user(request), trace):
        raise Forbidden("Only the trace's owner can record into it.")
    return trace


def _parse_node_id(step_id: str) -> uuid.UUID | None:
    if step_id in {"root", "null"}:
        return None
    try:
        return uuid.UUID(step_id)
    except ValueError as exc:
        raise ValidationError(
            [
                {
                    "loc": ("path", "step_id"),
                    "msg": "must be a UUID, 'root' or 'null'",
                    "type": "uuid_parsing",
                }
            ]
        ) from exc


# --- ingestion ----------------------------------------------------------------------------------


@router.post("", response={201: TraceOut}, url_name="create_trace")
async def create_trace(request: HttpRequest, payload: TraceIn) -> Status[dict[str, Any]]:
    trace = await get_trace_store().create_trace(
        user=api_user(request),
        task=payload.task,
        mode=payload.mode,
        agent_type=payload.agent_type,
        metadata=payload.metadata,
    )
    return Status(201, trace_dict(trace))


@router.post("/{trace_id}/steps", response={201: StepsAddedOut}, url_name="add_steps")
async def add_steps(
    request: HttpRequest, trace_id: uuid.UUID, payload: list[StepIn] | StepIn
) -> Status[dict[str, Any]]:
    """Add one step or a list of up to 1,000, atomically. Client-chosen ids are idempotent."""
    items = payload if isinstance(payload, list) else [payload]
    await _writable_trace(request, trace_id)
    added = await get_trace_store().add_steps(
        trace_id, [StepCreate(**item.model_dump(exclude_none=True)) for item in items]
    )
    return Status(
        201,
        {
            "steps": [step_dict(s) for s in added.steps],
            "created": added.created,
            "existing": len(added.steps) - added.created,
        },
    )


@router.patch("/{trace_id}/steps/{step_id}", response=StepFullOut, url_name="update_step")
async def update_step(
    request: HttpRequest, trace_id: uuid.UUID, step_id: uuid.UUID, payload: StepPatch
) -> dict[str, Any]:
    await _writable_trace(request, trace_id)
    step = await get_trace_store().update_step(
        trace_id, step_id, payload.model_dump(exclude_unset=True)
    )
    return step_dict(step, full=True)


@router.post("/{trace_id}/complete", response=TraceOut, url_name="complete_trace")
async def complete_trace(
    request: HttpRequest, trace_id: uuid.UUID, payload: TraceCompleteIn
) -> dict[str, Any]:
    await _writable_trace(request, trace_id)
    trace = await get_trace_store().complete_trace(
        trace_id, status=payload.status, total_duration_ms=payload.total_duration_ms
    )
    return trace_dict(trace)


# --- reads --------------------------------------------------------------------------------------


@router.get("", response=TraceListOut, url_name="list_traces")
async def list_traces(request: HttpRequest, filters: Query[TraceListQuery]) -> dict[str, Any]:
    """Newest first. Users see their own traces, staff everyone's."""
    page = await sync_to_async(selectors.trace_list_for)(
        viewer=api_user(request),
        mode=filters.mode or "",
        status=filters.status or "",
        agent_type=filters.agent_type or "",
        q=filters.q or "",
        cursor=filters.cursor or "",
        limit=filters.limit,
    )
    return {"traces": [trace_dict(t) for t in page.traces], "next_cursor": page.next_cursor}


@router.get("/{trace_id}", response=TraceOut, url_name="get_trace")
async def get_trace(request: HttpRequest, trace_id: uuid.UUID) -> dict[str, Any]:
    return trace_dict(await _visible_trace(request, trace_id))


@router.get("/{trace_id}/tree", response=TreeOut, url_name="trace_tree")
async def trace_tree(
    request: HttpRequest, trace_id: uuid.UUID, query: Query[TreeQuery]
) -> HttpResponse:
    """The whole tree in two queries (one for a big finished trace read again: its compact
    tree is kept, ``selectors.trace_tree_json``). ``compact`` (default) leaves out ``data``
    (see ``data_preview``); for traces past 50,000 steps use ``max_depth`` or the node
    endpoint."""
    trace = await _visible_trace(request, trace_id)
    roots = await sync_to_async(selectors.trace_tree_json)(
        trace=trace, max_depth=query.max_depth, full=query.view == "full", max_steps=TREE_MAX_STEPS
    )
    return json_response({"trace": trace_dict(trace), "root_steps": orjson.Fragment(roots)})


@router.get("/{trace_id}/node/{step_id}", response=NodeOut, url_name="trace_node")
async def trace_node(
    request: HttpRequest, trace_id: uuid.UUID, step_id: str, query: Query[NodeQuery]
) -> HttpResponse:
    """A step (``root`` or ``null`` for the top level) with a window of its children, nested
    ``max_depth`` levels; one query per level."""
    node_id = _parse_node_id(step_id)
    window = await sync_to_async(selectors.node_window)(
        trace_id=trace_id,
        step_id=node_id,
        viewer=api_user(request),
        max_depth=query.max_depth,
        offset=query.offset,
        limit=query.limit,
        full=query.expand,
    )
    return json_response(
        {
            "step": window.step,
            "children": window.children,
            "total_children": window.total_children,
            "next_offset": window.next_offset,
        }
    )


@router.get("/{trace_id}/steps/{step_id}", response=StepFullOut, url_name="get_step")
async def get_step(request: HttpRequest, trace_id: uuid.UUID, step_id: uuid.UUID) -> dict[str, Any]:
    await _visible_trace(request, trace_id)
    step = await sync_to_async(selectors.step_get)(trace_id=trace_id, step_id=step_id)
    return step_dict(step, full=True)


@router.get(
    "/{trace_id}/artifacts/{artifact_id}",
    response={200: None},
    url_name="trace_artifact",
    openapi_extra={"responses": {200: {"description": "The file's bytes."}}},
)
async def trace_artifact(
    request: HttpRequest, trace_id: uuid.UUID, artifact_id: uuid.UUID, download: bool = False
) -> HttpResponse:
    """A file a program wrote during the trace (a plot, a CSV...), for the trace's owner and
    staff; 404 for anyone else, as for a missing one. Raster images and plain text are shown
    inline, everything else (SVG, HTML, CSV, PDF...) is a download, as is anything with
    ``?download=true``; never sniffed, never allowed to run script
    (``traces.artifacts.serving_headers``)."""
    record = await sync_to_async(selectors.artifact_get)(
        viewer=api_user(request), trace_id=trace_id, artifact_id=artifact_id
    )
    data = await sync_to_async(artifact_bytes)(trace_id, artifact_id)
    return HttpResponse(data, headers=serving_headers(record, download=download))


@router.get("/{trace_id}/events", response=EventsOut, url_name="trace_events")
async def trace_events(
    request: HttpRequest, trace_id: uuid.UUID, query: Query[EventsQuery]
) -> dict[str, Any]:
    """The event log after ``after_seq``, oldest first, as the websocket sends it."""
    trace = await _visible_trace(request, trace_id)
    return await sync_to_async(selectors.trace_event_page)(
        trace=trace, after_seq=query.after_seq, limit=query.limit
    )


@router.get(
    "/{trace_id}/waiting-log-records",
    response=WaitingLogRecordsOut,
    url_name="trace_waiting_log_records",
)
async def trace_waiting_log_records(
    request: HttpRequest, trace_id: uuid.UUID, query: Query[WaitingQuery]
) -> dict[str, Any]:
    """The log records of an OTLP trace's spans that have not arrived, by span, oldest first:
    they join each span's step when it does (one whose exporter dropped it never comes).
    Empty for any other trace."""
    trace = await _visible_trace(request, trace_id)
    waiting = await sync_to_async(selectors.waiting_log_records)(
        trace, offset=query.offset, limit=query.limit
    )
    return {
        "spans": [span.as_dict() for span in waiting.items],
        "total_spans": waiting.total,
        "next_offset": waiting.next_offset,
    }


@router.get("/{trace_id}/waiting-steps", response=WaitingStepsOut, url_name="trace_waiting_steps")
async def trace_waiting_steps(
    request: HttpRequest, trace_id: uuid.UUID, query: Query[WaitingQuery]
) -> HttpResponse:
    """The steps of an OTLP trace that wait at the top level for a parent span that has not
    arrived, in the order they came, each with the id of the span it waits for: it moves
    under that span's step when the span arrives (one whose exporter dropped it never does).
    Empty for any other trace."""
    trace = await _visible_trace(request, trace_id)
    waiting = await sync_to_async(selectors.waiting_steps)(
        trace, offset=query.offset, limit=query.limit
    )
    return json_response(
        {
            "steps": waiting.items,
            "total_steps": waiting.total,
            "next_offset": waiting.next_offset,
        }
    )

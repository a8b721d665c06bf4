"""The trace browser: the list at ``/traces/`` and one trace at ``/traces/<id>/``, with the
fragments its HTMX and its small scripts load. Views parse (``traces.filters``), call a
selector, render; someone else's trace answers 404 exactly like a missing one."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.http import (
    Http404,
    HttpResponse,
    HttpResponseBase,
    JsonResponse,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode
from django.utils.translation import gettext as _
from django.views.decorators.http import require_GET
from django_htmx.http import push_url, replace_url

from devassist.exceptions import NotFound
from devassist.htmx import HtmxHttpRequest
from traces import selectors
from traces.artifact_cards import artifact_cards
from traces.artifacts import artifacts_of
from traces.filters import (
    MAX_SHOWN_ROWS,
    NewTracesForm,
    TraceFilters,
    TreeQueryForm,
    parse_step_id,
    trace_filters,
)

R = TypeVar("R", bound=HttpResponseBase)

#: Rows one ``rows/`` request answers at most; the page asks in parts of this many.
ROWS_PER_REQUEST = 200
#: htmx's answer that ends an element's polling.
STOP_POLLING = 286


def _not_found_is_404(view: Callable[..., R]) -> Callable[..., R]:
    """The view with the selectors' ``NotFound`` errors (a missing or foreign trace, a missing
    step or value) answered as a 404 page."""

    @functools.wraps(view)
    def wrapped(request: HtmxHttpRequest, *args: Any, **kwargs: Any) -> R:
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.message) from exc

    return wrapped


@require_GET
def trace_list(request: HtmxHttpRequest) -> HttpResponse:
    filters = trace_filters(request.GET, staff=request.user.is_staff)
    page = selectors.trace_list_for(viewer=request.user, limit=filters.limit, **filters.criteria())
    whole_page = request.htmx.target != "trace-list"
    template = "traces/list.html" if whole_page else "traces/list.html#list"
    quiet = selectors.otlp_quiet(page.traces)
    rows = [(trace, quiet.get(trace.id)) for trace in page.traces]
    context: dict[str, Any] = {
        "page": page,
        "rows": rows,
        "filters": filters,
        "first_page_url": _first_page_url(filters),
        "older_page_url": _list_url(filters.query(cursor=page.next_cursor or "")),
    }
    if whole_page:  # the filter form, outside the list
        context["agent_types"] = selectors.recent_agent_types(request.user)
    if not filters.cursor:  # the first page asks for traces newer than its rows
        shown = [trace.id for trace in page.traces]
        context["new_traces"] = _new_traces(filters, shown, page.next_cursor or "", count=0)
    response = render(request, template, context)
    if request.htmx:  # the address bar shows the filters that are set, not the form's blanks
        url = _list_url(filters.query(cursor=filters.cursor))
        # The same list again ("Show 3 new traces") is no new step back.
        same = url == request.htmx.current_url_abs_path
        (replace_url if same else push_url)(response, url)
    return response


def _list_url(query: dict[str, str]) -> str:
    return f"{reverse('traces:list')}?{urlencode(query)}" if query else reverse("traces:list")


def _first_page_url(filters: TraceFilters) -> str:
    """The list's first page with ``filters``."""
    return _list_url(filters.query())


@require_GET
def trace_list_new(request: HtmxHttpRequest) -> HttpResponse:
    """The first page's notice of new traces (its ``#new-traces``, which polls this): none
    (204) while the count is the one it shows."""
    query = NewTracesForm(request.GET).query()
    if query is None:  # not a question the list asked
        return HttpResponse(status=STOP_POLLING)
    filters = trace_filters(request.GET, staff=request.user.is_staff)
    criteria = filters.criteria()
    criteria.pop("cursor")  # the first page's
    count = selectors.new_trace_count(
        viewer=request.user,
        shown=query.shown,
        last=query.last,
        cap=selectors.NEW_TRACES_CAP,
        **criteria,
    )
    if count == query.seen:
        return HttpResponse(status=204)
    new_traces = _new_traces(filters, query.shown, query.last, count=count)
    new_traces["arrived"] = query.seen == 0  # said once (the count is the link's)
    return render(request, "traces/list.html#new_traces", {"new_traces": new_traces})


def _new_traces(
    filters: TraceFilters, shown: Sequence[uuid.UUID], last: str, *, count: int
) -> dict[str, Any]:
    """The notice's context: the count, where it asks again (while under the cap) and the
    list it shows: the first page with room for the rows it shows and the new ones (up to
    ``MAX_SHOWN_ROWS``; a page of 25 left 35 of "Show 60 new traces" among the older pages)."""
    query = filters.query()
    poll = {**query, "shown": ",".join(map(str, shown)), "seen": str(count)}
    if last:
        poll["last"] = last
    rows = min(len(shown) + count, MAX_SHOWN_ROWS)
    return {
        "count": count,
        "capped": count >= selectors.NEW_TRACES_CAP,
        "poll_url": f"{reverse('traces:new')}?{urlencode(poll)}",
        "list_url": (
            _list_url({**query, "limit": str(rows)})
            if rows > selectors.TRACE_PAGE_SIZE
            else _first_page_url(filters)
        ),
    }


@require_GET
@_not_found_is_404
def trace_list_row(request: HtmxHttpRequest, trace_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    context = {"trace": trace, "quiet_since": selectors.otlp_quiet_since(trace)}
    return render(request, "traces/_list_row.html", context)


@require_GET
@_not_found_is_404
def trace_page(request: HtmxHttpRequest, trace_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    if request.htmx.target == "trace-header":  # its totals, status and task, once it ends
        return render(request, "traces/trace.html#header", {"trace": trace})
    if request.htmx.target == "waiting-logs":  # once a span they waited for arrives
        waiting = selectors.waiting_log_records(trace)
        return render(request, "traces/trace.html#waiting", {"trace": trace, "waiting": waiting})
    if request.htmx.target == "waiting-steps":  # once a step waits, moves or its trace ends
        context = {"trace": trace, "waiting_steps": selectors.waiting_steps(trace)}
        return render(request, "traces/trace.html#waiting_steps", context)
    step_id = TreeQueryForm(request.GET).step_id()
    tree = selectors.tree_view(trace=trace, step_id=step_id)
    if request.GET.get("step") and step_id is None:
        tree.notices.append(_("Ignored step: not a step id; showing the trace from the top."))
    if request.htmx.target == "tree":
        return render(request, "traces/trace.html#tree", {"trace": trace, "tree": tree})
    context = {
        "trace": trace,
        "tree": tree,
        "quiet_since": selectors.otlp_quiet_since(trace),
        "waiting": selectors.waiting_log_records(trace),
        "waiting_steps": selectors.waiting_steps(trace),
        "rows_per_request": ROWS_PER_REQUEST,
    }
    return render(request, "traces/trace.html", context)


@require_GET
@_not_found_is_404
def trace_children(request: HtmxHttpRequest, trace_id: uuid.UUID, node: str) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    parent_id = None if node == "root" else parse_step_id(node)
    if node != "root" and parent_id is None:
        raise Http404("No such step.")
    query = TreeQueryForm(request.GET)
    window = selectors.child_page(
        trace=trace, parent_id=parent_id, offset=query.number("offset"), opened=query.opened()
    )
    context = {"trace": trace, "window": window, "node": node, "direction": request.GET.get("dir")}
    return render(request, "traces/_window.html", context)


@require_GET
@_not_found_is_404
def trace_rows(request: HtmxHttpRequest, trace_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    ids = [
        i for i in map(parse_step_id, request.GET.get("ids", "").split(",")[:ROWS_PER_REQUEST]) if i
    ]
    nodes = selectors.steps_by_id(trace=trace, ids=ids) if ids else []
    return render(request, "traces/_rows.html", {"trace": trace, "nodes": nodes})


@require_GET
@_not_found_is_404
def step_detail(request: HtmxHttpRequest, trace_id: uuid.UUID, step_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    step, values = selectors.step_detail(trace=trace, step_id=step_id)
    artifacts = artifact_cards(trace.id, artifacts_of(step["data"]))
    context = {"trace": trace, "step": step, "values": values, "artifacts": artifacts}
    return render(request, "traces/_detail.html", context)


@require_GET
@_not_found_is_404
def step_data(request: HtmxHttpRequest, trace_id: uuid.UUID, step_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    key = request.GET.get("key")
    body = selectors.step_data(trace=trace, step_id=step_id, key=key)
    suffix = "".join(c for c in key or "" if c.isascii() and (c.isalnum() or c in "-_."))[:60]
    name = f"step-{step_id}{'-' + suffix if suffix else ''}.json"
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@require_GET
@_not_found_is_404
def trace_search(request: HtmxHttpRequest, trace_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    q = request.GET.get("q", "").strip()[:200]
    results = selectors.search_steps(trace=trace, q=q)
    context = {"trace": trace, "q": q, "results": results, "limit": selectors.SEARCH_LIMIT}
    return render(request, "traces/_search.html", context)


@require_GET
@_not_found_is_404
def trace_next(request: HtmxHttpRequest, trace_id: uuid.UUID) -> JsonResponse:
    """``{"step_id": ...}`` of the next error (``kind=error``) or slow step (``kind=slow``)
    after ``after`` (a seq), wrapping round; ``step_id`` is null when there is none."""
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    kind = "slow" if request.GET.get("kind") == "slow" else "error"
    after = TreeQueryForm(request.GET).number("after")
    return JsonResponse({"step_id": selectors.next_step(trace=trace, after_seq=after, kind=kind)})


@require_GET
@_not_found_is_404
def trace_timeline(request: HtmxHttpRequest, trace_id: uuid.UUID) -> HttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    compress = request.GET.get("compress") == "1"
    timeline = selectors.timeline(trace=trace, compress=compress)
    context = {"trace": trace, "timeline": timeline, "compress": compress}
    return render(request, "traces/_timeline.html", context)


@require_GET
@_not_found_is_404
def trace_export(request: HtmxHttpRequest, trace_id: uuid.UUID) -> StreamingHttpResponse:
    trace = selectors.trace_get_for(viewer=request.user, trace_id=trace_id)
    response = StreamingHttpResponse(
        selectors.export_chunks(trace), content_type="application/json"
    )
    response["Content-Disposition"] = f'attachment; filename="trace-{trace.id}.json"'
    return response

"""The admin: traces, steps, trace events and the OTLP log records that wait for their spans,
read-only. A trace's change page shows its step
tree (``step_tree``): collapsible, loaded a window at a time (``step_window``), each row with
its outcome (``traces.outcomes``) and a link into the trace browser."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from devassist.admin_utils import admin_link, pretty_json
from devassist.exceptions import NotFound
from traces.models import PendingLogEvents, Step, Trace, TraceEvent
from traces.selectors import step_tree_window

#: Children per window of the admin's step tree.
STEP_TREE_WINDOW = 25
#: Levels the change page opens (deeper ones load on demand).
STEP_TREE_DEPTH = 3


def trace_page_link(trace_id: object, label: str = "open") -> str:
    """A link to the trace browser's page of a trace (``—`` without one)."""
    if trace_id is None:
        return "—"
    return format_html('<a href="{}">{}</a>', reverse("traces:detail", args=[trace_id]), label)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Traces are written only by the trace store (runs and messages by their services); the
    admin browses them."""

    #: The id fields an id pasted into the search box is looked up in (by their indexes).
    uuid_search_fields: Sequence[str] = ()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """An id is looked up by the id fields' indexes: Django's own ``=id`` search compares
        the ids' text (``UPPER(id::text)``), which reads every row (a step's id among 1.5
        million steps: 3 s)."""
        try:
            value = uuid.UUID(search_term.strip())
        except ValueError:
            value = None
        if value is None or not self.uuid_search_fields:
            return super().get_search_results(request, queryset, search_term)
        matches = Q()
        for name in self.uuid_search_fields:
            matches |= Q(**{name: value})
        return queryset.filter(matches), False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Trace)
class TraceAdmin(ReadOnlyAdmin):
    list_display = [
        "short_id",
        "task_short",
        "mode",
        "agent_type",
        "status",
        "user",
        "total_steps",
        "error_count",
        "total_tokens",
        "total_cost",
        "total_duration_ms",
        "created_at",
        "browse",
    ]
    list_filter = ["status", "mode", "agent_type", "created_at"]
    search_fields = ["=id", "task", "user__username"]
    uuid_search_fields = ["id"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    exclude = ["metadata"]
    readonly_fields = ["browse", "step_tree", "metadata_pretty", "steps_link", "api_links"]

    class Media:
        css = {"all": ["traces/admin_tree.css"]}
        js = ["traces/admin_tree.js"]

    def get_deleted_objects(
        self, objs: Sequence[Trace] | QuerySet[Trace], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """What deleting ``objs`` deletes, as Django's admin works it out, but with the
        traces' steps for whoever may delete steps: steps are deleted only with their trace
        (``StepAdmin``)."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        step_perm = f"{Step._meta.app_label}.{get_permission_codename('delete', Step._meta)}"
        if request.user.has_perm(step_perm):
            perms_needed.discard(Step._meta.verbose_name)
        return deleted, counts, perms_needed, protected

    def get_urls(self) -> list[URLPattern]:
        window = path(
            "<uuid:trace_id>/tree/<str:parent>/",
            self.admin_site.admin_view(self.step_window),
            name="traces_trace_step_window",
        )
        return [window, *super().get_urls()]

    def step_window(self, request: HttpRequest, trace_id: uuid.UUID, parent: str) -> HttpResponse:
        """A window of a step's children (``root``: the top level) at ``?offset=``, as rows
        of the step tree (two or three queries besides the session's)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        try:
            parent_id = None if parent == "root" else uuid.UUID(parent)
            offset = max(0, int(request.GET.get("offset", 0)))
            window = step_tree_window(
                trace_id=trace_id, parent_id=parent_id, offset=offset, limit=STEP_TREE_WINDOW
            )
        except (ValueError, NotFound) as exc:
            raise Http404(str(exc)) from exc
        return render(
            request,
            "traces/admin/_window.html",
            {"window": window, "trace_id": trace_id, "parent_ref": parent},
        )

    @admin.display(description="step tree")
    def step_tree(self, obj: Trace) -> str:
        window = step_tree_window(
            trace_id=obj.id, parent_id=None, limit=STEP_TREE_WINDOW, depth=STEP_TREE_DEPTH
        )
        return render_to_string(
            "traces/admin/_tree.html", {"window": window, "trace_id": obj.id, "parent_ref": "root"}
        )

    @admin.display(description="trace page")
    def browse(self, obj: Trace) -> str:
        return trace_page_link(obj.id)

    @admin.display(description="id")
    def short_id(self, obj: Trace) -> str:
        return str(obj.id)[:8]

    @admin.display(description="task")
    def task_short(self, obj: Trace) -> str:
        return obj.task[:80]

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Trace) -> str:
        return pretty_json(obj.metadata)

    @admin.display(description="steps")
    def steps_link(self, obj: Trace) -> str:
        return format_html(
            '<a href="../../step/?trace__id__exact={}">{} steps</a>', obj.id, obj.total_steps
        )

    @admin.display(description="API")
    def api_links(self, obj: Trace) -> str:
        links = format_html(
            '<a href="/api/traces/{0}">trace</a> · <a href="/api/traces/{0}/tree">tree</a> · '
            '<a href="/api/traces/{0}/events">events</a>',
            obj.id,
        )
        if not obj.is_otlp:
            return links
        return links + format_html(
            ' · <a href="/api/traces/{0}/waiting-log-records">waiting log records</a>'
            ' (<a href="../../pendinglogevents/?trace__id__exact={0}">admin</a>)',
            obj.id,
        )


@admin.register(Step)
class StepAdmin(ReadOnlyAdmin):
    list_display = [
        "seq",
        "step_type",
        "name",
        "status",
        "trace_link",
        "parent_link",
        "depth",
        "children_count",
        "subtree_error_count",
        "tokens",
        "duration_ms",
        "started_at",
        "browse",
    ]
    list_filter = ["step_type", "status"]
    search_fields = ["=id", "=trace__id", "name", "description"]
    uuid_search_fields = ["id", "trace_id"]
    list_select_related = ["trace", "parent"]
    show_full_result_count = False
    exclude = ["data", "path", "tool_facts"]
    readonly_fields = [
        "browse",
        "trace_link",
        "parent_link",
        "children_link",
        "data_pretty",
        "path",
    ]

    @admin.display(description="trace page")
    def browse(self, obj: Step) -> str:
        return format_html(
            '<a href="{}?step={}">open</a>', reverse("traces:detail", args=[obj.trace_id]), obj.id
        )

    @admin.display(description="trace")
    def trace_link(self, obj: Step) -> str:
        return admin_link(obj.trace, str(obj.trace_id)[:8])

    @admin.display(description="parent")
    def parent_link(self, obj: Step) -> str:
        return admin_link(obj.parent)

    @admin.display(description="children")
    def children_link(self, obj: Step) -> str:
        return format_html(
            '<a href="../../?parent__id__exact={}">{} children</a>', obj.id, obj.children_count
        )

    @admin.display(description="data")
    def data_pretty(self, obj: Step) -> str:
        return pretty_json(obj.data)

    # A step goes with its trace (``TraceAdmin.get_deleted_objects``), never alone: deleted
    # by hand it would leave the rollups of the steps above it and its trace's totals wrong,
    # and its trace's ``last_seq`` where it was, so every worker's kept tree of the trace
    # (``traces.selectors.trace_tree_json``) would still show it.
    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(TraceEvent)
class TraceEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "event", "trace_link", "created_at"]
    list_filter = ["event"]
    search_fields = ["=trace__id"]
    uuid_search_fields = ["trace_id"]
    list_select_related = ["trace"]
    show_full_result_count = False
    exclude = ["payload"]
    readonly_fields = ["trace_link", "payload_pretty"]

    @admin.display(description="trace")
    def trace_link(self, obj: TraceEvent) -> str:
        return admin_link(obj.trace, str(obj.trace_id)[:8])

    @admin.display(description="payload")
    def payload_pretty(self, obj: TraceEvent) -> str:
        return pretty_json(obj.payload)


@admin.register(PendingLogEvents)
class PendingLogEventsAdmin(ReadOnlyAdmin):
    """Log records of OTLP spans that have not arrived (one row per span and request): they
    join the span's step when it does (docs/opentelemetry.md)."""

    list_display = ["span_id", "step_id", "records", "trace_link", "received_at"]
    search_fields = ["=trace__id", "=span_id"]
    uuid_search_fields = ["trace_id", "step_id"]
    list_select_related = ["trace"]
    show_full_result_count = False
    exclude = ["events"]
    readonly_fields = ["trace_link", "events_pretty"]

    @admin.display(description="records")
    def records(self, obj: PendingLogEvents) -> int:
        return len(obj.events) if isinstance(obj.events, list) else 0

    @admin.display(description="trace")
    def trace_link(self, obj: PendingLogEvents) -> str:
        return admin_link(obj.trace, str(obj.trace_id)[:8])

    @admin.display(description="events")
    def events_pretty(self, obj: PendingLogEvents) -> str:
        return pretty_json(obj.events)

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from devassist.admin_utils import admin_link, pretty_json
from traces.models import Step, Trace, TraceEvent


def trace_page_link(trace_id: object, label: str = "open") -> str:
    """A link to the trace browser's page of a trace (``—`` without one)."""
    if trace_id is None:
        return "—"
    return format_html('<a href="{}">{}</a>', reverse("traces:detail", args=[trace_id]), label)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Traces are written only by the trace store (runs and messages by their services); the
    admin browses them."""

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
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    exclude = ["metadata"]
    readonly_fields = ["browse", "metadata_pretty", "steps_link", "api_links"]

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
        return format_html(
            '<a href="/api/traces/{0}">trace</a> · <a href="/api/traces/{0}/tree">tree</a> · '
            '<a href="/api/traces/{0}/events">events</a>',
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
    list_select_related = ["trace", "parent"]
    show_full_result_count = False
    exclude = ["data", "path"]
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


@admin.register(TraceEvent)
class TraceEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "event", "trace_link", "created_at"]
    list_filter = ["event"]
    search_fields = ["=trace__id"]
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

"""Agent runs and their event logs in the admin: read-only, linked to their traces (a run's
answer and error are shown from its trace's steps)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from agent.models import AgentRun, RunEvent
from agent.selectors import run_outcomes
from devassist.admin_utils import admin_link, pretty_json
from traces.admin import ReadOnlyAdmin, trace_page_link


@admin.register(AgentRun)
class AgentRunAdmin(ReadOnlyAdmin):
    list_display = [
        "short_id",
        "input_short",
        "user",
        "mode",
        "status",
        "error_code",
        "model",
        "duration_ms",
        "created_at",
        "trace_page",
        "conversation_link",
    ]
    list_filter = ["status", "mode", "error_code", "created_at"]
    search_fields = ["=id", "=trace__id", "=request_id", "input", "user__username"]
    list_select_related = ["user", "conversation"]
    date_hierarchy = "created_at"
    show_full_result_count = False
    exclude = ["tools"]
    readonly_fields = [
        "answer",
        "error",
        "trace_page",
        "trace_admin",
        "conversation_link",
        "events_link",
        "messages_link",
        "tools_pretty",
    ]

    @admin.display(description="id")
    def short_id(self, obj: AgentRun) -> str:
        return str(obj.id)[:8]

    @admin.display(description="input")
    def input_short(self, obj: AgentRun) -> str:
        return obj.input[:80]

    @admin.display(description="answer")
    def answer(self, obj: AgentRun) -> str:
        """The ``response`` step's answer (a change page reads it; the list does not)."""
        return run_outcomes([obj])[obj.id].answer

    @admin.display(description="error")
    def error(self, obj: AgentRun) -> str:
        """The run's error as its goal step records it (``agent.selectors.run_error``)."""
        return run_outcomes([obj], answers=False)[obj.id].error

    @admin.display(description="duration ms")
    def duration_ms(self, obj: AgentRun) -> int | None:
        if obj.started_at and obj.finished_at:
            return int((obj.finished_at - obj.started_at).total_seconds() * 1000)
        return None

    @admin.display(description="trace")
    def trace_page(self, obj: AgentRun) -> str:
        return trace_page_link(obj.trace_id)

    @admin.display(description="trace in the admin")
    def trace_admin(self, obj: AgentRun) -> str:
        if obj.trace_id is None:
            return "—"
        url = reverse("admin:traces_trace_change", args=[obj.trace_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.trace_id)[:8])

    @admin.display(description="conversation")
    def conversation_link(self, obj: AgentRun) -> str:
        return admin_link(obj.conversation)

    @admin.display(description="events")
    def events_link(self, obj: AgentRun) -> str:
        url = reverse("admin:agent_runevent_changelist")
        return format_html('<a href="{}?run__id__exact={}">events</a>', url, obj.id)

    @admin.display(description="messages")
    def messages_link(self, obj: AgentRun) -> str:
        url = reverse("admin:chat_message_changelist")
        return format_html('<a href="{}?run__id__exact={}">messages</a>', url, obj.id)

    @admin.display(description="tools")
    def tools_pretty(self, obj: AgentRun) -> str:
        return pretty_json(obj.tools)


@admin.register(RunEvent)
class RunEventAdmin(ReadOnlyAdmin):
    list_display = ["seq", "type", "run_link", "created_at"]
    list_filter = ["type"]
    search_fields = ["=run__id"]
    list_select_related = ["run"]
    show_full_result_count = False
    exclude = ["payload"]
    readonly_fields = ["run_link", "payload_pretty"]

    @admin.display(description="run")
    def run_link(self, obj: RunEvent) -> str:
        return admin_link(obj.run, str(obj.run_id)[:8])

    @admin.display(description="payload")
    def payload_pretty(self, obj: RunEvent) -> str:
        return pretty_json(obj.payload)

"""Conversations and messages in the admin: read-only, messages listed on their own page
(a conversation can hold thousands, so never as an inline)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from chat.models import Conversation, Message
from devassist.admin_utils import admin_link, pretty_json
from traces.admin import ReadOnlyAdmin, trace_page_link


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ["title_or_id", "owner", "last_sequence", "created_at", "updated_at", "messages"]
    list_filter = ["updated_at"]
    search_fields = ["=id", "title", "owner__username"]
    list_select_related = ["owner"]
    date_hierarchy = "updated_at"
    show_full_result_count = False
    readonly_fields = ["messages", "runs"]

    @admin.display(description="conversation")
    def title_or_id(self, obj: Conversation) -> str:
        return obj.title[:80] or str(obj.id)[:8]

    @admin.display(description="messages")
    def messages(self, obj: Conversation) -> str:
        url = reverse("admin:chat_message_changelist")
        return format_html(
            '<a href="{}?conversation__id__exact={}">{} messages</a>',
            url,
            obj.id,
            obj.last_sequence,
        )

    @admin.display(description="runs")
    def runs(self, obj: Conversation) -> str:
        url = reverse("admin:agent_agentrun_changelist")
        return format_html('<a href="{}?conversation__id__exact={}">runs</a>', url, obj.id)


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    list_display = [
        "sequence",
        "role",
        "kind",
        "content_short",
        "conversation_link",
        "run_link",
        "trace_page",
        "created_at",
    ]
    list_filter = ["role", "kind", "created_at"]
    search_fields = ["=conversation__id", "=run__id", "=request_id", "content"]
    list_select_related = ["conversation", "run"]
    show_full_result_count = False
    exclude = ["metadata"]
    readonly_fields = ["conversation_link", "run_link", "trace_page", "metadata_pretty"]

    @admin.display(description="content")
    def content_short(self, obj: Message) -> str:
        return obj.content[:100]

    @admin.display(description="conversation")
    def conversation_link(self, obj: Message) -> str:
        return admin_link(obj.conversation, obj.conversation.title[:40] or None)

    @admin.display(description="run")
    def run_link(self, obj: Message) -> str:
        return admin_link(obj.run, str(obj.run_id)[:8] if obj.run_id else None)

    @admin.display(description="trace")
    def trace_page(self, obj: Message) -> str:
        return trace_page_link(obj.run.trace_id if obj.run else None)

    @admin.display(description="metadata")
    def metadata_pretty(self, obj: Message) -> str:
        return pretty_json(obj.metadata)

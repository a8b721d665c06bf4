from __future__ import annotations

from django.urls import path

from chat import views

app_name = "chat"

urlpatterns = [
    path("c/<uuid:conversation_id>/", views.chat_page, name="conversation"),
    path("ui/chat/conversations/", views.conversation_list, name="conversations"),
    path(
        "ui/chat/conversations/<uuid:conversation_id>/rename",
        views.conversation_rename_view,
        name="rename",
    ),
    path(
        "ui/chat/conversations/<uuid:conversation_id>/rename-dialog",
        views.conversation_rename_dialog,
        name="rename_dialog",
    ),
    path(
        "ui/chat/conversations/<uuid:conversation_id>/restore",
        views.conversation_restore_view,
        name="restore",
    ),
    path(
        "ui/chat/conversations/<uuid:conversation_id>/branch",
        views.branch_view,
        name="branch",
    ),
    path(
        "ui/chat/messages/<uuid:message_id>/regenerate",
        views.regenerate_view,
        name="regenerate",
    ),
    path("ui/chat/messages/<uuid:message_id>/edit", views.edit_view, name="edit"),
    path("ui/chat/messages/<uuid:message_id>/feedback", views.feedback_view, name="feedback"),
    path(
        "ui/chat/conversations/<uuid:conversation_id>/delete",
        views.conversation_delete_view,
        name="delete",
    ),
    path("ui/chat/messages", views.send_message, name="send"),
    path("ui/chat/runs/<uuid:run_id>/stream", views.run_stream, name="run_stream"),
    path("ui/chat/runs/<uuid:run_id>/answer", views.run_answer, name="answer"),
    path("ui/chat/debug-mode", views.debug_mode_switch, name="debug_mode"),
    path(
        "ui/chat/conversations/<uuid:conversation_id>/debug",
        views.debug_panel,
        name="debug_panel",
    ),
]

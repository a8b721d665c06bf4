"""The pages of ingested documents (under ``/docs/``)."""

from __future__ import annotations

from django.urls import path

from agent.knowledge import views

app_name = "knowledge"

urlpatterns = [
    path("<str:collection>/<path:source>", views.document_page, name="document"),
]

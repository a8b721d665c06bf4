from __future__ import annotations

from django.urls import path

from traces.consumers import TraceWatchConsumer

websocket_urlpatterns = [
    path("api/traces/<str:trace_id>/watch", TraceWatchConsumer.as_asgi(), name="trace_watch"),
]

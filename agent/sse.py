"""Server-sent events framing: ``id: <seq>`` + ``data: <json>``; JSON escapes every newline, so
untrusted text inside an event can never break the framing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from django.http import StreamingHttpResponse

from devassist.responses import json_bytes

HEARTBEAT = b": ping\n\n"


def frame(seq: int, event: dict[str, Any]) -> bytes:
    # json_bytes: an event row stored before values were made storable still encodes.
    return b"id: %d\ndata: %s\n\n" % (seq, json_bytes(event))


def sse_response(frames: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response

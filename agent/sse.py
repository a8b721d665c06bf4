"""Server-sent events framing: ``id: <seq>`` + ``data: <json>``; JSON escapes every newline, so
untrusted text inside an event can never break the framing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
from django.http import StreamingHttpResponse

HEARTBEAT = b": ping\n\n"


def frame(seq: int, event: dict[str, Any]) -> bytes:
    return b"id: %d\ndata: %s\n\n" % (seq, orjson.dumps(event))


def sse_response(frames: AsyncIterator[bytes]) -> StreamingHttpResponse:
    response = StreamingHttpResponse(frames, content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response

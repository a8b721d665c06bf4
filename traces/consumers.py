"""The live trace websocket: ``/api/traces/{id}/watch``."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from urllib.parse import parse_qs

import structlog
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings

from devassist.follow import LogFollower, follow
from traces import selectors
from traces.access import can_view
from traces.exceptions import TraceNotFound
from traces.projections import trace_dict
from traces.store import group_name

logger = structlog.get_logger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_INTERNAL_ERROR = 1011
REPLAY_PAGE = 1000


class TraceWatchConsumer(AsyncJsonWebsocketConsumer):
    """Sends ``connected`` (trace + ``last_seq``), the events after ``?after_seq=`` from the log,
    then live events, each exactly once and in ``seq`` order, until ``trace_completed``.

    The events come through ``devassist.follow.follow``, as a run's SSE stream does: it joins
    the trace's group before it reads the log, fills gaps from the log, reads the log on quiet
    periods, and reads it every second instead when the channel layer fails, so a watcher
    never hangs on a layer that stopped delivering. The consumer has no channel of its own.
    """

    # The follower has its own channel; a consumer's channel would only add a second reader
    # that ends the socket when the layer fails.
    channel_layer_alias = None
    trace_id: uuid.UUID
    forwarding: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        try:
            self.trace_id = uuid.UUID(str(self.scope["url_route"]["kwargs"]["trace_id"]))
        except ValueError:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        after_seq = self._after_seq()
        if after_seq == -1:
            await self._refuse(CLOSE_BAD_REQUEST)
            return
        try:
            trace = await database_sync_to_async(selectors.trace_get)(trace_id=self.trace_id)
        except TraceNotFound:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        if not can_view(user, trace):
            # Someone else's trace looks exactly like a missing one.
            await self._refuse(CLOSE_NOT_FOUND)
            return
        await self.accept()
        await self.send_json(
            {
                "event": "connected",
                "seq": trace.last_seq,
                "last_seq": trace.last_seq,
                "trace": trace_dict(trace),
            }
        )
        follower = LogFollower(
            self._fetch,
            after_seq=trace.last_seq if after_seq is None else min(after_seq, trace.last_seq),
            page_size=REPLAY_PAGE,
        )
        self.forwarding = asyncio.create_task(self._forward(follower))
        logger.info("trace_watch_connected", trace_id=str(self.trace_id), after_seq=after_seq)

    async def disconnect(self, code: int) -> None:
        if self.forwarding is not None:
            self.forwarding.cancel()
            # asyncio.wait, not awaiting the task: a cancellation of this consumer while it
            # waits must not be taken for the forwarding task's own.
            await asyncio.wait([self.forwarding])

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The watch is one-way; client messages are ignored."""

    async def _forward(self, follower: LogFollower) -> None:
        """Send the trace's events; the socket stays open after ``trace_completed`` (the
        client closes it), with nothing more to send."""
        try:
            async for item in follow(
                group_name(self.trace_id),
                follower,
                live_event=_live_trace_event,
                heartbeat_s=settings.SSE_HEARTBEAT_S,
            ):
                if item is None:
                    continue  # daphne pings the socket itself
                await self.send_json(item[1])
                if item[1]["event"] == "trace_completed":
                    return
        except Exception:
            logger.exception("trace_watch_failed", trace_id=str(self.trace_id))
            await self.close(code=CLOSE_INTERNAL_ERROR)

    async def _fetch(self, after_seq: int, up_to: int | None) -> list[tuple[int, dict[str, Any]]]:
        page = await database_sync_to_async(selectors.trace_events_after)(
            trace_id=self.trace_id, after_seq=after_seq, limit=REPLAY_PAGE, up_to=up_to
        )
        return [(event["seq"], event) for event in page]

    def _after_seq(self) -> int | None:
        """The ``after_seq`` query parameter; None when absent, -1 when malformed."""
        query = parse_qs(self.scope.get("query_string", b"").decode("latin1"))
        values = query.get("after_seq")
        if not values:
            return None
        try:
            value = int(values[0])
        except ValueError:
            return -1
        return value if value >= 0 else -1

    async def _refuse(self, code: int) -> None:
        # Accept first: a close before the handshake reaches a browser as a bare HTTP 403,
        # without the close code that tells the client why.
        await self.accept()
        await self.close(code=code)


def _live_trace_event(message: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    if message.get("type") != "trace.event":
        return None
    event = message["event"]
    return event["seq"], event

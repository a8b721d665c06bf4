"""The live trace websocket: ``/api/traces/{id}/watch``."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs

import structlog
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from devassist.follow import LogFollower
from traces.access import can_view
from traces.projections import trace_dict
from traces.store import TraceNotFound, get_trace_store, group_name

logger = structlog.get_logger(__name__)

CLOSE_BAD_REQUEST = 4400
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
REPLAY_PAGE = 1000


class TraceWatchConsumer(AsyncJsonWebsocketConsumer):
    """Sends ``connected`` (trace + ``last_seq``), the events after ``?after_seq=`` from the log,
    then live events, each exactly once and in ``seq`` order.

    The consumer joins the trace's group before it reads ``last_seq``, so nothing falls between
    the replay and the live stream. Events can reach the group out of order when writers race;
    a gap is filled from the log (everything below a broadcast seq is already committed) and a
    seq already sent is dropped.
    """

    group: str | None = None
    trace_id: uuid.UUID
    follower: LogFollower

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
        store = get_trace_store()
        try:
            trace = await store.get_trace(self.trace_id)
        except TraceNotFound:
            await self._refuse(CLOSE_NOT_FOUND)
            return
        if not can_view(user, trace):
            # Someone else's trace looks exactly like a missing one.
            await self._refuse(CLOSE_NOT_FOUND)
            return
        self.group = group_name(self.trace_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        trace = await store.get_trace(self.trace_id)
        await self.send_json(
            {
                "event": "connected",
                "seq": trace.last_seq,
                "last_seq": trace.last_seq,
                "trace": trace_dict(trace),
            }
        )
        self.follower = LogFollower(
            self._fetch,
            after_seq=trace.last_seq if after_seq is None else min(after_seq, trace.last_seq),
            page_size=REPLAY_PAGE,
        )
        async for _, event in self.follower.backlog(up_to=trace.last_seq):
            await self.send_json(event)
        logger.info("trace_watch_connected", trace_id=str(self.trace_id), after_seq=after_seq)

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """The watch is one-way; client messages are ignored."""

    async def trace_event(self, message: dict[str, Any]) -> None:
        event = message["event"]
        async for _, item in self.follower.live(event["seq"], event):
            await self.send_json(item)

    async def _fetch(self, after_seq: int, up_to: int | None) -> list[tuple[int, dict[str, Any]]]:
        page = await get_trace_store().events_after(
            self.trace_id, after_seq, limit=REPLAY_PAGE, up_to=up_to
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

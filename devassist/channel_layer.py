"""The Redis channel layer as DevAssist configures it (``REDIS_URL``).

channels-redis blocks ``BRPOP_TIMEOUT_S`` on Redis waiting for a message; redis-py 8 times
socket reads out after 5 s by default, exactly as long, and a quiet stream then dies with
``TimeoutError`` in the receive loop. The socket timeout is set well past the blocking read, so
only a Redis that really stopped answering fails a read. Every channel of a process uses the
layer's default prefix, so one blocking read serves them all (channels-redis keeps one receive
lock per process: channels of another prefix would wait for it).
"""

from __future__ import annotations

import asyncio
from typing import Any

from channels_redis.core import RedisChannelLayer as BaseRedisChannelLayer

#: How long channels-redis blocks on Redis for a message (its ``brpop_timeout``).
BRPOP_TIMEOUT_S = 5
#: A socket read waits this long before it fails (a blocking read returns within BRPOP_TIMEOUT_S).
SOCKET_TIMEOUT_S = BRPOP_TIMEOUT_S + 10
SOCKET_CONNECT_TIMEOUT_S = 5


class RedisChannelLayer(BaseRedisChannelLayer):
    """channels-redis with an expiry on the in-flight backup of a process's channel (a process
    killed between receiving a message and acknowledging it leaves that key behind, and
    nothing else would ever remove it), and a receive that a cancellation always ends."""

    brpop_timeout = BRPOP_TIMEOUT_S

    async def _brpop_with_clean(self, index: int, channel: str, timeout: int) -> Any:  # noqa: ASYNC109 (channels-redis signature)
        """One blocking read. A task whose cancellation was swallowed below this (seen in CI
        with redis-py 7.4.1: the hub's reader still cancelling, twice, and issuing a fresh
        read every ``BRPOP_TIMEOUT_S``; where redis-py loses it was not found) leaves
        cancelled once its read comes back empty. channels-redis reads again for as long as
        nothing comes, so such a task would never end, and a shutdown waiting for it hung."""
        member = await super()._brpop_with_clean(index, channel, timeout)
        if member is not None:
            await self.connection(index).expire(self._backup_channel_name(channel), self.expiry)
            return member
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise asyncio.CancelledError
        return None


def redis_layer_config(
    url: str, *, prefix: str, group_expiry_s: int, capacity: int = 10_000
) -> dict[str, Any]:
    """``CHANNEL_LAYERS["default"]`` for a Redis at ``url``. Followers re-join their groups
    well within ``group_expiry_s`` (``devassist.follow.REJOIN_S``), so a group entry of a
    process that died is gone after that long. ``capacity``: messages waiting on a channel
    before more are dropped (a process reads all of its events through one channel)."""
    return {
        "BACKEND": "devassist.channel_layer.RedisChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": url,
                    "socket_timeout": SOCKET_TIMEOUT_S,
                    "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT_S,
                }
            ],
            "prefix": prefix,
            "group_expiry": group_expiry_s,
            "capacity": capacity,
        },
    }

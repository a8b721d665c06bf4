"""The Redis channel layer as DevAssist configures it (``devassist.channel_layer``), on a real
Redis."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest

from devassist.channel_layer import RedisChannelLayer
from tests.settings import TEST_REDIS_URL


def layer() -> RedisChannelLayer:
    made = RedisChannelLayer(hosts=[TEST_REDIS_URL], prefix=f"test-{uuid.uuid4().hex[:8]}")
    made.brpop_timeout = 1
    return made


async def test_a_receive_whose_cancellation_was_swallowed_still_ends_cancelled():
    redis_layer = layer()
    channel = await redis_layer.new_channel()

    async def receive_after_a_swallowed_cancel() -> object:
        # Swallowed, as a library on the way may do: the task is still cancelling.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(30)
        return await redis_layer.receive(channel)

    task = asyncio.create_task(receive_after_a_swallowed_cancel())
    await asyncio.sleep(0.05)
    task.cancel()
    # channels-redis reads again as long as nothing came: without the check, this never ends.
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, timeout=10)
    await redis_layer.flush()


async def test_a_message_still_arrives():
    redis_layer = layer()
    channel = await redis_layer.new_channel()
    await redis_layer.send(channel, {"type": "hello"})
    assert await asyncio.wait_for(redis_layer.receive(channel), timeout=10) == {"type": "hello"}
    await redis_layer.flush()

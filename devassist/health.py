"""Service checks behind GET /healthz."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection

from devassist.follow import GroupListener, broadcast
from sandbox.health import docker_status


def _database_check() -> dict[str, Any]:
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {
        "ok": True,
        "vendor": connection.vendor,
        "latency_ms": round((time.monotonic() - started) * 1000, 2),
    }


async def database_status() -> dict[str, Any]:
    try:
        return await sync_to_async(_database_check)()
    except Exception as exc:
        return {"ok": False, "error": str(exc)[:300]}


async def channel_layer_status(*, timeout_s: float = 2.0) -> dict[str, Any]:
    """Round-trips one message through the channel layer, through this process's one reader
    of it (``devassist.follow``), as every live event goes."""
    layer = get_channel_layer()
    if layer is None:
        return {"ok": False, "error": "no channel layer configured"}
    backend = type(layer).__name__
    started = time.monotonic()
    listener = GroupListener(f"healthz.{uuid.uuid4().hex}")
    token = uuid.uuid4().hex
    try:
        async with asyncio.timeout(timeout_s):
            await listener.join()
            await broadcast(listener.group, {"type": "healthz.ping", "token": token})
            message = await listener.receive()
    except TimeoutError:
        return {"ok": False, "backend": backend, "error": f"no answer within {timeout_s:g} s"}
    except Exception as exc:
        return {"ok": False, "backend": backend, "error": str(exc)[:300] or type(exc).__name__}
    finally:
        with contextlib.suppress(Exception):
            await listener.leave()
    if message is None or message.get("token") != token:
        return {"ok": False, "backend": backend, "error": "channel layer returned another message"}
    return {
        "ok": True,
        "backend": backend,
        "latency_ms": round((time.monotonic() - started) * 1000, 2),
    }


async def health_report() -> tuple[bool, dict[str, Any]]:
    """(healthy, report). Docker is optional: without it the service is 'degraded', not down."""
    database, layer, docker = await asyncio.gather(
        database_status(),
        channel_layer_status(),
        sync_to_async(docker_status, thread_sensitive=False)(),
    )
    healthy = database["ok"] and layer["ok"]
    if not healthy:
        status = "error"
    elif not docker["ok"]:
        status = "degraded"
    else:
        status = "ok"
    return healthy, {
        "status": status,
        "checks": {"database": database, "channel_layer": layer, "docker": docker},
    }

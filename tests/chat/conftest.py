"""Fixtures for chat tests: the scripted model server and a knowledge collection."""

from __future__ import annotations

from typing import Any

import httpx
from asgiref.sync import sync_to_async

from devassist.tokens import api_token_create
from tests.agent.conftest import fake_openai, guide, knowledge, scripted  # noqa: F401


async def bearer(user: Any) -> str:
    return (await sync_to_async(api_token_create)(user=user, name="chat-tests"))[1]


def asgi_client(token: str) -> httpx.AsyncClient:
    """An HTTP client on the ASGI application (streams run through the real stack)."""
    from devassist.asgi import application

    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=application),
        base_url="http://127.0.0.1",
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )

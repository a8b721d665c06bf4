"""Sandbox backends: where untrusted code runs, chosen by ``settings.SANDBOX``."""

from __future__ import annotations

import threading
from functools import lru_cache
from typing import Any, cast

import structlog
from django.conf import settings
from django.utils.module_loading import import_string

from sandbox.backends.base import SandboxBackend
from sandbox.exceptions import SandboxUnavailable

logger = structlog.get_logger(__name__)


@lru_cache(maxsize=1)
def get_sandbox() -> SandboxBackend:
    """The configured backend, created once per process. Its pool starts on first use."""
    config: dict[str, Any] = settings.SANDBOX
    backend_class = import_string(config["BACKEND"])
    options: dict[str, Any] = config.get("OPTIONS", {})
    return cast(SandboxBackend, backend_class(**options))


def warm_start() -> None:
    """Start the backend (warm pool, orphan reaper) in the background; an unreachable engine
    is logged, not raised: executions report it when they happen."""

    def start() -> None:
        try:
            get_sandbox().start()
        except SandboxUnavailable as exc:
            logger.warning("sandbox_unavailable_at_start", error=str(exc))

    threading.Thread(target=start, name="sandbox-warm-start", daemon=True).start()

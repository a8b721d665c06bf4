"""The sandbox backend protocol and its result type."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ExecResult:
    """What one execution produced. ``exit_code`` is None when the process was killed for a
    timeout or a cancellation before it exited; ``duration_ms`` is measured on the host with a
    monotonic clock from the moment the code was handed over."""

    stdout: str
    stderr: str
    exit_code: int | None
    duration_ms: int
    timed_out: bool
    oom_killed: bool
    truncated: bool
    backend: str
    image: str
    cancelled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SandboxBackend(Protocol):
    name: str

    def run(
        self, *, code: str, timeout_s: float, cancel: threading.Event | None = None
    ) -> ExecResult:
        """Run ``code`` with Python 3 in a fresh, isolated environment and return its result.

        The timeout is enforced by the caller's host, not inside the sandbox; ``cancel`` set
        from another thread stops the execution as soon as it is noticed. Raises
        ``SandboxUnavailable`` when nothing can run."""
        ...

    def start(self) -> None:
        """Prepare (warm pool, orphan reaper); idempotent."""
        ...

    def close(self) -> None:
        """Release everything the backend holds (pooled containers included)."""
        ...

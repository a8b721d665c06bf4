"""Sandbox slots: how many executions one process runs at once, and how many one user may hold.

Executions run the backend's blocking ``run`` on threads of their own (``SANDBOX_SLOTS`` of
them), never on the event loop's default executor: however many sleeping executions pile up,
they wait for a sandbox thread and delay nothing else that runs in a thread (``/healthz``'s
Docker check among them). Executions beyond ``SANDBOX_SLOTS`` wait in arrival order.

Each user holds at most ``SANDBOX_USER_SLOTS`` executions (default: half the process's slots,
at least one), running or waiting for a thread. One more is refused at once with
``SandboxBusy`` (429 ``sandbox_busy``) instead of queued: the user learns it now, nothing is
stored, and one user's backlog can never stand in front of everyone else's code. The counts are
per process; with several workers each one applies them to what it runs itself.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections import Counter
from collections.abc import Callable, Hashable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from sandbox.exceptions import SandboxBusy

T = TypeVar("T")


class SlotClaim:
    """One execution's claim on its owner's slots, from ``SandboxSlots.claim``; runs at most
    one job."""

    def __init__(self, slots: SandboxSlots, owner: Hashable) -> None:
        self._slots = slots
        self._owner = owner
        self._job: Future[Any] | None = None

    async def run(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on a sandbox thread (with this task's context variables) and return what
        it returns. Cancelling the awaiting task drops a job that has not started; a started
        one is the caller's to stop (``fn`` should watch a cancel event) and keeps the claim
        until it returns."""
        if self._job is not None:
            raise RuntimeError("a slot claim runs one job")
        context = contextvars.copy_context()
        self._job = self._slots.executor.submit(context.run, fn)
        return await asyncio.wrap_future(self._job)

    def _close(self) -> None:
        if self._job is None:
            self._slots._release(self._owner)
        else:
            self._job.add_done_callback(lambda _: self._slots._release(self._owner))


class SandboxSlots:
    """``size`` sandbox threads for the process, ``per_user`` claims per owner. Thread-safe and
    usable from any event loop."""

    def __init__(self, *, size: int, per_user: int) -> None:
        if size < 1 or per_user < 1:
            raise ValueError("size and per_user must be at least 1")
        self.size = size
        self.per_user = per_user
        self.executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix="sandbox-run")
        self._lock = threading.Lock()
        self._held: Counter[Hashable] = Counter()

    @contextmanager
    def claim(self, owner: Hashable) -> Iterator[SlotClaim]:
        """Claim one of ``owner``'s slots for the block. Raises ``SandboxBusy`` at once when
        ``owner`` already holds ``per_user``. The claim ends with the block, or with its job
        if that is still running then."""
        with self._lock:
            if self._held[owner] >= self.per_user:
                raise SandboxBusy(
                    f"You already have {self.per_user} code execution"
                    f"{'s' if self.per_user != 1 else ''} running, the most one user may have "
                    "at once. Wait for one to finish, then try again.",
                    details={"user_slots": self.per_user},
                )
            self._held[owner] += 1
        claim = SlotClaim(self, owner)
        try:
            yield claim
        finally:
            claim._close()

    def held(self, owner: Hashable) -> int:
        """How many claims ``owner`` holds now."""
        with self._lock:
            return self._held[owner]

    def _release(self, owner: Hashable) -> None:
        with self._lock:
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]


@lru_cache(maxsize=1)
def get_sandbox_slots() -> SandboxSlots:
    """The process's slots, from ``SANDBOX_SLOTS`` and ``SANDBOX_USER_SLOTS`` (read once)."""
    size = int(settings.SANDBOX_SLOTS)
    per_user = int(settings.SANDBOX_USER_SLOTS)
    if size < 1 or per_user < 1:
        raise ImproperlyConfigured(
            f"SANDBOX_SLOTS ({size}) and SANDBOX_USER_SLOTS ({per_user}) must be at least 1."
        )
    return SandboxSlots(size=size, per_user=per_user)


def slot_owner(user: Any) -> Hashable:
    """Whose slots an execution counts against: the user's primary key."""
    return getattr(user, "pk", None)

"""Who may see and write which trace."""

from __future__ import annotations

from typing import Any

from traces.models import Trace


def can_view(user: Any, trace: Trace) -> bool:
    """Staff see every trace; everyone else only their own."""
    if not getattr(user, "is_authenticated", False):
        return False
    return bool(user.is_staff) or trace.user_id == user.pk


def can_write(user: Any, trace: Trace) -> bool:
    """Only the trace's owner records into it."""
    return bool(getattr(user, "is_authenticated", False)) and trace.user_id == user.pk

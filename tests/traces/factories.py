"""Helpers to build traces through the real store in sync tests."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

from asgiref.sync import async_to_sync

from traces.models import Trace
from traces.store import StepCreate, get_trace_store


def make_trace(user: Any, task: str = "task", **kwargs: Any) -> Trace:
    return async_to_sync(get_trace_store().create_trace)(user=user, task=task, **kwargs)


def add(trace: Trace, *steps: StepCreate) -> list[Any]:
    return async_to_sync(get_trace_store().add_steps)(trace.id, list(steps)).steps


def step(
    step_type: str = "thought",
    *,
    parent: Any = None,
    id: uuid.UUID | None = None,
    tokens: int = 0,
    cost: str = "0",
    status: str = "completed",
    **kwargs: Any,
) -> StepCreate:
    parent_id = parent if isinstance(parent, uuid.UUID) or parent is None else parent.id
    return StepCreate(
        step_type=step_type,
        id=id or uuid.uuid4(),
        parent_id=parent_id,
        tokens=tokens,
        cost=Decimal(cost),
        status=status,
        **kwargs,
    )


def build_tree(trace: Trace, *, depth: int, fanout: int) -> list[Any]:
    """A full tree: one root, ``fanout`` children per node, ``depth`` levels below the root."""
    root = step("goal", name="root")
    items = [root]
    level = [root]
    for _ in range(depth):
        nxt = []
        for node in level:
            for i in range(fanout):
                child = step("thought", parent=node.id, name=f"n{i}", tokens=1)
                items.append(child)
                nxt.append(child)
        level = nxt
    return add(trace, *items)

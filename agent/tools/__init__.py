"""Tools the agent calls: ``Tool``, ``ToolRegistry`` and the builtin tools (one per module);
their errors are in ``agent.exceptions``."""

from __future__ import annotations

from agent.tools.registry import (
    BUILTIN_TOOL_MODULES,
    Tool,
    ToolContext,
    ToolRegistry,
    default_registry,
)

__all__ = [
    "BUILTIN_TOOL_MODULES",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "default_registry",
]

"""Tools the agent calls: ``Tool``, ``ToolRegistry`` and the builtin tools (one per module)."""

from __future__ import annotations

from agent.tools.registry import (
    BUILTIN_TOOL_MODULES,
    Tool,
    ToolAlreadyRegistered,
    ToolContext,
    ToolDefinitionInvalid,
    ToolFailed,
    ToolInputInvalid,
    ToolNotFound,
    ToolRegistry,
    ToolResultInvalid,
    ToolSchemaInvalid,
    default_registry,
)

__all__ = [
    "BUILTIN_TOOL_MODULES",
    "Tool",
    "ToolAlreadyRegistered",
    "ToolContext",
    "ToolDefinitionInvalid",
    "ToolFailed",
    "ToolInputInvalid",
    "ToolNotFound",
    "ToolRegistry",
    "ToolResultInvalid",
    "ToolSchemaInvalid",
    "default_registry",
]

"""Tools the agent can call: their definition, the registry that validates and runs them.

A ``Tool`` is a value: a name, a description the model reads, a JSON Schema for its arguments
(optionally one for its result) and a sync or async handler ``(args, context)``. The
``ToolRegistry`` checks the schemas with ``jsonschema`` when a tool is registered, so a bad
definition fails at start-up, validates the arguments before every call, runs the handler
off the event loop when it is synchronous, and logs each call with its latency.

Builtin tools live one per module under ``agent.tools``; each module exposes ``TOOL`` and is
listed in ``BUILTIN_TOOL_MODULES``. Adding a builtin tool is one new module plus one entry.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import re
import reprlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import structlog
from asgiref.sync import sync_to_async
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.protocols import Validator

from agent.exceptions import (
    ToolAlreadyRegistered,
    ToolDefinitionInvalid,
    ToolFailed,
    ToolInputInvalid,
    ToolNotFound,
    ToolResultInvalid,
    ToolSchemaInvalid,
)
from devassist.exceptions import DomainError

if TYPE_CHECKING:
    from sandbox.services import CodeSession, OutputCallback

logger = structlog.get_logger(__name__)

#: Modules that each define one builtin tool as a module-level ``TOOL``.
BUILTIN_TOOL_MODULES: tuple[str, ...] = ("agent.tools.execute_code", "agent.tools.search_docs")

#: What the model and the OpenAI function-calling API accept as a function name.
TOOL_NAME_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,63}")

_REASON_MAX_CHARS = 300
_IDENTIFIER_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")

ToolHandler = Callable[[dict[str, Any], "ToolContext"], Any | Awaitable[Any]]


# --- values -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolContext:
    """What a handler knows about the call besides its arguments. A run is stopped by
    cancelling the task that awaits the call: an async handler sees ``asyncio.CancelledError``
    and should stop its own work there (``execute_code`` stops its container); a sync
    handler's thread runs to its end, its result discarded."""

    user: Any
    run_id: uuid.UUID | None = None
    #: The knowledge collection the run works with (``search_docs``'s default), None for
    #: ``settings.KNOWLEDGE_DEFAULT_COLLECTION``.
    collection: str | None = None
    #: Awaited with what the tool prints while it runs (``execute_code``: the program's
    #: output, bounded in rate and size by the sandbox), in order, before the tool returns.
    on_output: OutputCallback | None = None
    #: The run's sandbox (``execute_code`` runs in it: one interpreter for the run's calls
    #: with ``SANDBOX_STATE=run``, its input files, its trace for the files code writes);
    #: None: each call in a fresh container, nothing stored.
    sandbox: CodeSession | None = None


@dataclass(frozen=True)
class Tool:
    """One tool. ``parameters`` is a JSON Schema (draft 2020-12) whose top level is
    ``{"type": "object", ...}``; ``handler(args, context)`` may be sync or async and returns
    JSON-serialisable data (the observation the model reads). Schemas are checked when the tool
    is registered; the name is checked here."""

    name: str
    description: str
    parameters: dict[str, Any]
    handler: ToolHandler
    result_schema: dict[str, Any] | None = None
    #: What the model reads of a result (``execute_code`` leaves out its files' ids and
    #: hashes); None: the result itself. The whole result is what the trace records.
    observe: Callable[[Any], Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not TOOL_NAME_RE.fullmatch(self.name):
            raise ToolDefinitionInvalid(
                f"Tool name {self.name!r} is invalid: use 1-64 letters, digits or underscores, "
                "not starting with a digit.",
                details={"tool": self.name, "pattern": TOOL_NAME_RE.pattern},
            )
        if not callable(self.handler):
            raise ToolDefinitionInvalid(
                f"Tool {self.name!r} has a handler that is not callable.",
                details={"tool": self.name},
            )

    @property
    def is_async(self) -> bool:
        """True when the handler is a coroutine function (or an object whose ``__call__`` is)."""
        handler = self.handler
        return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
            type(handler).__call__
        )

    def spec(self) -> dict[str, Any]:
        """``{name, description, parameters}``: how the tool is described to the model."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": copy.deepcopy(self.parameters),
        }


@dataclass(frozen=True)
class _Entry:
    tool: Tool
    validator: Validator
    result_validator: Validator | None


# --- the registry -------------------------------------------------------------------------


class ToolRegistry:
    """A set of tools by name. Registration happens at start-up; lookups and calls are safe
    from any number of tasks afterwards."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._entries: dict[str, _Entry] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``. Raises ``ToolSchemaInvalid`` for a bad schema and
        ``ToolAlreadyRegistered`` (409) for a name already taken."""
        if tool.name in self._entries:
            raise ToolAlreadyRegistered(
                f"A tool named {tool.name!r} is already registered.",
                details={"tool": tool.name},
            )
        self._entries[tool.name] = _Entry(
            tool=tool,
            validator=_compile(tool.name, tool.parameters, role="parameters", object_only=True),
            result_validator=(
                None
                if tool.result_schema is None
                else _compile(tool.name, tool.result_schema, role="result_schema")
            ),
        )

    def get(self, name: str) -> Tool:
        """The tool called ``name``; raises ``ToolNotFound`` (404) with a suggestion."""
        return self._entry(name).tool

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Tool]:
        """The tools, sorted by name."""
        return (self._entries[name].tool for name in self.names())

    def subset(self, names: Iterable[str]) -> ToolRegistry:
        """A registry holding only ``names`` (a run's ``tools`` option), sharing this one's
        compiled validators. Raises ``ToolNotFound`` for the first unknown name."""
        wanted = list(dict.fromkeys(names))
        unknown = [name for name in wanted if name not in self._entries]
        if unknown:
            raise self._not_found(unknown[0], unknown=unknown)
        chosen = ToolRegistry()
        chosen._entries = {name: self._entries[name] for name in wanted}
        return chosen

    def validate(self, name: str, args: Any) -> None:
        """Check ``args`` against the tool's schema. Raises ``ToolNotFound`` or
        ``ToolInputInvalid`` for the most relevant error (``jsonschema``'s ``best_match``)."""
        entry = self._entry(name)
        if not isinstance(args, dict):
            raise ToolInputInvalid(
                f"Invalid arguments for tool {name!r} at $: expected an object, "
                f"got {_json_type(args)}.",
                details={
                    "tool": name,
                    "path": "$",
                    "reason": f"expected an object, got {_json_type(args)}",
                    "schema_path": "#/type",
                },
            )
        error = best_match(entry.validator.iter_errors(args))
        if error is not None:
            path, reason = json_path(error.absolute_path), _reason(error)
            raise ToolInputInvalid(
                f"Invalid arguments for tool {name!r} at {path}: {reason}",
                details={
                    "tool": name,
                    "path": path,
                    "reason": reason,
                    "schema_path": json_pointer(error.absolute_schema_path),
                },
            )

    async def call(self, name: str, args: Any, context: ToolContext) -> Any:
        """Validate ``args``, run the handler and return its result (checked against the
        result schema if the tool has one).

        Async handlers are awaited; sync handlers run in a worker thread, never on the event
        loop. Raises ``ToolNotFound``, ``ToolInputInvalid``, ``ToolFailed`` (wrapping whatever
        the handler raised, except its own ``ToolFailed`` / ``ToolInputInvalid``, which pass
        through) and ``ToolResultInvalid``; cancelling the awaiting task propagates. Every
        call logs ``tool_call_finished`` with ``latency_ms`` (monotonic, validation included),
        ``ok`` and ``error`` (the error code, or None)."""
        started = time.monotonic()
        # Only a BaseException (in practice, the task being cancelled) leaves this value.
        error_code: str | None = "cancelled"
        try:
            self.validate(name, args)
            entry = self._entries[name]
            try:
                result = await _invoke(entry.tool, args, context)
            except (ToolFailed, ToolInputInvalid) as exc:
                exc.details.setdefault("tool", name)
                raise
            except Exception as exc:
                raise _failure(name, exc) from exc
            _check_result(entry, result)
        except DomainError as exc:
            error_code = exc.code
            raise
        else:
            error_code = None
            return result
        finally:
            latency_ms = round((time.monotonic() - started) * 1000)
            log = logger.info if error_code is None else logger.warning
            log(
                "tool_call_finished",
                tool=name,
                run_id=str(context.run_id) if context.run_id else None,
                latency_ms=latency_ms,
                ok=error_code is None,
                error=error_code,
            )

    def observed(self, name: str, result: Any) -> Any:
        """What the model reads of the tool ``name``'s ``result`` (``Tool.observe``)."""
        entry = self._entries.get(name)
        if entry is None or entry.tool.observe is None:
            return result
        return entry.tool.observe(result)

    def specs(self) -> list[dict[str, Any]]:
        """``[{name, description, parameters}]`` sorted by name, for the system prompt."""
        return [tool.spec() for tool in self]

    def to_openai_tools(self) -> list[dict[str, Any]]:
        """The OpenAI function-calling form: ``[{"type": "function", "function": spec}]``."""
        return [{"type": "function", "function": spec} for spec in self.specs()]

    def _entry(self, name: str) -> _Entry:
        entry = self._entries.get(name)
        if entry is None:
            raise self._not_found(name)
        return entry

    def _not_found(self, name: str, *, unknown: Sequence[str] = ()) -> ToolNotFound:
        available = self.names()
        matches = difflib.get_close_matches(str(name), available, n=1)
        suggestion = matches[0] if matches else None
        hint = f" Did you mean {suggestion!r}?" if suggestion else ""
        listed = ", ".join(available) or "none"
        details: dict[str, Any] = {
            "tool": name,
            "available": available,
            "suggestion": suggestion,
        }
        if len(unknown) > 1:
            details["unknown"] = list(unknown)
        return ToolNotFound(
            f"Unknown tool {name!r}.{hint} Available tools: {listed}.", details=details
        )


@lru_cache(maxsize=1)
def default_registry() -> ToolRegistry:
    """The builtin tools (``BUILTIN_TOOL_MODULES``), imported and registered once per
    process. A module without a ``Tool`` named ``TOOL`` raises ``ToolDefinitionInvalid``."""
    registry = ToolRegistry()
    for module_name in BUILTIN_TOOL_MODULES:
        tool = getattr(importlib.import_module(module_name), "TOOL", None)
        if not isinstance(tool, Tool):
            raise ToolDefinitionInvalid(
                f"Tool module {module_name!r} does not define TOOL = Tool(...).",
                details={"module": module_name},
            )
        registry.register(tool)
    return registry


# --- helpers ------------------------------------------------------------------------------


def json_path(path: Iterable[str | int]) -> str:
    """``$`` followed by ``.field`` / ``[index]`` (``['odd key']`` for non-identifiers)."""
    parts = ["$"]
    for element in path:
        if isinstance(element, int):
            parts.append(f"[{element}]")
        elif _IDENTIFIER_RE.fullmatch(element):
            parts.append(f".{element}")
        else:
            escaped = element.replace("\\", "\\\\").replace("'", "\\'")
            parts.append(f"['{escaped}']")
    return "".join(parts)


def json_pointer(path: Iterable[str | int]) -> str:
    """A URI-fragment JSON Pointer (RFC 6901): ``#/properties/top_k/maximum``."""
    escaped = (str(part).replace("~", "~0").replace("/", "~1") for part in path)
    return "#" + "".join(f"/{part}" for part in escaped)


def _compile(name: str, schema: Any, *, role: str, object_only: bool = False) -> Validator:
    if not isinstance(schema, dict):
        raise ToolSchemaInvalid(
            f"Tool {name!r}: {role} must be a JSON Schema object, got {_json_type(schema)}.",
            details={"tool": name, "schema": role, "path": "$", "reason": "not an object"},
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        path, reason = json_path(exc.absolute_path), _reason(exc)
        raise ToolSchemaInvalid(
            f"Tool {name!r}: {role} is not a valid JSON Schema at {path}: {reason}",
            details={"tool": name, "schema": role, "path": path, "reason": reason},
        ) from exc
    if object_only and schema.get("type") != "object":
        raise ToolSchemaInvalid(
            f'Tool {name!r}: {role} must have "type": "object" at the top level.',
            details={
                "tool": name,
                "schema": role,
                "path": "$.type",
                "reason": 'the top level must be "type": "object"',
            },
        )
    validator = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return cast(Validator, validator)


async def _invoke(tool: Tool, args: dict[str, Any], context: ToolContext) -> Any:
    if tool.is_async:
        return await tool.handler(args, context)
    return await sync_to_async(tool.handler, thread_sensitive=False)(args, context)


def _check_result(entry: _Entry, result: Any) -> None:
    if entry.result_validator is None:
        return
    error = best_match(entry.result_validator.iter_errors(result))
    if error is not None:
        name = entry.tool.name
        path, reason = json_path(error.absolute_path), _reason(error)
        raise ToolResultInvalid(
            f"Tool {name!r} returned an invalid result at {path}: {reason}",
            details={
                "tool": name,
                "path": path,
                "reason": reason,
                "schema_path": json_pointer(error.absolute_schema_path),
            },
        )


def _failure(name: str, exc: Exception) -> ToolFailed:
    message = str(exc) or type(exc).__name__
    details: dict[str, Any] = {"tool": name, "error": type(exc).__name__}
    if isinstance(exc, DomainError):
        message = exc.message
        details.update(code=exc.code, **{k: v for k, v in exc.details.items() if k != "tool"})
    return ToolFailed(f"Tool {name!r} failed: {message}", details=details)


_short = reprlib.Repr()
_short.maxstring = 80
_short.maxother = 80
_short.maxlist = _short.maxdict = 5


def _reason(error: ValidationError) -> str:
    """The error's message, with the offending value shortened: ``jsonschema`` embeds the
    whole instance (``'<100 kB of code>' is too long``)."""
    reason = error.message
    if len(reason) > _REASON_MAX_CHARS:
        full = repr(error.instance)
        if full in reason:
            reason = reason.replace(full, _short.repr(error.instance))
    if len(reason) > _REASON_MAX_CHARS:
        reason = reason[: _REASON_MAX_CHARS - 3] + "..."
    return reason


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


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
    "json_path",
]

"""Tool and ToolRegistry: definitions, schema checks, argument validation and calls.

No Docker and no database: the handlers here are plain functions.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from http import HTTPStatus
from typing import Any

import pytest
from structlog.testing import capture_logs

from agent.exceptions import (
    ToolAlreadyRegistered,
    ToolDefinitionInvalid,
    ToolFailed,
    ToolInputInvalid,
    ToolNotFound,
    ToolResultInvalid,
    ToolSchemaInvalid,
)
from agent.tools import Tool, ToolContext, ToolRegistry
from agent.tools.registry import json_path
from devassist.api import http_status
from devassist.exceptions import DomainError, InvalidInput

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "minLength": 1},
        "top_k": {"type": "integer", "minimum": 1, "maximum": 20},
        "items": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
        "odd key": {"type": "boolean"},
    },
    "required": ["query"],
    "additionalProperties": False,
}


def echo(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    return {"args": args}


def make_tool(name: str = "search", **overrides: Any) -> Tool:
    fields: dict[str, Any] = {
        "name": name,
        "description": f"The {name} tool.",
        "parameters": SEARCH_SCHEMA,
        "handler": echo,
    }
    fields.update(overrides)
    return Tool(**fields)


def context() -> ToolContext:
    return ToolContext(user=None, run_id=uuid.uuid4())


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([make_tool("search"), make_tool("execute_code")])


# --- registration -------------------------------------------------------------------------


def test_registering_valid_tools_makes_them_available(registry):
    assert registry.names() == ["execute_code", "search"]
    assert "search" in registry
    assert "nope" not in registry
    assert len(registry) == 2
    assert registry.get("search").description == "The search tool."


def test_a_result_schema_is_accepted():
    registry = ToolRegistry([make_tool(result_schema={"type": "array"})])
    assert registry.get("search").result_schema == {"type": "array"}


@pytest.mark.parametrize(
    ("schema", "path"),
    [
        ({"type": "object", "properties": {"x": {"type": "nope"}}}, "$.properties.x.type"),
        ({"type": "object", "required": "x"}, "$.required"),
        ({"type": "object", "properties": {"n": {"minimum": "1"}}}, "$.properties.n.minimum"),
    ],
)
def test_a_bad_schema_fails_at_registration(schema, path):
    registry = ToolRegistry()
    with pytest.raises(ToolSchemaInvalid) as caught:
        registry.register(make_tool(parameters=schema))
    assert caught.value.code == "tool_schema_invalid"
    assert caught.value.details["tool"] == "search"
    assert caught.value.details["path"] == path
    assert "search" not in registry


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"properties": {"x": {"type": "string"}}},
        {"type": ["object", "null"]},
        [{"type": "object"}],
    ],
)
def test_the_argument_schema_must_be_an_object_schema(schema):
    with pytest.raises(ToolSchemaInvalid):
        ToolRegistry([make_tool(parameters=schema)])


def test_a_bad_result_schema_fails_at_registration():
    with pytest.raises(ToolSchemaInvalid) as caught:
        ToolRegistry([make_tool(result_schema={"type": "nope"})])
    assert caught.value.details["schema"] == "result_schema"


@pytest.mark.parametrize(
    "name", ["", "1tool", "has-dash", "has space", "dotted.name", "x" * 65, "ok\n", "ünïcode"]
)
def test_bad_tool_names_are_refused(name):
    with pytest.raises(ToolDefinitionInvalid) as caught:
        make_tool(name)
    assert caught.value.code == "tool_definition_invalid"


@pytest.mark.parametrize("name", ["a", "_private", "search_docs", "T2", "x" * 64])
def test_good_tool_names_are_accepted(name):
    assert make_tool(name).name == name


def test_a_handler_must_be_callable():
    with pytest.raises(ToolDefinitionInvalid):
        make_tool(handler="not callable")


def test_a_duplicate_name_is_a_409(registry):
    with pytest.raises(ToolAlreadyRegistered) as caught:
        registry.register(make_tool("search"))
    assert http_status(caught.value) == HTTPStatus.CONFLICT
    assert caught.value.code == "tool_already_registered"
    assert caught.value.details == {"tool": "search"}


# --- lookup -------------------------------------------------------------------------------


def test_an_unknown_tool_is_a_404_with_a_suggestion(registry):
    with pytest.raises(ToolNotFound) as caught:
        registry.get("exec_code")
    error = caught.value
    assert http_status(error) == HTTPStatus.NOT_FOUND
    assert error.code == "tool_not_found"
    assert error.details == {
        "tool": "exec_code",
        "available": ["execute_code", "search"],
        "suggestion": "execute_code",
    }
    assert "Did you mean 'execute_code'?" in error.message


def test_an_unknown_tool_without_a_close_name_has_no_suggestion(registry):
    with pytest.raises(ToolNotFound) as caught:
        registry.get("weather_forecast")
    assert caught.value.details["suggestion"] is None
    assert "Did you mean" not in caught.value.message


async def test_calling_an_unknown_tool_is_a_404(registry):
    with pytest.raises(ToolNotFound):
        await registry.call("nope", {}, context())


def test_subset_keeps_only_the_named_tools(registry):
    only = registry.subset(["search", "search"])
    assert only.names() == ["search"]
    assert "execute_code" not in only
    assert registry.names() == ["execute_code", "search"]
    assert registry.subset([]).names() == []


def test_subset_with_an_unknown_name_lists_the_valid_ones(registry):
    with pytest.raises(ToolNotFound) as caught:
        registry.subset(["search", "serch", "bogus"])
    assert caught.value.details["tool"] == "serch"
    assert caught.value.details["suggestion"] == "search"
    assert caught.value.details["available"] == ["execute_code", "search"]
    assert caught.value.details["unknown"] == ["serch", "bogus"]


async def test_a_subset_validates_and_calls_like_its_parent(registry):
    only = registry.subset(["search"])
    assert await only.call("search", {"query": "q"}, context()) == {"args": {"query": "q"}}
    with pytest.raises(ToolInputInvalid):
        only.validate("search", {})


# --- argument validation ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "path", "reason", "schema_path"),
    [
        ({}, "$", "'query' is a required property", "#/required"),
        ({"query": 3}, "$.query", "3 is not of type 'string'", "#/properties/query/type"),
        ({"query": ""}, "$.query", "should be non-empty", "#/properties/query/minLength"),
        (
            {"query": "q", "top_k": 50},
            "$.top_k",
            "50 is greater than the maximum of 20",
            "#/properties/top_k/maximum",
        ),
        (
            {"query": "q", "top_k": 0},
            "$.top_k",
            "0 is less than the minimum of 1",
            "#/properties/top_k/minimum",
        ),
        ({"query": "q", "top_k": 2.5}, "$.top_k", "2.5 is not of type 'integer'", None),
        ({"query": "q", "top_k": True}, "$.top_k", "True is not of type 'integer'", None),
        (
            {"query": "q", "extra": 1},
            "$",
            "Additional properties are not allowed ('extra' was unexpected)",
            "#/additionalProperties",
        ),
        (
            {"query": "q", "items": [{"name": "a"}, {"name": "b"}, {"name": 7}]},
            "$.items[2].name",
            "7 is not of type 'string'",
            "#/properties/items/items/properties/name/type",
        ),
        (
            {"query": "q", "items": [{"name": "a"}, {}]},
            "$.items[1]",
            "'name' is a required property",
            None,
        ),
        ({"query": "q", "odd key": "yes"}, "$['odd key']", "'yes' is not of type 'boolean'", None),
    ],
)
def test_invalid_arguments_report_the_path_and_reason(registry, args, path, reason, schema_path):
    with pytest.raises(ToolInputInvalid) as caught:
        registry.validate("search", args)
    error = caught.value
    assert isinstance(error, InvalidInput)
    assert http_status(error) == HTTPStatus.BAD_REQUEST
    assert error.code == "tool_input_invalid"
    assert error.details["tool"] == "search"
    assert error.details["path"] == path
    assert reason in error.details["reason"]
    if schema_path is not None:
        assert error.details["schema_path"] == schema_path
    assert path in error.message


@pytest.mark.parametrize("args", [None, [], "query", 3, ["query", "q"]])
def test_arguments_that_are_not_an_object_fail_at_the_root(registry, args):
    with pytest.raises(ToolInputInvalid) as caught:
        registry.validate("search", args)
    assert caught.value.details["path"] == "$"
    assert "expected an object" in caught.value.details["reason"]


def test_valid_arguments_pass(registry):
    registry.validate("search", {"query": "q", "top_k": 20, "items": [{"name": "a"}]})


def test_a_huge_offending_value_is_shortened_in_the_reason():
    schema = {"type": "object", "properties": {"code": {"type": "string", "maxLength": 10}}}
    registry = ToolRegistry([make_tool(parameters=schema)])
    with pytest.raises(ToolInputInvalid) as caught:
        registry.validate("search", {"code": "x" * 100_000})
    reason = caught.value.details["reason"]
    assert reason.endswith("is too long")
    assert len(reason) < 200


def test_formats_are_checked():
    schema = {"type": "object", "properties": {"when": {"type": "string", "format": "date"}}}
    registry = ToolRegistry([make_tool(parameters=schema)])
    registry.validate("search", {"when": "2024-02-29"})
    with pytest.raises(ToolInputInvalid) as caught:
        registry.validate("search", {"when": "yesterday"})
    assert caught.value.details["path"] == "$.when"


async def test_a_call_with_invalid_arguments_never_reaches_the_handler():
    calls: list[dict[str, Any]] = []

    def record(args: dict[str, Any], context: ToolContext) -> None:
        calls.append(args)

    registry = ToolRegistry([make_tool(handler=record)])
    with pytest.raises(ToolInputInvalid) as caught:
        await registry.call("search", {"query": "q", "top_k": 50}, context())
    assert caught.value.details["path"] == "$.top_k"
    assert calls == []


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ([], "$"),
        (["a", 0, "b"], "$.a[0].b"),
        (["odd key", "it's"], "$['odd key']['it\\'s']"),
        (["_x1", 12], "$._x1[12]"),
    ],
)
def test_json_path_rendering(path, expected):
    assert json_path(path) == expected


# --- calls --------------------------------------------------------------------------------


async def test_a_sync_handler_runs_in_another_thread():
    seen: dict[str, Any] = {}

    def handler(args: dict[str, Any], context: ToolContext) -> str:
        seen["thread"] = threading.get_ident()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            seen["loop"] = False
        else:
            seen["loop"] = True
        seen["context"] = context
        return args["query"].upper()

    registry = ToolRegistry([make_tool(handler=handler)])
    ctx = context()
    assert await registry.call("search", {"query": "abc"}, ctx) == "ABC"
    assert seen["thread"] != threading.get_ident()
    assert seen["loop"] is False
    assert seen["context"] is ctx


async def test_an_async_handler_is_awaited_on_the_loop():
    seen: dict[str, Any] = {}

    async def handler(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        seen["thread"] = threading.get_ident()
        await asyncio.sleep(0)
        return {"query": args["query"], "run_id": context.run_id}

    tool = make_tool(handler=handler)
    assert tool.is_async
    ctx = context()
    result = await ToolRegistry([tool]).call("search", {"query": "q"}, ctx)
    assert result == {"query": "q", "run_id": ctx.run_id}
    assert seen["thread"] == threading.get_ident()


async def test_an_object_with_an_async_call_counts_as_async():
    class Handler:
        async def __call__(self, args: dict[str, Any], context: ToolContext) -> int:
            return 7

    tool = make_tool(handler=Handler())
    assert tool.is_async
    assert await ToolRegistry([tool]).call("search", {"query": "q"}, context()) == 7


async def test_a_handler_exception_becomes_tool_failed():
    def handler(args: dict[str, Any], context: ToolContext) -> None:
        raise ValueError("the index is empty")

    registry = ToolRegistry([make_tool(handler=handler)])
    with pytest.raises(ToolFailed) as caught:
        await registry.call("search", {"query": "q"}, context())
    error = caught.value
    assert error.code == "tool_failed"
    assert http_status(error) == HTTPStatus.INTERNAL_SERVER_ERROR
    assert "the index is empty" in error.message
    assert error.details == {"tool": "search", "error": "ValueError"}
    assert isinstance(error.__cause__, ValueError)


async def test_a_domain_error_from_a_handler_keeps_its_code_in_the_details():
    class Quota(DomainError):
        code = "quota_exceeded"

    async def handler(args: dict[str, Any], context: ToolContext) -> None:
        raise Quota("Daily quota used up.", details={"limit": 10})

    registry = ToolRegistry([make_tool(handler=handler)])
    with pytest.raises(ToolFailed) as caught:
        await registry.call("search", {"query": "q"}, context())
    assert caught.value.message == "Tool 'search' failed: Daily quota used up."
    assert caught.value.details == {
        "tool": "search",
        "error": "Quota",
        "code": "quota_exceeded",
        "limit": 10,
    }


async def test_a_tool_failed_raised_by_the_handler_passes_through():
    async def handler(args: dict[str, Any], context: ToolContext) -> None:
        raise ToolFailed("backend down, try later")

    registry = ToolRegistry([make_tool(handler=handler)])
    with pytest.raises(ToolFailed) as caught:
        await registry.call("search", {"query": "q"}, context())
    assert caught.value.message == "backend down, try later"
    assert caught.value.details == {"tool": "search"}


async def test_a_result_that_breaks_the_result_schema_is_tool_result_invalid():
    schema = {
        "type": "object",
        "properties": {"hits": {"type": "array", "items": {"type": "string"}}},
        "required": ["hits"],
    }

    def handler(args: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return {"hits": ["a", 2]} if args["query"] == "bad" else {"hits": ["a"]}

    registry = ToolRegistry([make_tool(handler=handler, result_schema=schema)])
    assert await registry.call("search", {"query": "good"}, context()) == {"hits": ["a"]}
    with pytest.raises(ToolResultInvalid) as caught:
        await registry.call("search", {"query": "bad"}, context())
    assert caught.value.code == "tool_result_invalid"
    assert caught.value.details["path"] == "$.hits[1]"


async def test_cancelling_a_call_propagates():
    started = asyncio.Event()

    async def handler(args: dict[str, Any], context: ToolContext) -> None:
        started.set()
        await asyncio.sleep(30)

    registry = ToolRegistry([make_tool(handler=handler)])
    with capture_logs() as logs:
        task = asyncio.create_task(registry.call("search", {"query": "q"}, context()))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [(e["ok"], e["error"]) for e in logs if e["event"] == "tool_call_finished"] == [
        (False, "cancelled")
    ]


async def test_each_call_is_logged_with_its_latency():
    async def slow(args: dict[str, Any], context: ToolContext) -> str:
        await asyncio.sleep(0.05)
        return "done"

    registry = ToolRegistry([make_tool(handler=slow)])
    ctx = context()
    with capture_logs() as logs:
        await registry.call("search", {"query": "q"}, ctx)
        with pytest.raises(ToolInputInvalid):
            await registry.call("search", {"top_k": 1}, ctx)
    finished = [entry for entry in logs if entry["event"] == "tool_call_finished"]
    assert len(finished) == 2
    ok, bad = finished
    assert ok["tool"] == "search"
    assert ok["ok"] is True
    assert ok["error"] is None
    assert ok["run_id"] == str(ctx.run_id)
    assert ok["log_level"] == "info"
    assert isinstance(ok["latency_ms"], int)
    assert ok["latency_ms"] >= 40
    assert bad["ok"] is False
    assert bad["error"] == "tool_input_invalid"
    assert bad["log_level"] == "warning"


def test_the_context_defaults():
    ctx = ToolContext(user="u")
    assert ctx.user == "u"
    assert ctx.run_id is None


# --- descriptions for the model -----------------------------------------------------------


def test_specs_and_openai_tools_describe_every_tool(registry):
    specs = registry.specs()
    assert [s["name"] for s in specs] == ["execute_code", "search"]
    assert specs[1] == {
        "name": "search",
        "description": "The search tool.",
        "parameters": SEARCH_SCHEMA,
    }
    assert registry.to_openai_tools() == [{"type": "function", "function": s} for s in specs]


def test_specs_are_copies(registry):
    registry.specs()[0]["parameters"]["properties"].clear()
    assert registry.get("search").parameters["properties"]
    assert registry.specs()[0]["parameters"] == SEARCH_SCHEMA

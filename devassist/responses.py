"""Fast JSON for API responses."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import orjson
from django.http import HttpRequest, HttpResponse
from ninja.renderers import BaseRenderer
from pydantic import BaseModel

from devassist.storable import storable_json


class OrjsonRenderer(BaseRenderer):
    """JSON through orjson: UTF-8 kept as is, and several times faster than ``json`` on the
    big payloads of the trace API."""

    media_type = "application/json"

    def render(self, request: HttpRequest, data: Any, *, response_status: int) -> bytes:
        return json_bytes(data)


def json_bytes(data: Any) -> bytes:
    """``data`` as JSON. Writes make every stored value encodable (``devassist.storable``);
    a row stored before that (an integer past 64 bits, say) is encoded as it would be stored
    today rather than failing the whole answer."""
    try:
        return orjson.dumps(data, default=_json_default, option=orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:
        storable, _ = storable_json(data)
        return orjson.dumps(storable, default=_json_default, option=orjson.OPT_UTC_Z)


def children_first(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every node of the trees ``nodes`` (each with its ``children``, a list of nodes), each
    after all of its children: the order to build a tree's output in without recursion,
    which a tree hundreds of levels deep exhausts."""
    ordered: list[dict[str, Any]] = []
    pending = list(nodes)
    while pending:
        node = pending.pop()
        ordered.append(node)
        pending += node.get("children") or []
    ordered.reverse()
    return ordered


def tree_json_bytes(nodes: list[dict[str, Any]]) -> bytes:
    """A tree's ``nodes`` (each with its ``children``, a list of nodes) as ``json_bytes``
    encodes them, however deep the tree: in one go when orjson can (it nests 254 levels, two
    a tree level, the nodes' data besides), else node by node, deepest first, each node's
    children put in it as encoded (an OTLP trace can nest spans hundreds of levels deep)."""
    try:
        return orjson.dumps(nodes, default=_json_default, option=orjson.OPT_UTC_Z)
    except orjson.JSONEncodeError:  # too deep, or an old row's value only json_bytes encodes
        return _tree_node_by_node(nodes)


def _tree_node_by_node(nodes: list[dict[str, Any]]) -> bytes:
    encoded: dict[int, bytes] = {}
    for node in children_first(nodes):
        head = json_bytes({key: value for key, value in node.items() if key != "children"})
        children = b",".join(encoded.pop(id(child)) for child in node.get("children") or [])
        encoded[id(node)] = b'%s%s"children":[%s]}' % (
            head[:-1],
            b"," if len(head) > 2 else b"",
            children,
        )
    return b"[" + b",".join(encoded.pop(id(node)) for node in nodes) + b"]"


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def json_response(data: Any, *, status: int = 200) -> HttpResponse:
    """An API response built without django-ninja's response validation, for payloads
    already in their final shape (a 10,000-node tree validates far slower than it encodes)."""
    return HttpResponse(json_bytes(data), status=status, content_type="application/json")

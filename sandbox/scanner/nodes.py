"""Small helpers over ``ast`` nodes that every part of the scan uses."""

from __future__ import annotations

import ast

# Fields that never hold child nodes worth visiting (names, flags, operator singletons).
_LEAF_FIELDS = frozenset(
    {"ctx", "op", "ops", "id", "attr", "arg", "name", "asname", "module", "level", "kind"}
    | {"conversion", "is_async", "type_comment", "simple", "rest", "tag"}
)
_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {ast.Constant: ()}


def walk(tree: ast.AST) -> list[ast.AST]:
    """Every node of ``tree`` in breadth-first order (parents before children), without the
    context and operator singletons; ``ast.walk`` without its per-node overhead."""
    nodes = [tree]
    append = nodes.append
    child_fields = _CHILD_FIELDS
    for node in nodes:
        kind = type(node)
        fields = child_fields.get(kind)
        if fields is None:
            fields = tuple(f for f in kind._fields if f not in _LEAF_FIELDS)
            child_fields[kind] = fields
        for field in fields:
            value = getattr(node, field, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, ast.AST):
                        append(item)
            elif isinstance(value, ast.AST):
                append(value)
    return nodes


def argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    """The argument at ``position`` (-1: keyword only) or named ``keyword``; None if absent or
    hidden behind ``*args``."""
    if 0 <= position < len(call.args):
        if any(isinstance(arg, ast.Starred) for arg in call.args[: position + 1]):
            return None
        return call.args[position]
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return None


def memo_key(node: ast.expr) -> int | str:
    """Names are memoised by identifier (every use of a name means the same bindings), other
    nodes by identity."""
    return node.id if isinstance(node, ast.Name) else id(node)


def position(node: ast.AST) -> tuple[int, int]:
    """``(line, col)`` of ``node``; ``(0, 0)`` for nodes without a position."""
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)

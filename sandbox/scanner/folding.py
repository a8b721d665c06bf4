"""Value folding: the strings and integer sizes that literal expressions evaluate to.

``"sys" + "tem"``, ``"".join([...])``, ``"__slabolg__"[::-1]``, ``chr(115)`` and f-strings of
literals fold to strings; integer expressions fold to a magnitude (log10 of the absolute
value) without computing them, so ``10**10**8`` costs nothing to judge. Folding is bounded:
the code can't make the scanner build long strings or follow many candidates.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

from sandbox.scanner.bindings import Bindings

_MAX_FOLDED_LENGTH = 10_000
# More candidate values than this for one name or path count as unknown.
MAX_CANDIDATES = 32
_STR_METHODS = frozenset(
    {"lower", "upper", "strip", "lstrip", "rstrip", "casefold", "swapcase", "title", "decode"}
)
_LOG10_2 = math.log10(2)


class Folder:
    """Folds the expressions of one scan. ``qualnames`` tells what a called function may be
    (for ``chr(...)`` and ``str(...)``). Every result is memoised by node identity."""

    def __init__(self, bindings: Bindings, qualnames: Callable[[ast.expr], frozenset[str]]) -> None:
        self.bindings = bindings
        self.qualnames = qualnames
        self._str_memo: dict[int, str | None] = {}
        self._mag_memo: dict[int, float | None] = {}
        self._name_str_memo: dict[str, tuple[str, ...] | None] = {}

    def str_values(self, node: ast.expr | None) -> tuple[str, ...] | None:
        """Every string ``node`` can evaluate to, when all of them are known literals (a name
        bound to several literals has several); None when any is unknown."""
        if node is None:
            return None
        if isinstance(node, ast.Name):
            return self._name_str_values(node.id)
        value = self.fold_str(node)
        return None if value is None else (value,)

    def _name_str_values(self, name: str) -> tuple[str, ...] | None:
        if name in self._name_str_memo:
            return self._name_str_memo[name]
        self._name_str_memo[name] = None  # a string defined through itself is unknown
        result: tuple[str, ...] | None = None
        bindings = self.bindings.literal_bindings(name)
        if bindings is not None:
            values = [self.fold_str(value) for value in bindings]
            known = [value for value in values if value is not None]
            distinct = tuple(dict.fromkeys(known))
            if len(known) == len(values) and len(distinct) <= MAX_CANDIDATES:
                result = distinct
        self._name_str_memo[name] = result
        return result

    def fold_str(self, node: ast.expr) -> str | None:
        """The one string ``node`` evaluates to (bytes decoded), or None if it isn't known or
        would be longer than ``_MAX_FOLDED_LENGTH``."""
        key = id(node)
        if key in self._str_memo:
            return self._str_memo[key]
        self._str_memo[key] = None  # guards against self-reference through names
        try:
            result = self._fold_str_uncached(node)
        except RecursionError:
            result = None
        if result is not None and len(result) > _MAX_FOLDED_LENGTH:
            result = None
        self._str_memo[key] = result
        return result

    def _fold_str_uncached(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return node.value
            if isinstance(node.value, bytes):
                return node.value.decode("utf-8", "surrogateescape")
            return None
        if isinstance(node, ast.Name):
            values = self.str_values(node)
            return values[0] if values is not None and len(values) == 1 else None
        if isinstance(node, ast.BinOp):
            return self._fold_binop(node)
        if isinstance(node, ast.JoinedStr):
            pieces: list[str | None] = []
            for part in node.values:
                if not isinstance(part, ast.FormattedValue):
                    pieces.append(self.fold_str(part))
                elif part.conversion == -1 and part.format_spec is None:
                    pieces.append(self.fold_str(part.value))
                else:
                    return None
            return _bounded_join("", pieces)
        if isinstance(node, ast.Subscript):
            return self._fold_subscript(node)
        if isinstance(node, ast.Call):
            return self._fold_call(node)
        return None

    def _fold_binop(self, node: ast.BinOp) -> str | None:
        if isinstance(node.op, ast.Add):
            leaves: list[ast.expr] = []
            stack: list[ast.expr] = [node]
            while stack:
                current = stack.pop()
                if isinstance(current, ast.BinOp) and isinstance(current.op, ast.Add):
                    stack.extend((current.right, current.left))
                else:
                    leaves.append(current)
            return _bounded_join("", [self.fold_str(leaf) for leaf in leaves])
        if isinstance(node.op, ast.Mult):
            for text_node, count_node in ((node.left, node.right), (node.right, node.left)):
                count = _constant_int(count_node)
                if count is None or not 0 <= count <= _MAX_FOLDED_LENGTH:
                    continue
                text = self.fold_str(text_node)
                if text is not None and len(text) * count <= _MAX_FOLDED_LENGTH:
                    return text * count
        return None

    def _fold_subscript(self, node: ast.Subscript) -> str | None:
        text = self.fold_str(node.value)
        if text is None:
            return None
        index = node.slice
        if isinstance(index, ast.Slice):
            bounds: list[int | None] = []
            for bound in (index.lower, index.upper, index.step):
                value = None if bound is None else _constant_int(bound)
                if bound is not None and value is None:
                    return None
                bounds.append(value)
            if bounds[2] == 0:
                return None
            return text[bounds[0] : bounds[1] : bounds[2]]
        position = _constant_int(index)
        if position is None or not -len(text) <= position < len(text):
            return None
        return text[position]

    def _fold_call(self, node: ast.Call) -> str | None:
        func = node.func
        if isinstance(func, ast.Attribute):
            if func.attr == "join" and len(node.args) == 1 and not node.keywords:
                separator = self.fold_str(func.value)
                items = node.args[0]
                if separator is None or not isinstance(items, ast.List | ast.Tuple):
                    return None
                return _bounded_join(separator, [self.fold_str(item) for item in items.elts])
            if func.attr in _STR_METHODS and not node.args and not node.keywords:
                text = self.fold_str(func.value)
                if text is None or func.attr == "decode":
                    return text
                result: str = getattr(text, func.attr)()
                return result
            if func.attr == "replace" and len(node.args) == 2 and not node.keywords:
                text = self.fold_str(func.value)
                old, new = self.fold_str(node.args[0]), self.fold_str(node.args[1])
                if text is None or not old or new is None:
                    return None
                if len(text) + text.count(old) * len(new) > _MAX_FOLDED_LENGTH:
                    return None
                return text.replace(old, new)
            return None
        quals = self.qualnames(func)
        if len(node.args) == 1 and not node.keywords:
            if "builtins.chr" in quals:
                code = _constant_int(node.args[0])
                return chr(code) if code is not None and 0 <= code < 0x110000 else None
            if "builtins.str" in quals:
                return self.fold_str(node.args[0])
        return None

    def magnitude(self, node: ast.expr) -> float | None:
        """log10 of the absolute value of a constant integer expression (None if it isn't one);
        ``-inf`` for zero."""
        key = id(node)
        if key in self._mag_memo:
            return self._mag_memo[key]
        try:
            result = self._magnitude_uncached(node)
        except RecursionError:
            result = None
        self._mag_memo[key] = result
        return result

    def _magnitude_uncached(self, node: ast.expr) -> float | None:
        if isinstance(node, ast.Constant):
            if type(node.value) is not int:
                return None
            return math.log10(abs(node.value)) if node.value else -math.inf
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                return None
            return self.magnitude(node.operand)
        if not isinstance(node, ast.BinOp):
            return None
        left, right = self.magnitude(node.left), self.magnitude(node.right)
        if left is None or right is None:
            return None
        op = node.op
        if isinstance(op, ast.Add | ast.Sub | ast.BitOr | ast.BitXor):
            return max(left, right) + _LOG10_2
        if isinstance(op, ast.Mult):
            return left + right
        if isinstance(op, ast.Mod | ast.BitAnd):
            return min(left, right)
        if isinstance(op, ast.FloorDiv | ast.RShift):
            return left
        if isinstance(op, ast.Pow):
            return power_magnitude(left, right, is_negative(node.right))
        if isinstance(op, ast.LShift):
            return left + value_from_magnitude(right) * _LOG10_2
        return None


def _constant_int(node: ast.expr) -> int | None:
    """The value of an integer literal, negated ones included."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant_int(node.operand)
        return None if inner is None else -inner
    return None


def is_negative(node: ast.expr) -> bool:
    """Whether ``node`` is a negative numeric literal (``-2``, ``--2`` is not)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return not is_negative(node.operand)
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and node.value < 0


def value_from_magnitude(magnitude: float) -> float:
    """The absolute value a magnitude stands for (``inf`` beyond floats)."""
    if magnitude == -math.inf:
        return 0.0
    return math.inf if magnitude > 300 else 10.0**magnitude


def power_magnitude(base: float, exponent: float, negative_exponent: bool) -> float:
    """log10 of ``b ** e`` from log10 of ``|b|`` and of ``|e|``."""
    if negative_exponent or base <= 0:
        return 0.0 if base > -math.inf else -math.inf
    return base * value_from_magnitude(exponent)


def _bounded_join(separator: str, pieces: list[str | None]) -> str | None:
    """``separator.join(pieces)`` unless a piece is unknown or the result would be too long
    to be a name or a path (folding must not let the code make the scanner build big strings)."""
    known = [piece for piece in pieces if piece is not None]
    if len(known) != len(pieces):
        return None
    if sum(map(len, known)) + len(separator) * len(known) > _MAX_FOLDED_LENGTH:
        return None
    return separator.join(known)

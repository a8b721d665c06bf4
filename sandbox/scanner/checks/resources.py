"""Constant expressions that would exhaust the sandbox (warnings): ``resource.huge_power`` for
integers over ``max_int_digits`` digits (``10**10**8``, ``pow``, ``<<``, ``math.factorial``),
``resource.huge_repeat`` for sequences or strings over ``max_repeat`` items (repetition,
``bytes(n)``, ``list(range(n))``, comprehensions over ``range(n)``, padding methods, format
widths and precisions). Sizes are estimated from magnitudes, never computed.

A bomb is reported once, at the outermost expression that first exceeds the limit: the
expressions built on it (``(10**10**8) + 1``) are not reported again.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from sandbox.scanner.checks.base import Checker, Context
from sandbox.scanner.folding import is_negative, power_magnitude, value_from_magnitude
from sandbox.scanner.formats import format_fields, percent_widths
from sandbox.scanner.report import WARNING

_PAD_METHODS = frozenset({"ljust", "rjust", "center", "zfill"})
_FORMAT_METHODS = frozenset({"format", "format_map", "vformat"})
_MATERIALIZERS = frozenset(
    f"builtins.{name}" for name in ("list", "tuple", "set", "frozenset", "sorted", "bytes")
)
_DIGITS = re.compile(r"\d+")


class Resources(Checker):
    calls = _MATERIALIZERS | {"builtins.pow", "builtins.bytearray", "math.factorial"}
    methods = _PAD_METHODS | _FORMAT_METHODS

    def __init__(self, ctx: Context) -> None:
        super().__init__(ctx)
        # Expressions already found to exceed a limit.
        self._bombs: set[int] = set()

    def handlers(self) -> Mapping[type[ast.AST], Callable[[Any], None]]:
        return {
            ast.BinOp: self._on_binop,
            ast.FormattedValue: self._on_formatted_value,
            ast.ListComp: self._on_comprehension,
            ast.SetComp: self._on_comprehension,
            ast.DictComp: self._on_comprehension,
        }

    def on_call(self, node: ast.Call, quals: frozenset[str]) -> None:
        func, args = node.func, node.args
        magnitude = self.ctx.values.magnitude
        max_repeat = self.ctx.policy.max_repeat
        if isinstance(func, ast.Attribute) and func.attr in _FORMAT_METHODS:
            template = self.ctx.values.fold_str(func.value)
            if template is not None:
                for _, spec in format_fields(template):
                    if spec:
                        self._check_spec_width(spec, node)
        if "builtins.pow" in quals and len(args) == 2 and not node.keywords:
            base, exponent = magnitude(args[0]), magnitude(args[1])
            if base is not None and exponent is not None:
                power = power_magnitude(base, exponent, is_negative(args[1]))
                self._check_huge_number(node, power, *args)
        elif "math.factorial" in quals and len(args) == 1:
            size = magnitude(args[0])
            if size is not None:
                digits = _factorial_digits(value_from_magnitude(size))
                self._check_huge_number(node, digits - 1, *args)
        elif quals & {"builtins.bytes", "builtins.bytearray"} and len(args) == 1:
            size = magnitude(args[0])
            if size is not None and value_from_magnitude(size) > max_repeat:
                self._report_repeat(node, value_from_magnitude(size))
        if quals & _MATERIALIZERS and len(args) == 1:
            length = self._range_size(args[0])
            if length is not None and length > max_repeat:
                self._report_repeat(node, length)
        if isinstance(func, ast.Attribute) and func.attr in _PAD_METHODS and args:
            size = magnitude(args[0])
            if size is not None and value_from_magnitude(size) > max_repeat:
                self._report_repeat(node, value_from_magnitude(size))

    def _on_binop(self, node: ast.BinOp) -> None:
        op = node.op
        if isinstance(op, ast.Pow | ast.LShift):
            self._check_huge_number(node, self.ctx.values.magnitude(node), node.left, node.right)
        elif isinstance(op, ast.Mult):
            self._check_repeat(node)
        elif isinstance(op, ast.Mod):
            template = self.ctx.values.fold_str(node.left)
            if template is not None and "%" in template:
                for spec in percent_widths(template):
                    self._check_spec_width(spec, node)

    def _on_formatted_value(self, node: ast.FormattedValue) -> None:
        spec = node.format_spec
        if isinstance(spec, ast.JoinedStr):
            for part in spec.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    self._check_spec_width(part.value, node)

    def _on_comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp) -> None:
        for generator in node.generators:
            size = self._range_size(generator.iter)
            if size is not None and size > self.ctx.policy.max_repeat:
                self._report_repeat(node, size)
                return

    def _check_spec_width(self, spec: str, node: ast.AST) -> None:
        max_repeat = self.ctx.policy.max_repeat
        for digits in _DIGITS.findall(spec):
            if len(digits) > 18 or int(digits) > max_repeat:
                reason = (
                    f"The format width or precision {_short(digits)} would build a string of "
                    f"more than {max_repeat:,} characters and can exhaust memory; "
                    "use a smaller width."
                )
                self.ctx.add("resource.huge_repeat", WARNING, node, reason)
                return

    def _check_huge_number(
        self, node: ast.AST, magnitude: float | None, *operands: ast.expr
    ) -> None:
        max_digits = self.ctx.policy.max_int_digits
        # Written so that a NaN magnitude (inf * 0) counts as small.
        if magnitude is None or not magnitude + 1 > max_digits:
            return
        already = any(id(operand) in self._bombs for operand in operands)
        self._bombs.add(id(node))
        if already:
            return
        size = "an astronomical number of" if magnitude > 1e15 else f"about {int(magnitude) + 1:,}"
        reason = (
            f"This integer would have {size} digits (the limit is {max_digits:,}); computing "
            "it can hang the sandbox until it times out. Use math.log10, floats, or "
            "pow(base, exp, mod) instead."
        )
        self.ctx.add("resource.huge_power", WARNING, node, reason)

    def _sequence_length(self, node: ast.expr) -> float | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes):
            return float(len(node.value))
        if isinstance(node, ast.List | ast.Tuple):
            return float(len(node.elts))
        if isinstance(node, ast.JoinedStr):
            constants = [v.value for v in node.values if isinstance(v, ast.Constant)]
            return float(max(1, sum(len(str(c)) for c in constants)))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
            for seq, count in ((node.left, node.right), (node.right, node.left)):
                length, magnitude = self._sequence_length(seq), self.ctx.values.magnitude(count)
                if length is not None and magnitude is not None:
                    return length * value_from_magnitude(magnitude)
        return None

    def _check_repeat(self, node: ast.BinOp) -> None:
        size = self._sequence_length(node)
        if size is None or size <= self.ctx.policy.max_repeat:
            return
        already = id(node.left) in self._bombs or id(node.right) in self._bombs
        self._bombs.add(id(node))
        if not already:
            self._report_repeat(node, size)

    def _report_repeat(self, node: ast.AST, size: float) -> None:
        shown = "an astronomical number of" if size > 1e15 else f"about {int(size):,}"
        reason = (
            f"This would build a sequence of {shown} items or characters (the limit is "
            f"{self.ctx.policy.max_repeat:,}) and can exhaust the sandbox's memory; build only "
            "what you need, or iterate lazily."
        )
        self.ctx.add("resource.huge_repeat", WARNING, node, reason)

    def _range_size(self, node: ast.expr) -> float | None:
        if not isinstance(node, ast.Call) or "builtins.range" not in self.ctx.names.qualnames(
            node.func
        ):
            return None
        if not node.args or len(node.args) > 3:
            return None
        bound = node.args[0] if len(node.args) == 1 else node.args[1]
        magnitude = self.ctx.values.magnitude(bound)
        return None if magnitude is None else value_from_magnitude(magnitude)


def _factorial_digits(n: float) -> float:
    """The number of digits of ``n!`` (Stirling's approximation)."""
    if n < 2:
        return 1.0
    if n > 1e300:
        return math.inf
    return n * math.log10(n / math.e) + 0.5 * math.log10(2 * math.pi * n) + 1


def _short(digits: str) -> str:
    return digits if len(digits) <= 20 else f"{digits[:10]}...({len(digits)} digits)"

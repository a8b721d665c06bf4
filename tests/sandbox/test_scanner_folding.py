"""The scanner's value folding on its own: the strings and integer sizes literal expressions
evaluate to, all candidates or none, and never more than the bounds allow."""

from __future__ import annotations

import ast
import math

import pytest

from sandbox.scanner.bindings import Bindings
from sandbox.scanner.folding import Folder
from sandbox.scanner.formats import field_lookups, format_fields, percent_widths
from sandbox.scanner.nodes import walk


def folder_and_last_expression(code: str) -> tuple[Folder, ast.expr]:
    """A folder that knows ``chr`` and ``str`` as builtins and nothing else about names."""
    tree = ast.parse(code)
    bindings = Bindings()
    bindings.collect(walk(tree))

    def qualnames(node: ast.expr) -> frozenset[str]:
        if isinstance(node, ast.Name) and node.id in {"chr", "str"}:
            return frozenset({f"builtins.{node.id}"})
        return frozenset()

    last = tree.body[-1]
    assert isinstance(last, ast.Expr)
    return Folder(bindings, qualnames), last.value


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("'sys' + 'tem'", ("system",)),
        ("'__slabolg__'[::-1]", ("__globals__",)),
        ("''.join(['__glo', 'bals__'])", ("__globals__",)),
        ("chr(115) + str(b'ys')", ("sys",)),
        ("n = 'a'\nn = 'b'\nn", ("a", "b")),
        ("n = 'a'\nn = name()\nn", None),
        ("n = n + 'x'\nn", None),
        ("f'{x}'", None),
        ("'x' * 10_001", None),
        ("s = '" + "x" * 6000 + "'\ns + s", None),
    ],
)
def test_str_values_are_every_candidate_or_none(
    code: str, expected: tuple[str, ...] | None
) -> None:
    folder, node = folder_and_last_expression(code)
    assert folder.str_values(node) == expected


@pytest.mark.parametrize(
    ("code", "digits"),
    [("10**100", 100.0), ("2**10", 10 * math.log10(2)), ("10**10**8", 1e8), ("0", -math.inf)],
)
def test_magnitude_is_log10_of_the_value_without_computing_it(code: str, digits: float) -> None:
    folder, node = folder_and_last_expression(code)
    assert folder.magnitude(node) == pytest.approx(digits)


def test_magnitude_is_none_for_what_is_not_a_constant_integer() -> None:
    for code in ("x ** 2", "2.0 ** 10", "not 3"):
        folder, node = folder_and_last_expression(code)
        assert folder.magnitude(node) is None


def test_format_fields_include_nested_specs_and_skip_broken_templates() -> None:
    template = "{0.__class__:{1.__globals__}} {x[k]:>10}"
    assert list(format_fields(template)) == [
        ("0.__class__", "{1.__globals__}"),
        ("1.__globals__", ""),
        ("x[k]", ">10"),
    ]
    assert list(format_fields("{0.__globals__")) == []
    assert list(field_lookups("0.__init__[x]")) == ["__init__", "x"]
    assert list(percent_widths("%-10s|%(name)5.3f|%%")) == ["10.", "5.3", "."]

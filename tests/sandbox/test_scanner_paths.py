"""The scanner's path concern on its own: which paths an expression may name, and how a path
or a literal prefix compares with the allowed roots."""

from __future__ import annotations

import ast

import pytest

from sandbox.scanner.bindings import Bindings
from sandbox.scanner.names import NameResolver
from sandbox.scanner.nodes import walk
from sandbox.scanner.paths import PathResolver, PathValue, WorkingDir, classify


def paths_of_last_expression(code: str, cwd: str | None = "/tmp") -> tuple[PathValue, ...] | None:
    tree = ast.parse(code)
    bindings = Bindings()
    calls = bindings.collect(walk(tree))
    names = NameResolver(bindings, getattr_functions=frozenset())
    resolver = PathResolver(bindings, names, names.values, WorkingDir(cwd).after(calls, names))
    last = tree.body[-1]
    assert isinstance(last, ast.Expr)
    return resolver.path_values(last.value)


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("'/tmp/x'", (PathValue("/tmp/x", True),)),
        (
            "from pathlib import Path\nPath('/tmp') / 'a' / 'b.txt'",
            (PathValue("/tmp/a/b.txt", True),),
        ),
        ("import os\nos.path.join('/tmp', name)", (PathValue("/tmp/", False),)),
        ("f'/tmp/{name}.csv'", (PathValue("/tmp/", False),)),
        ("'/data/%s' % name", (PathValue("/data/", False),)),
        ("p = '/a'\np = '/b'\np", (PathValue("/a", True), PathValue("/b", True))),
        ("import tempfile\ntempfile.mkdtemp()", (PathValue("/tmp/", False),)),
        (
            "from pathlib import Path\nPath('/etc/passwd').with_name('x').parent",
            (PathValue("/etc", True),),
        ),
        ("import os\nos.getcwd()", (PathValue("/tmp", True),)),
        ("import os\nos.chdir('/')\nos.getcwd()", (PathValue(".", True),)),
        ("import io\nio.BytesIO()", ()),
        ("3", ()),
        ("def f(p):\n    pass\np", None),
        ("read_path_from_somewhere()", None),
    ],
)
def test_path_values_names_every_candidate_or_says_unknown(
    code: str, expected: tuple[PathValue, ...] | None
) -> None:
    assert paths_of_last_expression(code) == expected


@pytest.mark.parametrize(
    ("value", "roots", "working_dir", "verdict"),
    [
        (PathValue("/tmp/x", True), ("/tmp",), "/tmp", "inside"),
        (PathValue("/tmp", True), ("/tmp",), "/tmp", "inside"),
        (PathValue("/tmpfoo", True), ("/tmp",), "/tmp", "outside"),
        (PathValue("/tmp/../etc/x", True), ("/tmp",), "/tmp", "outside"),
        (PathValue("out.txt", True), ("/tmp",), "/tmp", "inside"),
        (PathValue("../etc/x", True), ("/tmp",), "/tmp", "outside"),
        (PathValue("out.txt", True), ("/tmp",), None, "relative"),
        (PathValue("/tmp/", False), ("/tmp",), "/tmp", "inside"),
        (PathValue("/tmp", False), ("/tmp",), "/tmp", "unverifiable"),
        (PathValue("/tmp/..", False), ("/tmp",), "/tmp", "unverifiable"),
        (PathValue("/", False), ("/tmp",), "/tmp", "unverifiable"),
        (PathValue("/etc/", False), ("/tmp",), "/tmp", "outside"),
        (PathValue("", False), ("/tmp",), "/tmp", "unverifiable"),
        (PathValue("/usr/lib/python3.11/json/x.py", True), ("/usr/lib/python3*",), None, "inside"),
        (PathValue("/usr/lib/perl5/x", True), ("/usr/lib/python3*",), None, "outside"),
    ],
)
def test_classify_compares_by_component_and_leaves_open_prefixes_unverifiable(
    value: PathValue, roots: tuple[str, ...], working_dir: str | None, verdict: str
) -> None:
    assert classify(value, roots, working_dir) == verdict

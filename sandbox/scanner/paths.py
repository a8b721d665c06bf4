"""Paths: which file paths an expression may name, and whether they lie under allowed roots.

A path is known exactly (``"/tmp/x"``, ``Path("/tmp") / "x"``) or only by its literal prefix
(``f"/tmp/{name}"``: ``"/tmp/" + ...``); comparison is by path component after normalising
``..``, with shell-style globs allowed in the roots (``/usr/lib/python3*``).
"""

from __future__ import annotations

import ast
import fnmatch
import functools
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from sandbox.scanner.bindings import Bindings
from sandbox.scanner.folding import MAX_CANDIDATES, Folder
from sandbox.scanner.names import MAX_ALIAS_DEPTH, NameResolver
from sandbox.scanner.nodes import argument, memo_key

_PATH_CLASSES = frozenset(
    f"pathlib.{name}"
    for name in ("Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath")
)
_CHDIR_FUNCTIONS = frozenset({"os.chdir", "os.fchdir", "contextlib.chdir"})
_PATH_JOINERS = _PATH_CLASSES | {"os.path.join", "posixpath.join"}
_PATH_CWD_FUNCTIONS = frozenset(f"{name}.cwd" for name in _PATH_CLASSES)
_PATH_PASSTHROUGH = frozenset(
    {
        "os.path.abspath",
        "os.path.normpath",
        "os.path.realpath",
        "posixpath.abspath",
        "posixpath.normpath",
        "posixpath.realpath",
        "os.fspath",
        "os.fsencode",
        "os.fsdecode",
        "builtins.str",
    }
)
_NOT_PATHS = frozenset(
    {
        "io.BytesIO",
        "io.StringIO",
        "tempfile.TemporaryFile",
        "tempfile.NamedTemporaryFile",
        "tempfile.SpooledTemporaryFile",
    }
)
_TEMP_DIR_MAKERS = frozenset({"tempfile.mkdtemp", "tempfile.TemporaryDirectory"})
_CWD_FUNCTIONS = frozenset({"os.getcwd", "pathlib.Path.cwd", "pathlib.PosixPath.cwd"})
_KNOWN_PATHS = {"os.devnull": "/dev/null", "os.curdir": ".", "os.sep": "/"}
_PATH_DERIVING_METHODS = frozenset(
    {"with_name", "with_suffix", "with_stem", "resolve", "absolute", "joinpath", "expanduser"}
)

Verdict = Literal["inside", "outside", "relative", "unverifiable"]


@dataclass(frozen=True)
class PathValue:
    """A path known exactly, or only by its literal prefix (the rest computed at run time)."""

    text: str
    exact: bool

    def shown(self) -> str:
        return repr(self.text) if self.exact else f"{self.text!r} + ..."


@dataclass(frozen=True)
class WorkingDir:
    """What relative paths resolve against: ``path``, None when unknown (the policy has none,
    or ``changed``: the code changes directory)."""

    path: str | None
    changed: bool = False

    def after(self, calls: list[ast.Call], names: NameResolver) -> WorkingDir:
        """This working directory, or an unknown one if any of ``calls`` may change it."""
        if any(names.qualnames(call.func) & _CHDIR_FUNCTIONS for call in calls):
            return WorkingDir(None, changed=True)
        return self


def classify(value: PathValue, roots: tuple[str, ...], working_dir: str | None) -> Verdict:
    """``inside`` one of ``roots``, ``outside`` all of them, ``relative`` (no working dir to
    resolve against) or ``unverifiable`` (a literal prefix that leaves the answer to the
    computed rest)."""
    text = value.text
    if not value.exact:
        if not text:
            return "unverifiable"
        # Only the directory part of a prefix is settled; an unfinished last component could
        # still become anything, including "..".
        cut = text.rfind("/")
        tail = text[cut + 1 :]
        text = text[: cut + 1]
        if tail in {".", ".."}:
            text += ".."
    if not text.startswith("/"):
        if working_dir is None:
            return "relative"
        text = posixpath.join(working_dir, text)
    parts = _parts(text)
    result: Verdict = "outside"
    for root in roots:
        relation = _relation(parts, _parts(root))
        if relation == "inside":
            return "inside"
        if relation == "ancestor" and not value.exact:
            result = "unverifiable"
    return result


@functools.lru_cache(maxsize=1024)
def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in posixpath.normpath(path).split("/") if part)


def _relation(parts: tuple[str, ...], root: tuple[str, ...]) -> str:
    matched = all(fnmatch.fnmatchcase(p, r) for p, r in zip(parts, root, strict=False))
    if not matched:
        return "outside"
    return "inside" if len(parts) >= len(root) else "ancestor"


class PathResolver:
    """The paths the expressions of one scan may name. Every result is memoised (names by
    identifier, other nodes by identity); a path defined through itself is unknown."""

    def __init__(
        self, bindings: Bindings, names: NameResolver, values: Folder, cwd: WorkingDir
    ) -> None:
        self.bindings = bindings
        self.names = names
        self.values = values
        self.cwd = cwd
        self._path_memo: dict[int | str, tuple[PathValue, ...] | None] = {}
        self._pathlike_memo: dict[int | str, bool] = {}

    def path_values(self, node: ast.expr) -> tuple[PathValue, ...] | None:
        """The paths ``node`` may name; ``()`` when it is not a path at all (a file descriptor
        or an in-memory file), None when it is computed beyond recognition."""
        try:
            return self._path_values_at(node, 0)
        except RecursionError:
            return None

    def is_pathlike(self, node: ast.expr) -> bool:
        """Whether ``node`` is known to be a ``pathlib`` path."""
        key = memo_key(node)
        if key in self._pathlike_memo:
            return self._pathlike_memo[key]
        self._pathlike_memo[key] = False  # a path defined through itself is not known
        result = self._is_pathlike_uncached(node)
        self._pathlike_memo[key] = result
        return result

    def _is_pathlike_uncached(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in _PATH_DERIVING_METHODS:
                return self.is_pathlike(func.value)
            quals = self.names.qualnames(func)
            return bool(quals & _PATH_CLASSES or quals & _PATH_CWD_FUNCTIONS)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self.is_pathlike(node.left)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            return self.is_pathlike(node.value)
        if isinstance(node, ast.Name):
            bindings = self.bindings.literal_bindings(node.id)
            return bool(bindings) and all(self.is_pathlike(b) for b in bindings or ())
        return False

    def _path_values_at(self, node: ast.expr, depth: int) -> tuple[PathValue, ...] | None:
        key = memo_key(node)
        if key in self._path_memo:
            return self._path_memo[key]
        self._path_memo[key] = None  # a path defined through itself is unknown
        result = None if depth > MAX_ALIAS_DEPTH else self._path_values_uncached(node, depth + 1)
        self._path_memo[key] = result
        return result

    def _path_values_uncached(self, node: ast.expr, depth: int) -> tuple[PathValue, ...] | None:
        if isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes):
            return ()
        text = self.values.fold_str(node)
        if text is not None:
            return (PathValue(text, True),)
        if isinstance(node, ast.Name):
            bindings = self.bindings.literal_bindings(node.id)
            if bindings is None:
                return None
            collected: dict[PathValue, None] = {}
            for value in bindings:
                paths = self._path_values_at(value, depth)
                if paths is None:
                    return None
                collected.update(dict.fromkeys(paths))
                if len(collected) > MAX_CANDIDATES:
                    return None
            return tuple(collected)
        if isinstance(node, ast.JoinedStr):
            return self._joined_str_paths(node, depth)
        if isinstance(node, ast.BinOp):
            return self._binop_path(node, depth)
        if isinstance(node, ast.Attribute):
            for qualname in self.names.qualnames(node):
                if qualname in _KNOWN_PATHS:
                    return (PathValue(_KNOWN_PATHS[qualname], True),)
            if node.attr == "parent" and self.is_pathlike(node.value):
                return self._map_paths(node.value, depth, _parent)
            return None
        if isinstance(node, ast.Call):
            return self._call_path(node, depth)
        return None

    def _map_paths(
        self, node: ast.expr, depth: int, change: Callable[[PathValue], PathValue]
    ) -> tuple[PathValue, ...] | None:
        paths = self._path_values_at(node, depth)
        if paths is None:
            return None
        return tuple(change(path) for path in paths)

    def _joined_str_paths(self, node: ast.JoinedStr, depth: int) -> tuple[PathValue, ...] | None:
        results: tuple[PathValue, ...] | None = (PathValue("", True),)
        for part in node.values:
            pieces: tuple[PathValue, ...] | None = None
            if not isinstance(part, ast.FormattedValue):
                pieces = self._path_values_at(part, depth)
            elif part.conversion == -1 and part.format_spec is None:
                pieces = self._path_values_at(part.value, depth)
            results = _combine(_concat, results or (), pieces)
        return results

    def _binop_path(self, node: ast.BinOp, depth: int) -> tuple[PathValue, ...] | None:
        if isinstance(node.op, ast.Mod):
            template = self.values.fold_str(node.left)
            if template is None:
                return None
            return (PathValue(template.partition("%")[0], False),)
        if not isinstance(node.op, ast.Add | ast.Div):
            return None
        lefts = self._path_values_at(node.left, depth)
        if not lefts:
            return None
        rights = self._path_values_at(node.right, depth)
        return _combine(_concat if isinstance(node.op, ast.Add) else _join, lefts, rights)

    def _call_path(self, call: ast.Call, depth: int) -> tuple[PathValue, ...] | None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            template = self.values.fold_str(func.value)
            if template is not None:
                return (PathValue(template.partition("{")[0], False),)
        if isinstance(func, ast.Attribute) and func.attr == "fileno":
            return ()
        if (
            isinstance(func, ast.Attribute)
            and func.attr in _PATH_DERIVING_METHODS
            and self.is_pathlike(func.value)
        ):
            return self._derived_path(call, func, depth)
        quals = self.names.qualnames(func)
        if quals & _NOT_PATHS:
            return ()
        if "tempfile.gettempdir" in quals:
            return (PathValue("/tmp", True),)  # noqa: S108
        if quals & _TEMP_DIR_MAKERS:
            directory = argument(call, -1, "dir")
            if directory is None:
                return (PathValue("/tmp/", False),)  # noqa: S108
            return self._map_paths(directory, depth, lambda p: _join(p, None))
        if quals & _CWD_FUNCTIONS:
            return (PathValue(self.cwd.path or ".", True),)
        if quals & _PATH_PASSTHROUGH and len(call.args) == 1:
            return self._path_values_at(call.args[0], depth)
        if quals & _PATH_JOINERS:
            if any(isinstance(arg, ast.Starred) for arg in call.args):
                return None
            if not call.args:
                return (PathValue(".", True),)
            return self._joined_paths(call.args, depth)
        return None

    def _joined_paths(self, args: list[ast.expr], depth: int) -> tuple[PathValue, ...] | None:
        results = self._path_values_at(args[0], depth)
        for arg in args[1:]:
            if not results:
                return None
            results = _combine(_join, results, self._path_values_at(arg, depth))
        return results

    def _derived_path(
        self, call: ast.Call, func: ast.Attribute, depth: int
    ) -> tuple[PathValue, ...] | None:
        if func.attr == "joinpath":
            return self._joined_paths([func.value, *call.args], depth)
        if func.attr in {"resolve", "absolute", "expanduser"}:
            return self._path_values_at(func.value, depth)
        new = self.values.fold_str(call.args[0]) if len(call.args) == 1 else None
        if new is None:
            return None
        return self._map_paths(func.value, depth, lambda p: _rename(p, func.attr, new))


def _join(left: PathValue, right: PathValue | None) -> PathValue:
    if right is not None and right.text.startswith("/"):
        return right
    if not left.exact:
        return left
    if right is None:
        return PathValue(left.text.rstrip("/") + "/", False)
    return PathValue(posixpath.join(left.text, right.text), right.exact)


def _concat(left: PathValue, right: PathValue | None) -> PathValue:
    if not left.exact:
        return left
    if right is None:
        return PathValue(left.text, False)
    return PathValue(left.text + right.text, right.exact)


def _combine(
    combine: Callable[[PathValue, PathValue | None], PathValue],
    lefts: tuple[PathValue, ...],
    rights: tuple[PathValue, ...] | None,
) -> tuple[PathValue, ...] | None:
    """Every ``combine(left, right)``; an unknown or non-path right side counts as computed.
    None (unknown) when there are too many combinations to follow."""
    results = tuple(
        dict.fromkeys(combine(left, right) for left in lefts for right in (rights or (None,)))
    )
    return results if results and len(results) <= MAX_CANDIDATES else None


def _parent(path: PathValue) -> PathValue:
    if not path.exact:
        return path
    return PathValue(posixpath.dirname(path.text.rstrip("/")) or ".", True)


def _rename(path: PathValue, method: str, new: str) -> PathValue:
    if not path.exact:
        return path
    head, name = posixpath.split(path.text.rstrip("/"))
    if method == "with_name":
        name = new
    elif method == "with_suffix":
        name = posixpath.splitext(name)[0] + new
    else:
        name = new + posixpath.splitext(name)[1]
    return PathValue(posixpath.join(head, name), True)

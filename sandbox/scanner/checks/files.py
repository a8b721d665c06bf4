"""File access outside the allowed paths (blocked): ``fs.write_outside_tmp`` for a write,
create, delete, rename or chmod whose target is not known to be under
``write_allowed_paths``; ``fs.read_outside_allowed`` for a read of a path known to lie
outside every ``read_allowed_paths`` entry.

Which standard-library functions and ``pathlib`` methods read or write which of their
arguments is the fixed table below, not part of the policy.
"""

from __future__ import annotations

import ast
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

from sandbox.scanner.checks.base import Checker
from sandbox.scanner.nodes import argument
from sandbox.scanner.paths import classify
from sandbox.scanner.report import BLOCKED
from sandbox.scanner.rules import display

_OPEN_MODE_WRITES = frozenset("wax+")
_DBM_FLAG_WRITES = frozenset("wcn")


@dataclass(frozen=True)
class _Opener:
    """Where a function that opens a file takes its path and mode (position, keyword)."""

    path: tuple[int, str]
    mode: tuple[int, str]
    default_mode: str
    write_chars: frozenset[str] = _OPEN_MODE_WRITES


_OPENERS: dict[str, _Opener] = {
    "builtins.open": _Opener((0, "file"), (1, "mode"), "r"),
    "io.open": _Opener((0, "file"), (1, "mode"), "r"),
    "io.FileIO": _Opener((0, "file"), (1, "mode"), "r"),
    "codecs.open": _Opener((0, "filename"), (1, "mode"), "r"),
    "gzip.open": _Opener((0, "filename"), (1, "mode"), "rb"),
    "gzip.GzipFile": _Opener((0, "filename"), (1, "mode"), "rb"),
    "bz2.open": _Opener((0, "filename"), (1, "mode"), "rb"),
    "bz2.BZ2File": _Opener((0, "filename"), (1, "mode"), "r"),
    "lzma.open": _Opener((0, "filename"), (1, "mode"), "rb"),
    "lzma.LZMAFile": _Opener((0, "filename"), (1, "mode"), "r"),
    "tarfile.open": _Opener((0, "name"), (1, "mode"), "r"),
    "tarfile.TarFile": _Opener((0, "name"), (1, "mode"), "r"),
    "zipfile.ZipFile": _Opener((0, "file"), (1, "mode"), "r"),
    "shelve.open": _Opener((0, "filename"), (1, "flag"), "c", _DBM_FLAG_WRITES),
    "dbm.open": _Opener((0, "file"), (1, "flag"), "r", _DBM_FLAG_WRITES),
}

# Functions whose listed arguments are written (created, changed or removed).
_WRITERS: dict[str, tuple[tuple[int, str], ...]] = {
    **{
        f"os.{name}": ((0, "path"),)
        for name in (
            "remove",
            "unlink",
            "rmdir",
            "mkdir",
            "chmod",
            "lchmod",
            "chown",
            "lchown",
            "truncate",
            "utime",
            "mkfifo",
            "mknod",
            "chflags",
            "lchflags",
            "setxattr",
            "removexattr",
        )
    },
    "os.removedirs": ((0, "name"),),
    "os.makedirs": ((0, "name"),),
    "os.rename": ((0, "src"), (1, "dst")),
    "os.renames": ((0, "old"), (1, "new")),
    "os.replace": ((0, "src"), (1, "dst")),
    "os.link": ((0, "src"), (1, "dst")),
    "os.symlink": ((0, "src"), (1, "dst")),
    **{
        f"shutil.{name}": ((1, "dst"),)
        for name in ("copy", "copy2", "copyfile", "copytree", "copymode", "copystat")
    },
    "shutil.move": ((0, "src"), (1, "dst")),
    "shutil.rmtree": ((0, "path"),),
    "shutil.chown": ((0, "path"),),
    "shutil.make_archive": ((0, "base_name"),),
    "shutil.unpack_archive": ((1, "extract_dir"),),
    **{
        f"tempfile.{name}": ((-1, "dir"),)
        for name in (
            "mkstemp",
            "mkdtemp",
            "TemporaryFile",
            "NamedTemporaryFile",
            "SpooledTemporaryFile",
            "TemporaryDirectory",
        )
    },
}

# Functions whose listed arguments are read (opened, listed or copied from).
_READERS: dict[str, tuple[tuple[int, str], ...]] = {
    "os.listdir": ((0, "path"),),
    "os.scandir": ((0, "path"),),
    "os.walk": ((0, "top"),),
    "os.fwalk": ((0, "top"),),
    "os.readlink": ((0, "path"),),
    "glob.glob": ((0, "pathname"),),
    "glob.iglob": ((0, "pathname"),),
    "linecache.getline": ((0, "filename"),),
    "linecache.getlines": ((0, "filename"),),
    **{
        f"shutil.{name}": ((0, "src"),)
        for name in ("copy", "copy2", "copyfile", "copytree", "copymode", "copystat")
    },
    "shutil.make_archive": ((2, "root_dir"),),
    "shutil.unpack_archive": ((0, "filename"),),
}

_PATH_WRITE_METHODS = frozenset(
    {
        "write_text",
        "write_bytes",
        "touch",
        "mkdir",
        "unlink",
        "rmdir",
        "chmod",
        "lchmod",
        "rename",
        "replace",
        "symlink_to",
        "hardlink_to",
        "link_to",
    }
)
# Methods whose names only pathlib uses: checked even when the receiver is not known to be a Path.
_DISTINCT_PATH_WRITE_METHODS = frozenset(
    {"write_text", "write_bytes", "touch", "symlink_to", "hardlink_to", "link_to"}
)
_PATH_TWO_PATH_METHODS = frozenset({"rename", "replace", "symlink_to", "hardlink_to", "link_to"})
_PATH_READ_METHODS = frozenset(
    {"read_text", "read_bytes", "iterdir", "glob", "rglob", "readlink", "walk"}
)

_OS_WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC", "O_TMPFILE"})
_OS_WRITE_FLAG_BITS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # Linux values of the flags above


class FileAccess(Checker):
    calls = frozenset({*_OPENERS, *_WRITERS, *_READERS, "os.open"})
    methods = _PATH_WRITE_METHODS | _PATH_READ_METHODS | {"open"}

    def on_call(self, node: ast.Call, quals: frozenset[str]) -> None:
        if isinstance(node.func, ast.Attribute):
            self._check_path_method(node, node.func)
        for qualname in quals & self.calls:
            self._check_file_call(node, qualname)

    def _check_path_method(self, node: ast.Call, func: ast.Attribute) -> None:
        method = func.attr
        if method not in self.methods:
            return
        receiver = func.value
        label = f"Path.{method}()"
        pathlike = self.ctx.paths.is_pathlike(receiver)
        if method in _PATH_WRITE_METHODS and (
            pathlike
            or (method in _DISTINCT_PATH_WRITE_METHODS and not self.ctx.names.qualnames(func))
        ):
            self._check_write(receiver, node, label)
            if method in _PATH_TWO_PATH_METHODS and node.args:
                self._check_write(node.args[0], node, label)
        elif method in _PATH_READ_METHODS and pathlike:
            self._check_read(receiver, node, label)
        elif method == "open" and pathlike:
            modes = self._modes(argument(node, 0, "mode"), "r")
            if modes is not None and any(set(mode) & _OPEN_MODE_WRITES for mode in modes):
                self._check_write(receiver, node, label)
            else:
                self._check_read(receiver, node, label)

    def _check_file_call(self, node: ast.Call, qualname: str) -> None:
        label = f"{display(qualname)}()"
        opener = _OPENERS.get(qualname)
        if opener is not None:
            path = argument(node, *opener.path)
            if path is None:
                return
            modes = self._modes(argument(node, *opener.mode), opener.default_mode)
            writes = modes is not None and any(set(m) & opener.write_chars for m in modes)
            if writes:
                self._check_write(path, node, label)
            else:
                self._check_read(path, node, label)
            return
        if qualname == "os.open":
            path = argument(node, 0, "path")
            if path is None:
                return
            if self._flags_write(argument(node, 1, "flags")):
                self._check_write(path, node, label)
            else:
                self._check_read(path, node, label)
            return
        for position, keyword in _WRITERS.get(qualname, ()):
            target = argument(node, position, keyword)
            if target is not None:
                self._check_write(target, node, label)
        for position, keyword in _READERS.get(qualname, ()):
            target = argument(node, position, keyword)
            if target is not None:
                self._check_read(target, node, label)

    def _modes(self, node: ast.expr | None, default: str) -> tuple[str, ...] | None:
        return (default,) if node is None else self.ctx.values.str_values(node)

    def _flags_write(self, flags: ast.expr | None, seen: set[str] | None = None) -> bool:
        """Whether ``os.open`` flags include a write flag, following names bound to flags."""
        if flags is None:
            return False
        seen = set() if seen is None else seen
        for sub in ast.walk(flags):
            if isinstance(sub, ast.Name):
                if sub.id in _OS_WRITE_FLAGS:
                    return True
                if sub.id in seen:
                    continue
                seen.add(sub.id)
                bindings = self.ctx.bindings.literal_bindings(sub.id) or ()
                if any(self._flags_write(value, seen) for value in bindings):
                    return True
            elif (isinstance(sub, ast.Attribute) and sub.attr in _OS_WRITE_FLAGS) or (
                isinstance(sub, ast.Constant)
                and type(sub.value) is int
                and sub.value & _OS_WRITE_FLAG_BITS
            ):
                return True
        return False

    def _check_write(self, target: ast.expr, node: ast.AST, label: str) -> None:
        values = self.ctx.paths.path_values(target)
        if values == ():
            return
        roots = self.ctx.policy.write_allowed_paths
        cwd = self.ctx.paths.cwd
        allowed = _human_list(roots)
        example = f"{roots[0].rstrip('/')}/out.txt"
        if values is None:
            self._write_unverifiable(node, label, allowed, example)
            return
        for value in values:
            verdict = classify(value, roots, cwd.path)
            if verdict == "outside":
                name = posixpath.basename(value.text.rstrip("/")) or "out.txt"
                suggestion = f"{roots[0].rstrip('/')}/{name}" if value.exact else example
                reason = (
                    f"Writing to {value.shown()} with {label} is blocked: code may only write "
                    f"under {allowed}. Use a path such as {suggestion!r} instead."
                )
                self.ctx.add("fs.write_outside_tmp", BLOCKED, node, reason)
            elif verdict == "relative":
                why = (
                    "the code changes the working directory"
                    if cwd.changed
                    else f"the working directory is not known to be under {allowed}"
                )
                reason = (
                    f"Writing to the relative path {value.shown()} with {label} is blocked: "
                    f"{why}. Use an absolute path such as {example!r} instead."
                )
                self.ctx.add("fs.write_outside_tmp", BLOCKED, node, reason)
            elif verdict == "unverifiable":
                self._write_unverifiable(node, label, allowed, example)

    def _write_unverifiable(self, node: ast.AST, label: str, allowed: str, example: str) -> None:
        reason = (
            f"{label} writes to a path computed at run time, so it can't be verified to be under "
            f"{allowed}. Write to a literal path such as {example!r} (or an f-string that "
            f"starts with '{example.rpartition('/')[0]}/')."
        )
        self.ctx.add("fs.write_outside_tmp", BLOCKED, node, reason)

    def _check_read(self, target: ast.expr, node: ast.AST, label: str) -> None:
        values = self.ctx.paths.path_values(target)
        if not values:
            return
        roots = self.ctx.policy.read_allowed_paths
        for value in values:
            if classify(value, roots, self.ctx.paths.cwd.path) == "outside":
                reason = (
                    f"Reading {value.shown()} with {label} is blocked: code may only read under "
                    f"{_human_list(roots)}. Work with files under /tmp instead."
                )
                self.ctx.add("fs.read_outside_allowed", BLOCKED, node, reason)


def _human_list(items: Iterable[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]

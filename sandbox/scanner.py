"""AST safety scan of model-written Python, run before the code reaches the sandbox.

The Docker container is the security boundary. This scan is not one: it rejects clearly
dangerous code early, with a reason the language model can act on, and lets everything else
through to the container. It is a pure module (standard library only, no Django, no Docker).

``scan(code, policy)`` never raises for any ``str`` input and never executes the code. It
resolves names flow-insensitively: an alias bound anywhere (``import os as o``,
``s = os.system``, ``from os import *``) counts everywhere in the code.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import fnmatch
import functools
import math
import posixpath
import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "BLOCKED",
    "DEFAULT_POLICY",
    "WARNING",
    "Finding",
    "Level",
    "ScanPolicy",
    "ScanReport",
    "scan",
]

Level = Literal["blocked", "warning"]
BLOCKED: Level = "blocked"
WARNING: Level = "warning"

CLEAN_TEXT = "No safety issues detected."


@dataclass(frozen=True)
class Finding:
    """One rule match. ``line`` is 1-based (0 for the whole input), ``col`` a 0-based offset."""

    rule_id: str
    level: Level
    line: int
    col: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _sort_key(finding: Finding) -> tuple[int, int, int, str]:
    return (0 if finding.level == BLOCKED else 1, finding.line, finding.col, finding.rule_id)


@dataclass(frozen=True)
class ScanReport:
    """The findings of one scan: blocked ones first, then warnings, each group by line.

    ``omitted`` counts findings left out because of ``ScanPolicy.max_report_findings``; they
    are never blocked ones unless more blocked findings than the cap were found.
    """

    findings: tuple[Finding, ...] = ()
    omitted: int = 0

    @property
    def blocked(self) -> bool:
        """True when the code must not run."""
        return any(f.level == BLOCKED for f in self.findings)

    @property
    def warnings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.level == WARNING)

    @property
    def text(self) -> str:
        """The report as the model sees it; exactly ``CLEAN_TEXT`` when there is nothing."""
        if not self.findings:
            return CLEAN_TEXT
        header = "Safety check BLOCKED:" if self.blocked else "Safety check WARNING:"
        lines = [header]
        for f in sorted(self.findings, key=_sort_key):
            lines.append(f"  [{f.level.upper()}] (line {f.line}) {f.reason}")
        if self.omitted:
            lines.append(f"  ... {self.omitted} more finding(s) not shown")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "text": self.text,
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True)
class ScanPolicy:
    """What the scan blocks or warns about. Every field is configurable.

    Names are fully qualified (``os.system``, ``asyncio.open_connection``); builtins are
    spelled ``builtins.eval``. A module entry covers its submodules and everything in it
    (``urllib.request`` covers ``urllib.request.urlopen``) but not its parent package
    (``urllib.parse`` stays allowed). Allowed paths are absolute; a component may be a glob
    (``/usr/lib/python3*``); comparison is by path component after normalising ``..``.
    """

    process_modules: frozenset[str] = frozenset(
        {
            "subprocess",
            "_posixsubprocess",
            "pty",
            "multiprocessing",
            "_multiprocessing",
            "concurrent.futures.process",
            "posix",
            "nt",
            "pexpect",
            "sh",
            "webbrowser",
        }
    )
    process_functions: frozenset[str] = frozenset(
        {
            "os.system",
            "os.popen",
            *(f"os.exec{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
            *(f"os.spawn{suffix}" for suffix in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
            "os.fork",
            "os.forkpty",
            "os.posix_spawn",
            "os.posix_spawnp",
            "os.startfile",
            "asyncio.create_subprocess_exec",
            "asyncio.create_subprocess_shell",
            "asyncio.subprocess",
            "concurrent.futures.ProcessPoolExecutor",
        }
    )
    process_methods: frozenset[str] = frozenset({"subprocess_exec", "subprocess_shell"})
    network_modules: frozenset[str] = frozenset(
        {
            "socket",
            "_socket",
            "ssl",
            "_ssl",
            "http.client",
            "http.server",
            "urllib.request",
            "urllib.robotparser",
            "urllib3",
            "requests",
            "httpx",
            "aiohttp",
            "ftplib",
            "smtplib",
            "smtpd",
            "telnetlib",
            "poplib",
            "imaplib",
            "nntplib",
            "xmlrpc",
            "socketserver",
            "asyncore",
            "asynchat",
            "wsgiref.simple_server",
            "websockets",
            "websocket",
            "paramiko",
            "pycurl",
            "grpc",
            "pip",
            "ensurepip",
        }
    )
    network_functions: frozenset[str] = frozenset(
        {
            "asyncio.open_connection",
            "asyncio.start_server",
            "asyncio.open_unix_connection",
            "asyncio.start_unix_server",
        }
    )
    network_methods: frozenset[str] = frozenset(
        {
            "create_connection",
            "create_server",
            "create_datagram_endpoint",
            "create_unix_connection",
            "create_unix_server",
            "sock_connect",
        }
    )
    native_modules: frozenset[str] = frozenset(
        {"ctypes", "_ctypes", "cffi", "_cffi_backend", "mmap", "_testcapi", "_testinternalcapi"}
    )
    native_functions: frozenset[str] = frozenset()
    dunder_attributes: frozenset[str] = frozenset(
        {
            "__subclasses__",
            "__globals__",
            "__builtins__",
            "__code__",
            "__closure__",
            "__bases__",
            "__base__",
            "__mro__",
            "__loader__",
            "__self__",
        }
    )
    frame_attributes: frozenset[str] = frozenset(
        {
            "f_globals",
            "f_locals",
            "f_back",
            "f_builtins",
            "f_code",
            "f_trace",
            "gi_frame",
            "gi_code",
            "cr_frame",
            "cr_code",
            "ag_frame",
            "ag_code",
            "tb_frame",
            "tb_next",
            "co_code",
            "co_consts",
            "func_globals",
            "func_code",
            "func_closure",
        }
    )
    frame_functions: frozenset[str] = frozenset(
        {
            "inspect.currentframe",
            "inspect.stack",
            "inspect.trace",
            "inspect.getouterframes",
            "inspect.getinnerframes",
            "sys._getframe",
            "sys._current_frames",
            "sys._current_exceptions",
            "sys.settrace",
            "sys.setprofile",
            "threading.settrace",
            "threading.setprofile",
            "traceback.walk_stack",
        }
    )
    gc_functions: frozenset[str] = frozenset(
        {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
    )
    eval_functions: frozenset[str] = frozenset(
        {
            "builtins.eval",
            "builtins.exec",
            "builtins.compile",
            "pickle.load",
            "pickle.loads",
            "marshal.load",
            "marshal.loads",
            "runpy.run_path",
            "types.CodeType",
            "timeit.timeit",
            "timeit.repeat",
            "timeit.Timer",
            "cProfile.run",
            "profile.run",
            "pdb.run",
            "code.interact",
            "code.InteractiveConsole",
            "code.InteractiveInterpreter",
        }
    )
    import_functions: frozenset[str] = frozenset(
        {
            "builtins.__import__",
            "importlib.import_module",
            "importlib.__import__",
            "pkgutil.resolve_name",
            "runpy.run_module",
        }
    )
    getattr_functions: frozenset[str] = frozenset(
        {
            "builtins.getattr",
            "builtins.setattr",
            "builtins.delattr",
            "builtins.hasattr",
            "inspect.getattr_static",
        }
    )
    # The sandbox's /tmp is a private tmpfs inside the container, not the host's, and the
    # container's working directory (sandbox/backends/docker.py).
    write_allowed_paths: tuple[str, ...] = ("/tmp",)  # noqa: S108
    read_allowed_paths: tuple[str, ...] = (
        "/tmp",  # noqa: S108
        "/usr/lib/python3*",
        "/usr/local/lib/python3*",
    )
    working_dir: str | None = "/tmp"  # noqa: S108
    max_code_bytes: int = 100 * 1024
    max_int_digits: int = 10_000
    max_repeat: int = 10_000_000
    max_report_findings: int = 50
    disabled_rules: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("write_allowed_paths", "read_allowed_paths"):
            for path in getattr(self, name):
                if not isinstance(path, str) or not path.startswith("/"):
                    raise ValueError(f"ScanPolicy.{name} needs absolute paths, got {path!r}")
        if self.working_dir is not None and not (
            isinstance(self.working_dir, str) and self.working_dir.startswith("/")
        ):
            raise ValueError(f"ScanPolicy.working_dir must be absolute, got {self.working_dir!r}")
        for name in ("max_code_bytes", "max_int_digits", "max_repeat", "max_report_findings"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ScanPolicy.{name} must be a positive int, got {value!r}")

    def with_overrides(self, overrides: Mapping[str, Any]) -> ScanPolicy:
        """A copy with ``overrides`` applied, e.g. from a Django setting.

        A set or path field takes either a list (replacing the default) or
        ``{"add": [...], "remove": [...]}``; other fields take a plain value. Unknown keys and
        wrong types raise ``ValueError``.
        """
        known = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, Any] = {}
        for key, value in overrides.items():
            if key not in known:
                raise ValueError(
                    f"unknown ScanPolicy field {key!r}; known fields: {', '.join(sorted(known))}"
                )
            current = getattr(self, key)
            if isinstance(current, frozenset):
                changes[key] = frozenset(_merge_override(key, tuple(sorted(current)), value))
            elif isinstance(current, tuple):
                changes[key] = _merge_override(key, current, value)
            else:
                changes[key] = value
        return dataclasses.replace(self, **changes)


def _strings(key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(f"ScanPolicy.{key} takes a list of strings, got {value!r}")
    items = tuple(value)
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"ScanPolicy.{key} takes a list of strings, got {value!r}")
    return items


def _merge_override(key: str, current: tuple[str, ...], value: Any) -> tuple[str, ...]:
    if not isinstance(value, Mapping):
        return _strings(key, value)
    unknown = set(value) - {"add", "remove"}
    if unknown:
        raise ValueError(f"ScanPolicy.{key} override takes 'add' and 'remove', got {unknown}")
    removed = set(_strings(key, value.get("remove", ())))
    merged = [item for item in current if item not in removed]
    merged += [item for item in _strings(key, value.get("add", ())) if item not in merged]
    return tuple(merged)


DEFAULT_POLICY = ScanPolicy()


# --- the compiled rule table -------------------------------------------------------------


@dataclass(frozen=True)
class _Rule:
    rule_id: str
    level: Level
    reason: str


_CATEGORY_REASONS = {
    "process": (
        "{name} is blocked: the sandbox cannot start processes or run shell commands. "
        "Compute the result in Python instead."
    ),
    "network": (
        "{name} is blocked: network access is disabled in the sandbox. "
        "Work with data from the conversation or files under /tmp instead."
    ),
    "native": (
        "{name} is blocked: native code and raw memory access are disabled in the sandbox. "
        "Use pure Python and the standard library instead."
    ),
}
_FRAME_FUNCTION_REASON = (
    "{name} is blocked: frames and tracing expose the interpreter's globals and builtins, a "
    "known way out of a Python sandbox. Pass the values you need explicitly instead."
)
_GC_REASON = (
    "{name} is blocked: it hands out arbitrary live objects of the interpreter, a known way "
    "out of a Python sandbox. Keep references to the objects you need instead."
)
_EVAL_REASON = (
    "{name} runs code that can't be checked in advance; prefer ordinary Python "
    "(ast.literal_eval or json.loads for data). The code still runs."
)
_DUNDER_REASON = (
    "Access to {name} is blocked: it reaches interpreter internals (globals, builtins, code "
    "objects or the class tree), a known way out of a Python sandbox. Use the object's public "
    "interface instead."
)
_FRAME_ATTRIBUTE_REASON = (
    "Access to {name} is blocked: frames, tracebacks and code objects expose the "
    "interpreter's globals and builtins, a known way out of a Python sandbox. Pass the values "
    "you need explicitly instead."
)


@dataclass(frozen=True)
class _Compiled:
    names: dict[str, _Rule]
    methods: dict[str, _Rule]
    blocked_parents: frozenset[str]
    # Every qualified name a name or attribute check can act on.
    interesting: frozenset[str]
    # Every qualified function name a call check can act on.
    calls: frozenset[str]


@functools.lru_cache(maxsize=16)
def _compile(policy: ScanPolicy) -> _Compiled:
    names: dict[str, _Rule] = {}
    methods: dict[str, _Rule] = {}
    for qualname in policy.eval_functions:
        reason = _EVAL_REASON.format(name=_display(qualname))
        names[qualname] = _Rule("dynamic.eval", WARNING, reason)
    for qualname in policy.gc_functions:
        names[qualname] = _Rule("introspection.gc", BLOCKED, _GC_REASON.format(name=qualname))
    for qualname in policy.frame_functions:
        reason = _FRAME_FUNCTION_REASON.format(name=qualname)
        names[qualname] = _Rule("introspection.frame", BLOCKED, reason)
    groups: tuple[tuple[str, frozenset[str], frozenset[str]], ...] = (
        ("native", policy.native_modules | policy.native_functions, frozenset()),
        ("network", policy.network_modules | policy.network_functions, policy.network_methods),
        ("process", policy.process_modules | policy.process_functions, policy.process_methods),
    )
    for category, entries, method_names in groups:
        template = _CATEGORY_REASONS[category]
        for qualname in entries:
            reason = template.format(name=qualname)
            names[qualname] = _Rule(f"{category}.{qualname}", BLOCKED, reason)
        for method in method_names:
            reason = template.format(name=f".{method}()")
            methods[method] = _Rule(f"{category}.{method}", BLOCKED, reason)
    parents = {
        qualname.rsplit(".", i)[0]
        for qualname, rule in names.items()
        if rule.level == BLOCKED
        for i in range(1, qualname.count(".") + 1)
    }
    parents.add("builtins")
    interesting = frozenset(names) | policy.getattr_functions | policy.import_functions
    calls = interesting | _CHECKED_CALLS
    return _Compiled(names, methods, frozenset(parents), interesting, calls)


def _display(qualname: str) -> str:
    return qualname.removeprefix("builtins.")


# --- fixed tables: how standard-library functions touch the file system -------------------

_OPEN_MODE_WRITES = frozenset("wax+")
_DBM_FLAG_WRITES = frozenset("wcn")


@dataclass(frozen=True)
class _Opener:
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

_FILE_FUNCTIONS = frozenset({*_OPENERS, *_WRITERS, *_READERS, "os.open"})

_PATH_CLASSES = frozenset(
    f"pathlib.{name}"
    for name in ("Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath")
)
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
_CHDIR_FUNCTIONS = frozenset({"os.chdir", "os.fchdir", "contextlib.chdir"})
_CWD_FUNCTIONS = frozenset({"os.getcwd", "pathlib.Path.cwd", "pathlib.PosixPath.cwd"})
_KNOWN_PATHS = {"os.devnull": "/dev/null", "os.curdir": ".", "os.sep": "/"}

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
_PATH_DERIVING_METHODS = frozenset(
    {"with_name", "with_suffix", "with_stem", "resolve", "absolute", "joinpath", "expanduser"}
)

_OS_WRITE_FLAGS = frozenset({"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC", "O_TMPFILE"})
_OS_WRITE_FLAG_BITS = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000  # Linux values of the flags above

_VALUE_GETTERS = frozenset({"getattr", "getattr_static"})
_MODULE_RETURNING = frozenset(
    {
        "builtins.__import__",
        "importlib.__import__",
        "importlib.import_module",
        "sys.modules.get",
        "pkgutil.resolve_name",
    }
)
# Functions that run a string of Python code, and the keyword names of that string.
_DYNAMIC_EVALUATORS = frozenset(
    {
        "builtins.eval",
        "builtins.exec",
        "builtins.compile",
        "timeit.timeit",
        "timeit.repeat",
        "timeit.Timer",
        "cProfile.run",
        "profile.run",
        "pdb.run",
    }
)
_CODE_KEYWORDS = frozenset({"source", "stmt", "setup", "statement", "cmd"})
_MAX_EVAL_DEPTH = 3
_MAX_ALIAS_DEPTH = 64
_MAX_FOLDED_LENGTH = 10_000
_MAX_CANDIDATES = 32
_PAD_METHODS = frozenset({"ljust", "rjust", "center", "zfill"})
_MATERIALIZERS = frozenset(
    f"builtins.{name}" for name in ("list", "tuple", "set", "frozenset", "sorted", "bytes")
)
_STR_METHODS = frozenset(
    {"lower", "upper", "strip", "lstrip", "rstrip", "casefold", "swapcase", "title", "decode"}
)
# What the call handler looks at; other calls are skipped early.
_CHECKED_CALLS = frozenset(
    {
        *_MODULE_RETURNING,
        *_DYNAMIC_EVALUATORS,
        *_FILE_FUNCTIONS,
        *_MATERIALIZERS,
        "operator.attrgetter",
        "operator.methodcaller",
        "builtins.vars",
        "builtins.pow",
        "builtins.bytes",
        "builtins.bytearray",
        "math.factorial",
    }
)
_CHECKED_METHODS = frozenset(
    {
        "__getattribute__",
        "__import__",
        "format",
        "format_map",
        "vformat",
        "get_field",
        "open",
        *_PATH_WRITE_METHODS,
        *_PATH_READ_METHODS,
        *_PAD_METHODS,
    }
)
_BUILTIN_NAMES = frozenset(dir(builtins))
_FORMATTER = string.Formatter()
_FIELD_PART = re.compile(r"\.([^.\[]*)|\[([^\]]*)\]")
_DIGITS = re.compile(r"\d+")
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*)(?:\.(\d+))?[a-zA-Z%]")
_LOG10_2 = math.log10(2)


# --- paths ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _PathValue:
    """A path known exactly, or only by its literal prefix (the rest computed at run time)."""

    text: str
    exact: bool

    def shown(self) -> str:
        return repr(self.text) if self.exact else f"{self.text!r} + ..."


def _join(left: _PathValue, right: _PathValue | None) -> _PathValue:
    if right is not None and right.text.startswith("/"):
        return right
    if not left.exact:
        return left
    if right is None:
        return _PathValue(left.text.rstrip("/") + "/", False)
    return _PathValue(posixpath.join(left.text, right.text), right.exact)


def _combine(
    combine: Callable[[_PathValue, _PathValue | None], _PathValue],
    lefts: tuple[_PathValue, ...],
    rights: tuple[_PathValue, ...] | None,
) -> tuple[_PathValue, ...] | None:
    """Every ``combine(left, right)``; an unknown or non-path right side counts as computed.
    None (unknown) when there are too many combinations to follow."""
    results = tuple(
        dict.fromkeys(combine(left, right) for left in lefts for right in (rights or (None,)))
    )
    return results if results and len(results) <= _MAX_CANDIDATES else None


def _concat(left: _PathValue, right: _PathValue | None) -> _PathValue:
    if not left.exact:
        return left
    if right is None:
        return _PathValue(left.text, False)
    return _PathValue(left.text + right.text, right.exact)


@functools.lru_cache(maxsize=1024)
def _parts(path: str) -> tuple[str, ...]:
    return tuple(part for part in posixpath.normpath(path).split("/") if part)


def _relation(parts: tuple[str, ...], root: tuple[str, ...]) -> str:
    matched = all(fnmatch.fnmatchcase(p, r) for p, r in zip(parts, root, strict=False))
    if not matched:
        return "outside"
    return "inside" if len(parts) >= len(root) else "ancestor"


def _classify(value: _PathValue, roots: tuple[str, ...], working_dir: str | None) -> str:
    """``inside``, ``outside``, ``relative`` (no working dir to resolve against) or
    ``unverifiable`` (a literal prefix that leaves the answer to the computed rest)."""
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
    result = "outside"
    for root in roots:
        relation = _relation(parts, _parts(root))
        if relation == "inside":
            return "inside"
        if relation == "ancestor" and not value.exact:
            result = "unverifiable"
    return result


def _human_list(items: Iterable[str]) -> str:
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


# --- the scanner ----------------------------------------------------------------------------


def _constant_int(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _constant_int(node.operand)
        return None if inner is None else -inner
    return None


def _is_negative(node: ast.expr) -> bool:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return not _is_negative(node.operand)
    return isinstance(node, ast.Constant) and isinstance(node.value, int | float) and node.value < 0


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
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


# Fields that never hold child nodes worth visiting (names, flags, operator singletons).
_LEAF_FIELDS = frozenset(
    {"ctx", "op", "ops", "id", "attr", "arg", "name", "asname", "module", "level", "kind"}
    | {"conversion", "is_async", "type_comment", "simple", "rest", "tag"}
)
_CHILD_FIELDS: dict[type[ast.AST], tuple[str, ...]] = {ast.Constant: ()}


def _walk(tree: ast.AST) -> list[ast.AST]:
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


def _memo_key(node: ast.expr) -> int | str:
    """Names are memoised by identifier (every use of a name means the same bindings), other
    nodes by identity."""
    return node.id if isinstance(node, ast.Name) else id(node)


def _position(node: ast.AST) -> tuple[int, int]:
    return getattr(node, "lineno", 0), getattr(node, "col_offset", 0)


class _Scanner:
    """One scan of one tree. ``parent`` is the scan whose ``exec``/``eval`` string this is: the
    string runs in the same namespace, so it inherits the parent's bindings."""

    def __init__(self, policy: ScanPolicy, depth: int = 0, parent: _Scanner | None = None):
        self.policy = policy
        self.rules = _compile(policy)
        self.depth = depth
        self.findings: list[Finding] = []
        self.imports: dict[str, set[str]] = {}
        self.assigned: dict[str, list[ast.expr]] = {}
        self.rebound: set[str] = set()
        self.star_modules: list[str] = []
        self.call_funcs: set[int] = set()
        self.working_dir: str | None = policy.working_dir
        self.cwd_changed = False
        if parent is not None:
            self.imports = {name: set(quals) for name, quals in parent.imports.items()}
            self.assigned = {name: list(values) for name, values in parent.assigned.items()}
            self.rebound = set(parent.rebound)
            self.star_modules = list(parent.star_modules)
            self.working_dir, self.cwd_changed = parent.working_dir, parent.cwd_changed
        self._name_memo: dict[str, frozenset[str]] = {}
        self._resolving: set[str] = set()
        self._alias_depth = 0
        self._qual_memo: dict[int, frozenset[str]] = {}
        self._str_memo: dict[int, str | None] = {}
        self._mag_memo: dict[int, float | None] = {}
        self._name_str_memo: dict[str, tuple[str, ...] | None] = {}
        self._path_memo: dict[int | str, tuple[_PathValue, ...] | None] = {}
        self._pathlike_memo: dict[int | str, bool] = {}
        self._bombs: set[int] = set()
        self._handlers: dict[type[ast.AST], Callable[[Any], None]] = {
            ast.Import: self._on_import,
            ast.ImportFrom: self._on_import_from,
            ast.Name: self._on_name,
            ast.Attribute: self._on_attribute,
            ast.Subscript: self._on_subscript,
            ast.Call: self._on_call,
            ast.Constant: self._on_constant,
            ast.BinOp: self._on_binop,
            ast.FormattedValue: self._on_formatted_value,
            ast.ListComp: self._on_comprehension,
            ast.SetComp: self._on_comprehension,
            ast.DictComp: self._on_comprehension,
        }
        self._binders: dict[type[ast.AST], Callable[[Any, set[int]], None]] = {
            ast.Import: self._bind_import_statement,
            ast.ImportFrom: self._bind_import_from,
            ast.Assign: self._bind_assign,
            ast.AnnAssign: self._bind_single,
            ast.NamedExpr: self._bind_single,
            ast.withitem: self._bind_with,
            **dict.fromkeys(
                (
                    ast.arg,
                    ast.FunctionDef,
                    ast.AsyncFunctionDef,
                    ast.ClassDef,
                    ast.ExceptHandler,
                    ast.MatchAs,
                    ast.MatchStar,
                    ast.MatchMapping,
                ),
                self._bind_other,
            ),
        }

    # findings

    def add(self, rule_id: str, level: Level, node: ast.AST | None, reason: str) -> None:
        line, col = _position(node) if node is not None else (0, 0)
        self.findings.append(Finding(rule_id, level, line, col, reason))

    def add_rule(self, rule: _Rule, node: ast.AST) -> None:
        self.add(rule.rule_id, rule.level, node, rule.reason)

    # the two passes

    def run(self, tree: ast.AST) -> None:
        nodes = _walk(tree)
        calls = self._bind(nodes)
        if any(self._qualnames(call.func) & _CHDIR_FUNCTIONS for call in calls):
            # Relative paths no longer resolve against the known working directory.
            self.cwd_changed, self.working_dir = True, None
        handlers = self._handlers
        # Reversed breadth-first order visits children before parents, so the memoised
        # resolvers below never recurse deeply.
        for node in reversed(nodes):
            handler = handlers.get(type(node))
            if handler is not None:
                handler(node)

    def _bind(self, nodes: list[ast.AST]) -> list[ast.Call]:
        """First pass: record what every name may be bound to. Returns the calls."""
        handled: set[int] = set()
        calls: list[ast.Call] = []
        binders = self._binders
        call_funcs, rebound = self.call_funcs, self.rebound
        for node in nodes:
            if type(node) is ast.Name:
                if type(node.ctx) is not ast.Load and id(node) not in handled:
                    rebound.add(node.id)
            elif type(node) is ast.Call:
                call_funcs.add(id(node.func))
                calls.append(node)
            else:
                binder = binders.get(type(node))
                if binder is not None:
                    binder(node, handled)
        # Resolving in binding order lets each link of an alias chain reuse the previous one.
        for name in self.assigned:
            self._name_qualnames(name)
        return calls

    def _bind_import_statement(self, node: ast.Import, handled: set[int]) -> None:
        for alias in node.names:
            if alias.asname:
                self._bind_import(alias.asname, alias.name)
            else:
                root = alias.name.partition(".")[0]
                self._bind_import(root, root)

    def _bind_import_from(self, node: ast.ImportFrom, handled: set[int]) -> None:
        for alias in node.names:
            if node.level or not node.module:
                self.rebound.add(alias.asname or alias.name)
            elif alias.name == "*":
                self.star_modules.append(node.module)
            else:
                self._bind_import(alias.asname or alias.name, f"{node.module}.{alias.name}")

    def _bind_assign(self, node: ast.Assign, handled: set[int]) -> None:
        for target in node.targets:
            self._bind_assignment(target, node.value, handled)

    def _bind_single(self, node: ast.AnnAssign | ast.NamedExpr, handled: set[int]) -> None:
        if node.value is not None and isinstance(node.target, ast.Name):
            self.assigned.setdefault(node.target.id, []).append(node.value)
            handled.add(id(node.target))

    def _bind_with(self, node: ast.withitem, handled: set[int]) -> None:
        # Only the context expression is known; it stands in for what __enter__ returns,
        # which is right for TemporaryDirectory() and harmless for the rest.
        if isinstance(node.optional_vars, ast.Name):
            self.assigned.setdefault(node.optional_vars.id, []).append(node.context_expr)
            handled.add(id(node.optional_vars))

    def _bind_other(self, node: ast.AST, handled: set[int]) -> None:
        name = getattr(node, "arg", None) or getattr(node, "name", None)
        name = name or getattr(node, "rest", None)
        if isinstance(name, str):
            self.rebound.add(name)

    def _bind_import(self, name: str, qualname: str) -> None:
        self.imports.setdefault(name, set()).add(qualname)

    def _bind_assignment(self, target: ast.expr, value: ast.expr, handled: set[int]) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
            handled.add(id(target))
        elif (
            isinstance(target, ast.Tuple | ast.List)
            and isinstance(value, ast.Tuple | ast.List)
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))
        ):
            for sub_target, sub_value in zip(target.elts, value.elts, strict=True):
                self._bind_assignment(sub_target, sub_value, handled)

    # name resolution

    def _name_qualnames(self, name: str) -> frozenset[str]:
        """Every fully qualified name ``name`` may stand for (empty if unknown)."""
        memo = self._name_memo.get(name)
        if memo is not None:
            return memo
        if name in self._resolving or self._alias_depth > _MAX_ALIAS_DEPTH:
            return frozenset()
        self._resolving.add(name)
        self._alias_depth += 1
        try:
            quals = set(self.imports.get(name, ()))
            if not quals:
                if name in _BUILTIN_NAMES:
                    quals.add(f"builtins.{name}")
                if name == "__builtins__":
                    quals.add("builtins")
                if name not in self.rebound and name not in self.assigned:
                    quals.update(f"{module}.{name}" for module in self.star_modules)
            for value in self.assigned.get(name, ()):
                quals |= self._qualnames(value)
        finally:
            self._resolving.discard(name)
            self._alias_depth -= 1
        result = frozenset(quals)
        self._name_memo[name] = result
        return result

    def _qualnames(self, node: ast.expr) -> frozenset[str]:
        if type(node) is ast.Name:
            return self._name_qualnames(node.id)
        memo = self._qual_memo.get(id(node))
        if memo is not None:
            return memo
        if isinstance(node, ast.Attribute):
            chain: list[ast.Attribute] = []
            current: ast.expr = node
            base: frozenset[str] | None = None
            while isinstance(current, ast.Attribute):
                base = self._qual_memo.get(id(current))
                if base is not None:
                    break
                chain.append(current)
                current = current.value
            if base is None:
                base = self._qualnames(current)
            for link in reversed(chain):
                base = frozenset(f"{q}.{link.attr}" for q in base)
                self._qual_memo[id(link)] = base
            return base
        result: frozenset[str] = frozenset()
        if isinstance(node, ast.NamedExpr):
            result = self._qualnames(node.value)
        elif isinstance(node, ast.Call):
            result = self._call_qualnames(node)
        elif isinstance(node, ast.Subscript):
            result = self._subscript_qualnames(node)
        self._qual_memo[id(node)] = result
        return result

    def _call_qualnames(self, call: ast.Call) -> frozenset[str]:
        """What a call returns, for the calls that return modules or their attributes:
        ``__import__("os")``, ``importlib.import_module(...)``, ``getattr(os, "system")``."""
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "__getattribute__" and call.args:
            receiver = call.args[0] if len(call.args) == 2 else func.value
            names = self._str_values(call.args[-1])
            if names is None:
                return frozenset()
            return frozenset(f"{q}.{name}" for q in self._qualnames(receiver) for name in names)
        funcs = self._qualnames(func)
        dunder_import = self._is_dunder_import(func)
        if not funcs and not dunder_import:
            return frozenset()
        getters = funcs & self.policy.getattr_functions
        if any(q.rpartition(".")[2] in _VALUE_GETTERS for q in getters):
            names = self._str_values(_argument(call, 1, "name"))
            if names is None or not call.args:
                return frozenset()
            return frozenset(f"{q}.{name}" for q in self._qualnames(call.args[0]) for name in names)
        if not dunder_import and not funcs & _MODULE_RETURNING:
            return frozenset()
        literals = self._str_values(_argument(call, 0, "name"))
        if literals is None:
            return frozenset()
        quals: set[str] = set()
        if dunder_import or funcs & {"builtins.__import__", "importlib.__import__"}:
            for name in literals:
                quals.update({name, name.partition(".")[0]})
        if funcs & {"importlib.import_module", "sys.modules.get"}:
            quals.update(literals)
        if "pkgutil.resolve_name" in funcs:
            quals.update(name.replace(":", ".") for name in literals)
        return frozenset(quals)

    def _subscript_qualnames(self, node: ast.Subscript) -> frozenset[str]:
        keys = self._str_values(node.slice)
        if keys is None:
            return frozenset()
        value_quals = self._qualnames(node.value)
        if "sys.modules" in value_quals:
            return frozenset(keys)
        if (
            isinstance(node.value, ast.Call)
            and not node.value.args
            and self._qualnames(node.value.func) & {"builtins.globals", "builtins.locals"}
        ):
            return frozenset(q for key in keys for q in self._name_qualnames(key))
        return frozenset()

    @staticmethod
    def _is_dunder_import(func: ast.expr) -> bool:
        return isinstance(func, ast.Attribute) and func.attr == "__import__"

    def _literal_bindings(self, name: str) -> list[ast.expr] | None:
        """The values assigned to ``name`` when those are its only bindings."""
        if name in self.rebound or name in self.imports or name not in self.assigned:
            return None
        return self.assigned[name]

    # constant folding

    def _str_values(self, node: ast.expr | None) -> tuple[str, ...] | None:
        """Every string ``node`` can evaluate to, when all of them are known literals."""
        if node is None:
            return None
        if isinstance(node, ast.Name):
            return self._name_str_values(node.id)
        value = self._fold_str(node)
        return None if value is None else (value,)

    def _name_str_values(self, name: str) -> tuple[str, ...] | None:
        if name in self._name_str_memo:
            return self._name_str_memo[name]
        self._name_str_memo[name] = None  # a string defined through itself is unknown
        result: tuple[str, ...] | None = None
        bindings = self._literal_bindings(name)
        if bindings is not None:
            values = [self._fold_str(value) for value in bindings]
            known = [value for value in values if value is not None]
            distinct = tuple(dict.fromkeys(known))
            if len(known) == len(values) and len(distinct) <= _MAX_CANDIDATES:
                result = distinct
        self._name_str_memo[name] = result
        return result

    def _fold_str(self, node: ast.expr) -> str | None:
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
            values = self._str_values(node)
            return values[0] if values is not None and len(values) == 1 else None
        if isinstance(node, ast.BinOp):
            return self._fold_binop(node)
        if isinstance(node, ast.JoinedStr):
            pieces: list[str | None] = []
            for part in node.values:
                if not isinstance(part, ast.FormattedValue):
                    pieces.append(self._fold_str(part))
                elif part.conversion == -1 and part.format_spec is None:
                    pieces.append(self._fold_str(part.value))
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
            return _bounded_join("", [self._fold_str(leaf) for leaf in leaves])
        if isinstance(node.op, ast.Mult):
            for text_node, count_node in ((node.left, node.right), (node.right, node.left)):
                count = _constant_int(count_node)
                if count is None or not 0 <= count <= _MAX_FOLDED_LENGTH:
                    continue
                text = self._fold_str(text_node)
                if text is not None and len(text) * count <= _MAX_FOLDED_LENGTH:
                    return text * count
        return None

    def _fold_subscript(self, node: ast.Subscript) -> str | None:
        text = self._fold_str(node.value)
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
                separator = self._fold_str(func.value)
                items = node.args[0]
                if separator is None or not isinstance(items, ast.List | ast.Tuple):
                    return None
                return _bounded_join(separator, [self._fold_str(item) for item in items.elts])
            if func.attr in _STR_METHODS and not node.args and not node.keywords:
                text = self._fold_str(func.value)
                if text is None or func.attr == "decode":
                    return text
                result: str = getattr(text, func.attr)()
                return result
            if func.attr == "replace" and len(node.args) == 2 and not node.keywords:
                text = self._fold_str(func.value)
                old, new = self._fold_str(node.args[0]), self._fold_str(node.args[1])
                if text is None or not old or new is None:
                    return None
                if len(text) + text.count(old) * len(new) > _MAX_FOLDED_LENGTH:
                    return None
                return text.replace(old, new)
            return None
        quals = self._qualnames(func)
        if len(node.args) == 1 and not node.keywords:
            if "builtins.chr" in quals:
                code = _constant_int(node.args[0])
                return chr(code) if code is not None and 0 <= code < 0x110000 else None
            if "builtins.str" in quals:
                return self._fold_str(node.args[0])
        return None

    def _magnitude(self, node: ast.expr) -> float | None:
        """log10 of the absolute value of a constant integer expression (None if it isn't one)."""
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
            return self._magnitude(node.operand)
        if not isinstance(node, ast.BinOp):
            return None
        left, right = self._magnitude(node.left), self._magnitude(node.right)
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
            return _power_magnitude(left, right, _is_negative(node.right))
        if isinstance(op, ast.LShift):
            return left + _value_from_magnitude(right) * _LOG10_2
        return None

    def _digits_exceed(self, magnitude: float | None) -> bool:
        return magnitude is not None and magnitude + 1 > self.policy.max_int_digits

    # checks

    def _check_qualnames(self, node: ast.expr, quals: frozenset[str] | None = None) -> None:
        names = self.rules.names
        for qualname in self._qualnames(node) if quals is None else quals:
            rule = names.get(qualname)
            if rule is not None:
                self.add_rule(rule, node)

    def _check_module(self, module: str, node: ast.AST) -> None:
        """Report the first rule covering ``module`` or one of its parent packages."""
        parts = module.split(".")
        for end in range(1, len(parts) + 1):
            rule = self.rules.names.get(".".join(parts[:end]))
            if rule is not None:
                self.add_rule(rule, node)
                return

    def _check_attribute_name(self, name: str, node: ast.AST, receiver: ast.expr | None) -> None:
        policy = self.policy
        if name in policy.dunder_attributes:
            self.add("introspection.dunder", BLOCKED, node, _DUNDER_REASON.format(name=name))
        elif name in policy.frame_attributes:
            reason = _FRAME_ATTRIBUTE_REASON.format(name=name)
            self.add("introspection.frame", BLOCKED, node, reason)
        elif receiver is not None and name == "__dict__":
            quals = self._qualnames(receiver)
            if quals:
                shown = _display(min(quals))
                reason = (
                    f"{shown}.__dict__ is blocked: reading the namespace of a module or builtin "
                    f"bypasses the import checks. Use {shown}.<name> directly instead."
                )
                self.add("introspection.dunder", BLOCKED, node, reason)
        elif receiver is not None and name == "__getattribute__":
            quals = self._qualnames(receiver) & {"builtins.object", "builtins.type"}
            if quals:
                shown = _display(min(quals))
                reason = (
                    f"{shown}.__getattribute__ is blocked: it bypasses attribute checks and is a "
                    "known way out of a Python sandbox. Use normal attribute access instead."
                )
                self.add("introspection.dunder", BLOCKED, node, reason)

    def _check_format_template(
        self, template: str, node: ast.AST, widths: bool, depth: int = 0
    ) -> None:
        """Attribute lookups inside ``str.format`` fields (``"{0.__globals__}"``), and with
        ``widths`` huge widths or precisions (``"{:>1000000000}"``)."""
        if "{" not in template or depth > 2:  # str.format itself nests only two levels
            return
        try:
            fields = list(_FORMATTER.parse(template))
        except ValueError:
            return
        for _, field_name, spec, _ in fields:
            if field_name:
                for match in _FIELD_PART.finditer(field_name):
                    self._check_attribute_name(match.group(1) or match.group(2), node, None)
            if spec:
                if widths:
                    self._check_spec_width(spec, node)
                if "{" in spec:
                    self._check_format_template(spec, node, widths, depth + 1)

    def _check_spec_width(self, spec: str, node: ast.AST) -> None:
        for digits in _DIGITS.findall(spec):
            if len(digits) > 18 or int(digits) > self.policy.max_repeat:
                reason = (
                    f"The format width or precision {_short(digits)} would build a string of "
                    f"more than {self.policy.max_repeat:,} characters and can exhaust memory; "
                    "use a smaller width."
                )
                self.add("resource.huge_repeat", WARNING, node, reason)
                return

    def _check_write(self, target: ast.expr, node: ast.AST, label: str) -> None:
        values = self._path_values(target)
        if values == ():
            return
        roots = self.policy.write_allowed_paths
        allowed = _human_list(roots)
        example = f"{roots[0].rstrip('/')}/out.txt"
        if values is None:
            self._write_unverifiable(node, label, allowed, example)
            return
        for value in values:
            verdict = _classify(value, roots, self.working_dir)
            if verdict == "outside":
                name = posixpath.basename(value.text.rstrip("/")) or "out.txt"
                suggestion = f"{roots[0].rstrip('/')}/{name}" if value.exact else example
                reason = (
                    f"Writing to {value.shown()} with {label} is blocked: code may only write "
                    f"under {allowed}. Use a path such as {suggestion!r} instead."
                )
                self.add("fs.write_outside_tmp", BLOCKED, node, reason)
            elif verdict == "relative":
                why = (
                    "the code changes the working directory"
                    if self.cwd_changed
                    else f"the working directory is not known to be under {allowed}"
                )
                reason = (
                    f"Writing to the relative path {value.shown()} with {label} is blocked: "
                    f"{why}. Use an absolute path such as {example!r} instead."
                )
                self.add("fs.write_outside_tmp", BLOCKED, node, reason)
            elif verdict == "unverifiable":
                self._write_unverifiable(node, label, allowed, example)

    def _write_unverifiable(self, node: ast.AST, label: str, allowed: str, example: str) -> None:
        reason = (
            f"{label} writes to a path computed at run time, so it can't be verified to be under "
            f"{allowed}. Write to a literal path such as {example!r} (or an f-string that "
            f"starts with '{example.rpartition('/')[0]}/')."
        )
        self.add("fs.write_outside_tmp", BLOCKED, node, reason)

    def _check_read(self, target: ast.expr, node: ast.AST, label: str) -> None:
        values = self._path_values(target)
        if not values:
            return
        roots = self.policy.read_allowed_paths
        for value in values:
            if _classify(value, roots, self.working_dir) == "outside":
                reason = (
                    f"Reading {value.shown()} with {label} is blocked: code may only read under "
                    f"{_human_list(roots)}. Work with files under /tmp instead."
                )
                self.add("fs.read_outside_allowed", BLOCKED, node, reason)

    # path evaluation

    def _path_values(self, node: ast.expr) -> tuple[_PathValue, ...] | None:
        """The paths ``node`` may name; ``()`` when it is not a path at all (a file descriptor
        or an in-memory file), None when it is computed beyond recognition."""
        try:
            return self._path_values_at(node, 0)
        except RecursionError:
            return None

    def _path_values_at(self, node: ast.expr, depth: int) -> tuple[_PathValue, ...] | None:
        key = _memo_key(node)
        if key in self._path_memo:
            return self._path_memo[key]
        self._path_memo[key] = None  # a path defined through itself is unknown
        result = None if depth > _MAX_ALIAS_DEPTH else self._path_values_uncached(node, depth + 1)
        self._path_memo[key] = result
        return result

    def _path_values_uncached(self, node: ast.expr, depth: int) -> tuple[_PathValue, ...] | None:
        if isinstance(node, ast.Constant) and not isinstance(node.value, str | bytes):
            return ()
        text = self._fold_str(node)
        if text is not None:
            return (_PathValue(text, True),)
        if isinstance(node, ast.Name):
            bindings = self._literal_bindings(node.id)
            if bindings is None:
                return None
            collected: dict[_PathValue, None] = {}
            for value in bindings:
                paths = self._path_values_at(value, depth)
                if paths is None:
                    return None
                collected.update(dict.fromkeys(paths))
                if len(collected) > _MAX_CANDIDATES:
                    return None
            return tuple(collected)
        if isinstance(node, ast.JoinedStr):
            return self._joined_str_paths(node, depth)
        if isinstance(node, ast.BinOp):
            return self._binop_path(node, depth)
        if isinstance(node, ast.Attribute):
            for qualname in self._qualnames(node):
                if qualname in _KNOWN_PATHS:
                    return (_PathValue(_KNOWN_PATHS[qualname], True),)
            if node.attr == "parent" and self._is_pathlike(node.value):
                return self._map_paths(node.value, depth, _parent)
            return None
        if isinstance(node, ast.Call):
            return self._call_path(node, depth)
        return None

    def _map_paths(
        self, node: ast.expr, depth: int, change: Callable[[_PathValue], _PathValue]
    ) -> tuple[_PathValue, ...] | None:
        paths = self._path_values_at(node, depth)
        if paths is None:
            return None
        return tuple(change(path) for path in paths)

    def _joined_str_paths(self, node: ast.JoinedStr, depth: int) -> tuple[_PathValue, ...] | None:
        results: tuple[_PathValue, ...] | None = (_PathValue("", True),)
        for part in node.values:
            pieces: tuple[_PathValue, ...] | None = None
            if not isinstance(part, ast.FormattedValue):
                pieces = self._path_values_at(part, depth)
            elif part.conversion == -1 and part.format_spec is None:
                pieces = self._path_values_at(part.value, depth)
            results = _combine(_concat, results or (), pieces)
        return results

    def _binop_path(self, node: ast.BinOp, depth: int) -> tuple[_PathValue, ...] | None:
        if isinstance(node.op, ast.Mod):
            template = self._fold_str(node.left)
            if template is None:
                return None
            return (_PathValue(template.partition("%")[0], False),)
        if not isinstance(node.op, ast.Add | ast.Div):
            return None
        lefts = self._path_values_at(node.left, depth)
        if not lefts:
            return None
        rights = self._path_values_at(node.right, depth)
        return _combine(_concat if isinstance(node.op, ast.Add) else _join, lefts, rights)

    def _call_path(self, call: ast.Call, depth: int) -> tuple[_PathValue, ...] | None:
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            template = self._fold_str(func.value)
            if template is not None:
                return (_PathValue(template.partition("{")[0], False),)
        if isinstance(func, ast.Attribute) and func.attr == "fileno":
            return ()
        if (
            isinstance(func, ast.Attribute)
            and func.attr in _PATH_DERIVING_METHODS
            and self._is_pathlike(func.value)
        ):
            return self._derived_path(call, func, depth)
        quals = self._qualnames(func)
        if quals & _NOT_PATHS:
            return ()
        if "tempfile.gettempdir" in quals:
            return (_PathValue("/tmp", True),)  # noqa: S108
        if quals & _TEMP_DIR_MAKERS:
            directory = _argument(call, -1, "dir")
            if directory is None:
                return (_PathValue("/tmp/", False),)  # noqa: S108
            return self._map_paths(directory, depth, lambda p: _join(p, None))
        if quals & _CWD_FUNCTIONS:
            return (_PathValue(self.working_dir or ".", True),)
        if quals & _PATH_PASSTHROUGH and len(call.args) == 1:
            return self._path_values_at(call.args[0], depth)
        if quals & _PATH_JOINERS:
            if any(isinstance(arg, ast.Starred) for arg in call.args):
                return None
            if not call.args:
                return (_PathValue(".", True),)
            return self._joined_paths(call.args, depth)
        return None

    def _joined_paths(self, args: list[ast.expr], depth: int) -> tuple[_PathValue, ...] | None:
        results = self._path_values_at(args[0], depth)
        for arg in args[1:]:
            if not results:
                return None
            results = _combine(_join, results, self._path_values_at(arg, depth))
        return results

    def _derived_path(
        self, call: ast.Call, func: ast.Attribute, depth: int
    ) -> tuple[_PathValue, ...] | None:
        if func.attr == "joinpath":
            return self._joined_paths([func.value, *call.args], depth)
        if func.attr in {"resolve", "absolute", "expanduser"}:
            return self._path_values_at(func.value, depth)
        new = self._fold_str(call.args[0]) if len(call.args) == 1 else None
        if new is None:
            return None
        return self._map_paths(func.value, depth, lambda p: _rename(p, func.attr, new))

    def _is_pathlike(self, node: ast.expr) -> bool:
        """Whether ``node`` is known to be a ``pathlib`` path."""
        key = _memo_key(node)
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
                return self._is_pathlike(func.value)
            quals = self._qualnames(func)
            return bool(quals & _PATH_CLASSES or quals & _PATH_CWD_FUNCTIONS)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._is_pathlike(node.left)
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            return self._is_pathlike(node.value)
        if isinstance(node, ast.Name):
            bindings = self._literal_bindings(node.id)
            return bool(bindings) and all(self._is_pathlike(b) for b in bindings or ())
        return False

    # node handlers

    def _on_import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, alias)

    def _on_import_from(self, node: ast.ImportFrom) -> None:
        if node.level or not node.module:
            return
        for alias in node.names:
            if alias.name == "*":
                self._check_module(node.module, alias)
            else:
                self._check_module(f"{node.module}.{alias.name}", alias)

    def _on_name(self, node: ast.Name) -> None:
        if node.id in self.policy.dunder_attributes:
            self.add("introspection.dunder", BLOCKED, node, _DUNDER_REASON.format(name=node.id))
        if type(node.ctx) is ast.Load:
            quals = self._name_qualnames(node.id)
            if quals & self.rules.interesting:
                self._check_qualnames(node, quals)
                self._check_reference(node, quals)

    def _on_attribute(self, node: ast.Attribute) -> None:
        self._check_attribute_name(node.attr, node, node.value)
        quals = self._qualnames(node)
        if quals:
            if quals & self.rules.interesting:
                self._check_qualnames(node, quals)
                if type(node.ctx) is ast.Load:
                    self._check_reference(node, quals)
        else:
            rule = self.rules.methods.get(node.attr)
            if rule is not None:
                self.add_rule(rule, node)

    def _check_reference(self, node: ast.expr, quals: frozenset[str]) -> None:
        """Warn about getattr-like and import functions passed around instead of called."""
        if id(node) in self.call_funcs:
            return
        if quals & self.policy.getattr_functions:
            reason = (
                f"{_display(min(quals))} is used as a value, so the attribute names it will "
                "look up can't be checked; call it directly with a literal name."
            )
            self.add("dynamic.getattr", WARNING, node, reason)
        if quals & self.policy.import_functions:
            reason = (
                f"{_display(min(quals))} is used as a value, so the modules it will import "
                "can't be checked; use plain import statements."
            )
            self.add("dynamic.import", WARNING, node, reason)

    def _on_subscript(self, node: ast.Subscript) -> None:
        keys = self._str_values(node.slice)
        if keys is not None:
            for key in keys:
                if key in self.policy.dunder_attributes or key in self.policy.frame_attributes:
                    self._check_attribute_name(key, node, None)
        self._check_qualnames(node)
        is_own_module = isinstance(node.slice, ast.Name) and node.slice.id == "__name__"
        if keys is None and not is_own_module and "sys.modules" in self._qualnames(node.value):
            reason = (
                "sys.modules[...] with a computed key can reach any loaded module, so it can't "
                "be checked; use a plain import statement."
            )
            self.add("dynamic.import", WARNING, node, reason)

    def _on_constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and "{" in node.value:
            self._check_format_template(node.value, node, widths=False)

    def _on_formatted_value(self, node: ast.FormattedValue) -> None:
        spec = node.format_spec
        if isinstance(spec, ast.JoinedStr):
            for part in spec.values:
                if isinstance(part, ast.Constant) and isinstance(part.value, str):
                    self._check_spec_width(part.value, node)

    def _on_binop(self, node: ast.BinOp) -> None:
        op = node.op
        if isinstance(op, ast.Pow | ast.LShift):
            self._check_huge_number(node, self._magnitude(node), node.left, node.right)
        elif isinstance(op, ast.Mult):
            self._check_repeat(node)
        elif isinstance(op, ast.Mod):
            template = self._fold_str(node.left)
            if template is not None and "%" in template:
                for width, precision in _PERCENT_SPEC.findall(template):
                    self._check_spec_width(f"{width}.{precision}", node)

    def _check_huge_number(
        self, node: ast.AST, magnitude: float | None, *operands: ast.expr
    ) -> None:
        if not self._digits_exceed(magnitude):
            return
        already = any(id(operand) in self._bombs for operand in operands)
        self._bombs.add(id(node))
        if already or magnitude is None:
            return
        size = "an astronomical number of" if magnitude > 1e15 else f"about {int(magnitude) + 1:,}"
        reason = (
            f"This integer would have {size} digits (the limit is "
            f"{self.policy.max_int_digits:,}); computing it can hang the sandbox until it times "
            "out. Use math.log10, floats, or pow(base, exp, mod) instead."
        )
        self.add("resource.huge_power", WARNING, node, reason)

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
                length, magnitude = self._sequence_length(seq), self._magnitude(count)
                if length is not None and magnitude is not None:
                    return length * _value_from_magnitude(magnitude)
        return None

    def _check_repeat(self, node: ast.BinOp) -> None:
        size = self._sequence_length(node)
        if size is None or size <= self.policy.max_repeat:
            return
        already = id(node.left) in self._bombs or id(node.right) in self._bombs
        self._bombs.add(id(node))
        if not already:
            self._report_repeat(node, size)

    def _report_repeat(self, node: ast.AST, size: float) -> None:
        shown = "an astronomical number of" if size > 1e15 else f"about {int(size):,}"
        reason = (
            f"This would build a sequence of {shown} items or characters (the limit is "
            f"{self.policy.max_repeat:,}) and can exhaust the sandbox's memory; build only what "
            "you need, or iterate lazily."
        )
        self.add("resource.huge_repeat", WARNING, node, reason)

    def _on_comprehension(self, node: ast.ListComp | ast.SetComp | ast.DictComp) -> None:
        for generator in node.generators:
            size = self._range_size(generator.iter)
            if size is not None and size > self.policy.max_repeat:
                self._report_repeat(node, size)
                return

    def _range_size(self, node: ast.expr) -> float | None:
        if not isinstance(node, ast.Call) or "builtins.range" not in self._qualnames(node.func):
            return None
        if not node.args or len(node.args) > 3:
            return None
        bound = node.args[0] if len(node.args) == 1 else node.args[1]
        magnitude = self._magnitude(bound)
        return None if magnitude is None else _value_from_magnitude(magnitude)

    def _on_call(self, node: ast.Call) -> None:
        func = node.func
        quals = self._qualnames(func) & self.rules.calls
        method = func.attr if isinstance(func, ast.Attribute) else None
        if not quals and method not in _CHECKED_METHODS:
            return
        policy = self.policy
        if quals & policy.getattr_functions or method == "__getattribute__":
            self._check_getattr(node, quals)
        if quals & policy.import_functions or method == "__import__":
            self._check_dynamic_import(node, quals)
        if quals & _MODULE_RETURNING:
            self._check_qualnames(node)
        if quals & {"operator.attrgetter", "operator.methodcaller"}:
            self._check_attrgetter(node, "operator.methodcaller" in quals)
        if quals & _DYNAMIC_EVALUATORS:
            self._scan_literal_code(node, quals)
        if "builtins.vars" in quals and len(node.args) == 1:
            self._check_attribute_name("__dict__", node, node.args[0])
        if isinstance(func, ast.Attribute):
            self._check_method_call(node, func)
        for qualname in quals & _FILE_FUNCTIONS:
            self._check_file_call(node, qualname)
        self._check_call_resources(node, func, quals)

    def _check_getattr(self, node: ast.Call, quals: frozenset[str]) -> None:
        func = node.func
        receiver: ast.expr | None
        if isinstance(func, ast.Attribute) and func.attr == "__getattribute__":
            receiver = node.args[0] if len(node.args) == 2 else func.value
            name_node = node.args[-1] if node.args else None
            label, reaches_values = "__getattribute__", True
        else:
            receiver = node.args[0] if node.args else None
            name_node = _argument(node, 1, "name")
            label = _display(min(quals & self.policy.getattr_functions))
            reaches_values = label.rpartition(".")[2] in _VALUE_GETTERS
        names = self._str_values(name_node)
        if names is not None:
            for name in names:
                self._check_attribute_name(name, node, receiver)
            if reaches_values:
                self._check_qualnames(node)
            return
        if name_node is None:
            return
        receiver_quals = self._qualnames(receiver) if receiver is not None else frozenset()
        blocked_parent = receiver_quals & self.rules.blocked_parents
        if reaches_values and blocked_parent:
            shown = _display(min(blocked_parent))
            reason = (
                f"{label}() on {shown} with a computed attribute name is blocked: it can reach "
                f"blocked functions of {shown}. Use a literal attribute name instead."
            )
            self.add("dynamic.module_getattr", BLOCKED, node, reason)
            return
        reason = (
            f"{label}() with a computed attribute name can't be checked; use a literal "
            "attribute name where possible. The code still runs."
        )
        self.add("dynamic.getattr", WARNING, node, reason)

    def _check_dynamic_import(self, node: ast.Call, quals: frozenset[str]) -> None:
        label = _display(min(quals & self.policy.import_functions, default="__import__"))
        names = self._str_values(_argument(node, 0, "name"))
        if names is None:
            reason = (
                f"{label}() imports a module whose name is computed at run time, so it can't "
                "be checked; use a plain import statement. The code still runs."
            )
            self.add("dynamic.import", WARNING, node, reason)
            return
        for name in names:
            module = name.replace(":", ".")
            if not module.startswith("."):
                self._check_module(module, node)
            reason = (
                f"{label}({name!r}) imports a module by name; use a plain import statement "
                "instead. The code still runs."
            )
            self.add("dynamic.import", WARNING, node, reason)

    def _check_attrgetter(self, node: ast.Call, method_caller: bool) -> None:
        for arg in node.args[:1] if method_caller else node.args:
            names = self._str_values(arg)
            if names is None:
                reason = (
                    "operator.attrgetter/methodcaller with a computed name can't be checked; "
                    "use a literal attribute name where possible. The code still runs."
                )
                self.add("dynamic.getattr", WARNING, node, reason)
                continue
            for name in names:
                for part in name.split("."):
                    self._check_attribute_name(part, node, None)

    def _scan_literal_code(self, node: ast.Call, quals: frozenset[str]) -> None:
        if self.depth >= _MAX_EVAL_DEPTH:
            return
        arguments = node.args[:1] + [kw.value for kw in node.keywords if kw.arg in _CODE_KEYWORDS]
        label = _display(min(quals & _DYNAMIC_EVALUATORS))
        line, col = _position(node)
        for argument in arguments:
            source = self._fold_str(argument)
            if source is None or "\x00" in source:
                continue
            try:
                tree = ast.parse(source)
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            inner = _Scanner(self.policy, self.depth + 1, parent=self)
            inner.run(tree)
            for finding in inner.findings:
                reason = f"In the code passed to {label}(): {finding.reason}"
                self.findings.append(Finding(finding.rule_id, finding.level, line, col, reason))

    def _check_method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        method = func.attr
        if method == "get_field" and node.args:
            field_name = self._fold_str(node.args[0])
            if field_name is not None:
                self._check_format_template(f"{{{field_name}}}", node, widths=False)
            return
        if method in {"format", "format_map", "vformat"}:
            template = self._fold_str(func.value)
            if template is not None:
                self._check_format_template(template, node, widths=True)
            if node.args and not isinstance(node.args[0], ast.Constant):
                first = self._fold_str(node.args[0])
                if first is not None:
                    self._check_format_template(first, node, widths=False)
            return
        receiver = func.value
        label = f"Path.{method}()"
        if method in _PATH_WRITE_METHODS or method in _PATH_READ_METHODS or method == "open":
            pathlike = self._is_pathlike(receiver)
            if method in _PATH_WRITE_METHODS and (
                pathlike or (method in _DISTINCT_PATH_WRITE_METHODS and not self._qualnames(func))
            ):
                self._check_write(receiver, node, label)
                if method in _PATH_TWO_PATH_METHODS and node.args:
                    self._check_write(node.args[0], node, label)
            elif method in _PATH_READ_METHODS and pathlike:
                self._check_read(receiver, node, label)
            elif method == "open" and pathlike:
                modes = self._modes(_argument(node, 0, "mode"), "r")
                if modes is not None and any(set(mode) & _OPEN_MODE_WRITES for mode in modes):
                    self._check_write(receiver, node, label)
                else:
                    self._check_read(receiver, node, label)

    def _modes(self, node: ast.expr | None, default: str) -> tuple[str, ...] | None:
        return (default,) if node is None else self._str_values(node)

    def _check_file_call(self, node: ast.Call, qualname: str) -> None:
        label = f"{_display(qualname)}()"
        opener = _OPENERS.get(qualname)
        if opener is not None:
            path = _argument(node, *opener.path)
            if path is None:
                return
            modes = self._modes(_argument(node, *opener.mode), opener.default_mode)
            writes = modes is not None and any(set(m) & opener.write_chars for m in modes)
            if writes:
                self._check_write(path, node, label)
            else:
                self._check_read(path, node, label)
            return
        if qualname == "os.open":
            path = _argument(node, 0, "path")
            if path is None:
                return
            if self._flags_write(_argument(node, 1, "flags")):
                self._check_write(path, node, label)
            else:
                self._check_read(path, node, label)
            return
        for position, keyword in _WRITERS.get(qualname, ()):
            target = _argument(node, position, keyword)
            if target is not None:
                self._check_write(target, node, label)
        for position, keyword in _READERS.get(qualname, ()):
            target = _argument(node, position, keyword)
            if target is not None:
                self._check_read(target, node, label)

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
                bindings = self._literal_bindings(sub.id) or ()
                if any(self._flags_write(value, seen) for value in bindings):
                    return True
            elif (isinstance(sub, ast.Attribute) and sub.attr in _OS_WRITE_FLAGS) or (
                isinstance(sub, ast.Constant)
                and type(sub.value) is int
                and sub.value & _OS_WRITE_FLAG_BITS
            ):
                return True
        return False

    def _check_call_resources(self, node: ast.Call, func: ast.expr, quals: frozenset[str]) -> None:
        args = node.args
        if "builtins.pow" in quals and len(args) == 2 and not node.keywords:
            magnitude = self._magnitude(args[0])
            exponent = self._magnitude(args[1])
            if magnitude is not None and exponent is not None:
                power = _power_magnitude(magnitude, exponent, _is_negative(args[1]))
                self._check_huge_number(node, power, *args)
        elif "math.factorial" in quals and len(args) == 1:
            magnitude = self._magnitude(args[0])
            if magnitude is not None:
                digits = _factorial_digits(_value_from_magnitude(magnitude))
                self._check_huge_number(node, digits - 1, *args)
        elif quals & {"builtins.bytes", "builtins.bytearray"} and len(args) == 1:
            magnitude = self._magnitude(args[0])
            if magnitude is not None and _value_from_magnitude(magnitude) > self.policy.max_repeat:
                self._report_repeat(node, _value_from_magnitude(magnitude))
        if quals & _MATERIALIZERS and len(args) == 1:
            size = self._range_size(args[0])
            if size is not None and size > self.policy.max_repeat:
                self._report_repeat(node, size)
        if isinstance(func, ast.Attribute) and func.attr in _PAD_METHODS and args:
            magnitude = self._magnitude(args[0])
            if magnitude is not None and _value_from_magnitude(magnitude) > self.policy.max_repeat:
                self._report_repeat(node, _value_from_magnitude(magnitude))


def _value_from_magnitude(magnitude: float) -> float:
    if magnitude == -math.inf:
        return 0.0
    return math.inf if magnitude > 300 else 10.0**magnitude


def _power_magnitude(base: float, exponent: float, negative_exponent: bool) -> float:
    """log10 of ``b ** e`` from log10 of ``|b|`` and of ``|e|``."""
    if negative_exponent or base <= 0:
        return 0.0 if base > -math.inf else -math.inf
    return base * _value_from_magnitude(exponent)


def _factorial_digits(n: float) -> float:
    if n < 2:
        return 1.0
    if n > 1e300:
        return math.inf
    return n * math.log10(n / math.e) + 0.5 * math.log10(2 * math.pi * n) + 1


def _parent(path: _PathValue) -> _PathValue:
    if not path.exact:
        return path
    return _PathValue(posixpath.dirname(path.text.rstrip("/")) or ".", True)


def _rename(path: _PathValue, method: str, new: str) -> _PathValue:
    if not path.exact:
        return path
    head, name = posixpath.split(path.text.rstrip("/"))
    if method == "with_name":
        name = new
    elif method == "with_suffix":
        name = posixpath.splitext(name)[0] + new
    else:
        name = new + posixpath.splitext(name)[1]
    return _PathValue(posixpath.join(head, name), True)


def _bounded_join(separator: str, pieces: list[str | None]) -> str | None:
    """``separator.join(pieces)`` unless a piece is unknown or the result would be too long
    to be a name or a path (folding must not let the code make the scanner build big strings)."""
    known = [piece for piece in pieces if piece is not None]
    if len(known) != len(pieces):
        return None
    if sum(map(len, known)) + len(separator) * len(known) > _MAX_FOLDED_LENGTH:
        return None
    return separator.join(known)


def _short(digits: str) -> str:
    return digits if len(digits) <= 20 else f"{digits[:10]}...({len(digits)} digits)"


# --- entry point ----------------------------------------------------------------------------


def _input_findings(code: str, policy: ScanPolicy) -> list[Finding]:
    findings = []
    nul = code.find("\x00")
    if nul >= 0:
        line = code.count("\n", 0, nul) + 1
        reason = (
            "The code contains a NUL byte, which Python source can't contain; remove it "
            "(write '\\0' or '\\x00' inside a string literal if you need one)."
        )
        findings.append(Finding("input.nul_byte", BLOCKED, line, 0, reason))
    size = (
        len(code)
        if len(code) > policy.max_code_bytes
        else len(code.encode("utf-8", "surrogatepass"))
    )
    if size > policy.max_code_bytes:
        reason = (
            f"The code is {size:,} bytes; the limit is {policy.max_code_bytes:,} bytes. Split "
            "the work into smaller steps, or put large data in a file under /tmp and read it."
        )
        findings.append(Finding("input.too_large", BLOCKED, 0, 0, reason))
    if not findings:
        try:
            code.encode("utf-8")
        except UnicodeEncodeError as exc:
            line = code.count("\n", 0, exc.start) + 1
            reason = (
                "The code contains characters that can't be encoded as UTF-8 (a lone "
                "surrogate); remove them."
            )
            findings.append(Finding("input.encoding", BLOCKED, line, 0, reason))
    return findings


def _too_complex() -> Finding:
    reason = (
        "The code is nested too deeply to be checked; split long expressions and deeply "
        "nested blocks into smaller statements or functions."
    )
    return Finding("input.too_complex", BLOCKED, 0, 0, reason)


def _report(findings: Iterable[Finding], policy: ScanPolicy) -> ScanReport:
    disabled = policy.disabled_rules
    unique: dict[tuple[str, str, int, str], Finding] = {}
    for finding in sorted(findings, key=_sort_key):
        rule_id = finding.rule_id
        if disabled and any(rule_id == d or rule_id.startswith(f"{d}.") for d in disabled):
            continue
        unique.setdefault((rule_id, finding.level, finding.line, finding.reason), finding)
    kept = list(unique.values())
    limit = policy.max_report_findings
    return ScanReport(tuple(kept[:limit]), max(0, len(kept) - limit))


def scan(code: str, policy: ScanPolicy = DEFAULT_POLICY) -> ScanReport:
    """Check ``code`` against ``policy`` without running it.

    Oversized input, NUL bytes and text that isn't valid UTF-8 are refused before parsing
    (blocked ``input.*`` findings). A syntax error is reported as a ``syntax_error`` warning
    and nothing else is checked, since Python will refuse the code itself.
    """
    findings = _input_findings(code, policy)
    if findings:
        return _report(findings, policy)
    try:
        tree = ast.parse(code)
    except SyntaxError as exc:
        message = exc.msg or "invalid syntax"
        reason = f"Syntax error: {message}. Python will report it when the code runs; fix it."
        column = max((exc.offset or 1) - 1, 0)
        finding = Finding("syntax_error", WARNING, exc.lineno or 0, column, reason)
        return _report([finding], policy)
    except (RecursionError, MemoryError):
        return _report([_too_complex()], policy)
    scanner = _Scanner(policy)
    try:
        scanner.run(tree)
    except RecursionError:
        scanner.findings.append(_too_complex())
    return _report(scanner.findings, policy)

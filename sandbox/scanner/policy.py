"""The scan policy: what is blocked or warned about, as data a Django setting can override.

Only the lists and limits live here; ``rules.py`` turns the lists into rules with their reasons,
and the fixed tables of how standard-library functions touch files live with their checkers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


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

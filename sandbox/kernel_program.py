"""The sandbox's kernel: the program every sandbox container runs (``python3 -I -u -c`` with this
file's text; the host never imports it to run it). It runs the cells it is sent, one at a time,
in one namespace, so a run's ``execute_code`` calls share variables, imports and files.

Protocol, on the container's stdin: a decimal length, a newline, then that many bytes of JSON,
``{"id": nonce, "code": str, "inputs": [{"name", "size"}], "limits": {"files", "file_bytes",
"total_bytes"}}``, then the inputs' bytes, one after the other (``size`` each). The inputs are
written read-only under ``/tmp/inputs`` before the code runs (the host sends them only to a
fresh kernel). The cell's own output goes to stdout and stderr as it is printed. When the cell
is over, the figures matplotlib still holds (and those ``plt.show()`` showed) are saved as
``figure-N.png`` under ``/tmp/outputs`` (unless the code saved one there itself and left it
unchanged), and the files there that are new or changed since the last cell are collected
within the limits, never through a symbolic link; then the kernel
writes ``END`` + nonce + a newline on stderr, and ``END`` + nonce, a space, the length of a
JSON report, a newline, the report ``{"exit_code", "files": [{"name", "size"}], "skipped":
[{"name", "reason"}], "skipped_more"}`` and the files' bytes one after the other on stdout.

The container is the security boundary, and the host checks everything this program reports:
the code can reach this program's streams and state, and so can only spoil its own results.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import stat
import sys
import traceback
import types
import weakref
from typing import Any, BinaryIO

END = b"\x1edevassist-end:"
OUTPUTS = "/tmp/outputs"  # noqa: S108 - inside the container
INPUTS = "/tmp/inputs"  # noqa: S108
#: matplotlib's font cache as the image build left it (``sandbox/image/Dockerfile``).
FONT_CACHE = "/usr/local/share/devassist/matplotlib"
#: The matplotlib backend the kernel installs: Agg, whose ``show()`` saves and closes figures.
FIGURES_BACKEND = "devassist_figures"
#: At most this many skipped outputs are named one by one; the rest are counted.
SKIPPED_NAMED = 20
#: Folders under the outputs deeper than this are not looked into.
MAX_DEPTH = 8
#: Entries under the outputs looked at, at most, per cell (files past it are not counted).
MAX_ENTRIES = 100_000
_CHUNK = 1 << 20


class _FiguresBackend(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Provides the ``FIGURES_BACKEND`` module when matplotlib asks for it (so nothing of
    matplotlib is imported before the code imports it)."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != FIGURES_BACKEND:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        module.FigureCanvas = FigureCanvasAgg  # type: ignore[attr-defined]
        module.show = lambda *args, **kwargs: save_figures()  # type: ignore[attr-defined]
        savefig = Figure.savefig

        def saving(figure: Any, fname: Any, *args: Any, **kwargs: Any) -> Any:
            """``Figure.savefig``, noting a figure saved under the outputs."""
            result = savefig(figure, fname, *args, **kwargs)
            if isinstance(fname, str | os.PathLike) and os.path.realpath(
                os.fspath(fname)
            ).startswith(OUTPUTS + "/"):
                _saved_figures.add(figure)
            return result

        Figure.savefig = saving


#: Figures the code saved under the outputs itself (unchanged since, they are not saved again).
_saved_figures: weakref.WeakSet[Any] = weakref.WeakSet()


def save_figures() -> None:
    """Save every open matplotlib figure as the next free ``figure-N.png`` of the outputs,
    then close it; a figure the code saved under the outputs and has not changed since is
    closed only (the file it saved is its output)."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    os.makedirs(OUTPUTS, exist_ok=True)
    for number in plt.get_fignums():
        figure = plt.figure(number)
        if figure in _saved_figures and not figure.stale:
            plt.close(figure)
            continue
        index = 1
        while os.path.lexists(os.path.join(OUTPUTS, f"figure-{index}.png")):
            index += 1
        try:
            figure.savefig(os.path.join(OUTPUTS, f"figure-{index}.png"), format="png")
        finally:
            plt.close(figure)


def _protocol_streams() -> tuple[BinaryIO, BinaryIO, BinaryIO]:
    """The protocol's own copies of stdin, stdout and stderr; the code's stdin is empty."""
    reader = os.fdopen(os.dup(0), "rb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - the code's stdin, for good
    return reader, os.fdopen(os.dup(1), "wb"), os.fdopen(os.dup(2), "wb")


def _prepare() -> None:
    os.makedirs(OUTPUTS, exist_ok=True)
    sys.meta_path.append(_FiguresBackend())
    os.environ["MPLBACKEND"] = f"module://{FIGURES_BACKEND}"
    config = os.environ.get("MPLCONFIGDIR")
    if config and os.path.isdir(FONT_CACHE) and not os.path.exists(config):
        # Without it, matplotlib builds its cache itself, more slowly.
        with contextlib.suppress(OSError):
            shutil.copytree(FONT_CACHE, config)


def _read_message(reader: BinaryIO) -> dict[str, Any] | None:
    line = reader.readline()
    if not line:
        return None
    message = json.loads(reader.read(int(line)))
    if not isinstance(message, dict):
        raise ValueError("a message is a JSON object")
    return message


def _write_inputs(reader: BinaryIO, inputs: list[dict[str, Any]]) -> None:
    """Copy the inputs that follow the message to ``/tmp/inputs`` (files 0444 in a 0555
    folder); every byte is read even when a file cannot be written, so the next message is
    read where it starts."""
    if not inputs:
        return
    os.makedirs(INPUTS, exist_ok=True)
    for item in inputs:
        name, left = str(item["name"]), int(item["size"])
        handle = None
        if name == os.path.basename(name) and name not in {"", ".", ".."}:
            try:
                descriptor = os.open(
                    os.path.join(INPUTS, name),
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                    0o444,
                )
                handle = os.fdopen(descriptor, "wb")
            except OSError as exc:
                print(f"input {name!r} not copied: {exc.strerror}", file=sys.stderr)
        try:
            while left > 0:
                chunk = reader.read(min(left, _CHUNK))
                if not chunk:
                    raise EOFError("the input ended early")
                left -= len(chunk)
                if handle is not None:
                    try:
                        handle.write(chunk)
                    except OSError as exc:
                        print(f"input {name!r} not copied: {exc.strerror}", file=sys.stderr)
                        handle.close()
                        handle = None
        finally:
            if handle is not None:
                handle.close()
    os.chmod(INPUTS, 0o555)  # noqa: S103 - readable by the code, not for it to add to


def _run(code: str, namespace: dict[str, Any]) -> int:
    """Run ``code`` as a script would run: 0, the ``sys.exit`` code, or 1 with the traceback
    (without this program's frame) on stderr."""
    try:
        exec(compile(code, "<cell>", "exec"), namespace)  # noqa: S102 - what the sandbox is for
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:  # the code's failure is its result
        traceback.print_exception(
            type(exc), exc, exc.__traceback__.tb_next if exc.__traceback__ else None
        )
        return 1
    return 0


class _Collector:
    """The outputs of one cell: the files under ``OUTPUTS`` that are new or changed since the
    last cell (``seen``), within the limits, and what was left out and why."""

    def __init__(self, limits: dict[str, int], seen: dict[str, tuple[int, int, int]]) -> None:
        self.limits = limits
        self.seen = seen
        self.files: list[tuple[str, bytes]] = []
        self.skipped: list[dict[str, str]] = []
        self.skipped_more = 0
        self.total = 0
        self.entries = 0

    def skip(self, name: str, reason: str) -> None:
        if len(self.skipped) < SKIPPED_NAMED:
            self.skipped.append({"name": name, "reason": reason})
        else:
            self.skipped_more += 1

    def collect(self) -> None:
        try:
            info = os.lstat(OUTPUTS)
        except OSError:
            return
        if not stat.S_ISDIR(info.st_mode):
            self.skip("outputs", f"{OUTPUTS} is not a folder (a symbolic link?): not read")
            return
        for top, dirs, names, top_fd in os.fwalk(OUTPUTS, follow_symlinks=False):
            relative_top = os.path.relpath(top, OUTPUTS)
            depth = 0 if relative_top == "." else relative_top.count("/") + 1
            # fwalk lists a link to a folder among the folders, and does not go into it.
            for name in [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                dirs.remove(name)
                names.append(name)
            if depth >= MAX_DEPTH:
                for name in dirs:
                    self.skip(self._relative(relative_top, name), "a folder nested too deep")
                dirs.clear()
            dirs.sort()
            for name in sorted(names):
                self.entries += 1
                if self.entries > MAX_ENTRIES:
                    dirs.clear()
                    return
                self._consider(relative_top, name, top_fd)

    @staticmethod
    def _relative(top: str, name: str) -> str:
        return name if top == "." else f"{top}/{name}"

    def _consider(self, top: str, name: str, top_fd: int) -> None:
        relative = self._relative(top, name)
        limits = self.limits
        try:
            info = os.stat(name, dir_fd=top_fd, follow_symlinks=False)
        except OSError:
            return
        key = (info.st_mtime_ns, info.st_size, info.st_ino)
        if self.seen.get(relative) == key:
            return
        self.seen[relative] = key
        if stat.S_ISLNK(info.st_mode):
            self.skip(relative, "a symbolic link (not followed)")
            return
        if not stat.S_ISREG(info.st_mode):
            self.skip(relative, "not a regular file")
            return
        if len(self.files) >= limits["files"]:
            self.skip(relative, f"over the limit of {limits['files']} files per execution")
            return
        if info.st_size > limits["file_bytes"]:
            self.skip(relative, f"{info.st_size} bytes, over the limit of {limits['file_bytes']}")
            return
        if self.total + info.st_size > limits["total_bytes"]:
            self.skip(relative, f"over the limit of {limits['total_bytes']} bytes per execution")
            return
        try:
            descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=top_fd)
        except OSError as exc:
            self.skip(relative, f"unreadable: {exc.strerror}")
            return
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                self.skip(relative, "not a regular file")
                return
            data = handle.read(limits["file_bytes"] + 1)
        if len(data) > limits["file_bytes"] or self.total + len(data) > limits["total_bytes"]:
            self.skip(relative, "grew past the limits while it was read")
            return
        self.total += len(data)
        self.files.append((relative, data))


def _flush_code_streams() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):  # a stream the code replaced or closed
            stream.flush()  # type: ignore[union-attr]


def _cell(message: dict[str, Any], reader: BinaryIO, namespace: dict[str, Any], seen: Any) -> Any:
    _write_inputs(reader, list(message.get("inputs") or []))
    exit_code = _run(str(message["code"]), namespace)
    try:
        save_figures()
    except Exception:  # a figure that cannot be saved is the code's failure
        traceback.print_exc()
        exit_code = exit_code or 1
    collector = _Collector(message["limits"], seen)
    try:
        collector.collect()
    except Exception as exc:  # an outputs tree the walk cannot read: report it, go on
        collector.skip("outputs", f"not collected: {type(exc).__name__}: {exc}")
    return exit_code, collector


def main() -> None:
    reader, out, err = _protocol_streams()
    _prepare()
    sys.modules["__devassist_kernel__"] = sys.modules[__name__]
    # The cells' module is ``__main__`` (so that pickling what they define works).
    cells = types.ModuleType("__main__")
    cells.__builtins__ = builtins  # type: ignore[attr-defined]
    sys.modules["__main__"] = cells
    namespace: dict[str, Any] = cells.__dict__
    seen: dict[str, tuple[int, int, int]] = {}
    while True:
        message = _read_message(reader)
        if message is None:
            return
        exit_code, collector = _cell(message, reader, namespace, seen)
        _flush_code_streams()
        marker = END + str(message["id"]).encode()
        err.write(marker + b"\n")
        err.flush()
        report = {
            "exit_code": exit_code,
            "files": [{"name": name, "size": len(data)} for name, data in collector.files],
            "skipped": collector.skipped,
            "skipped_more": collector.skipped_more,
        }
        body = json.dumps(report).encode()
        out.write(marker + b" " + str(len(body)).encode() + b"\n" + body)
        for _, data in collector.files:
            out.write(data)
        out.flush()


if __name__ == "__main__":
    main()

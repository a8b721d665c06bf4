"""The sandbox backend protocol and its values: the result of an execution, the files that go
in and come out, and a session of executions sharing one interpreter."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields
from typing import Any, Protocol

from sandbox.output import OutputSink


@dataclass(frozen=True)
class SandboxFile:
    """A file going into the sandbox (an input: ``name`` a plain file name, written under
    ``/tmp/inputs``) or coming out of it (an output: ``name`` its path under ``/tmp/outputs``
    as the program wrote it, not sanitised)."""

    name: str
    data: bytes

    @property
    def size(self) -> int:
        return len(self.data)


@dataclass(frozen=True)
class SkippedFile:
    """An output left out (a symbolic link, past a limit, …), and why."""

    name: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason}


@dataclass(frozen=True)
class ExecResult:
    """What one execution produced. ``exit_code`` is None when the process was killed for a
    timeout, a cancellation or a lost interpreter."""

    stdout: str
    stderr: str
    exit_code: int | None
    duration_ms: int
    timed_out: bool
    oom_killed: bool
    truncated: bool
    backend: str
    image: str
    cancelled: bool = False
    #: The files the program wrote under ``/tmp/outputs`` (its open matplotlib figures saved
    #: there as PNG), new or changed since the last execution of its session, within limits.
    files: tuple[SandboxFile, ...] = ()
    #: Outputs left out, the first few of them by name (``skipped_more`` counts the rest).
    skipped_files: tuple[SkippedFile, ...] = ()
    skipped_more: int = 0
    #: In a session: the interpreter did not survive this execution (it crashed, timed out or
    #: was stopped), so what earlier executions defined is gone; the next one starts afresh.
    state_lost: bool = False
    #: In a session: this execution ran in a new interpreter because the last one was lost.
    state_restarted: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The result as data, the output files by name and size only (their bytes are
        stored by the caller, ``traces.artifacts``)."""
        out: dict[str, Any] = {
            field.name: getattr(self, field.name)
            for field in fields(self)
            if field.name not in {"files", "skipped_files"}
        }
        out["skipped_files"] = [f.as_dict() for f in self.skipped_files]
        return out


class SandboxSession(Protocol):
    """Executions that share one interpreter (a run's ``execute_code`` calls): variables,
    imports and files persist from one ``run`` to the next, each ``run`` with its own timeout
    and output limits. Runs take turns. When the interpreter is lost (a crash, a timeout, a
    cancellation), that result says ``state_lost`` and the next ``run`` starts a fresh one
    (given the inputs again) and says ``state_restarted``."""

    def run(
        self,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event | None = None,
        on_output: OutputSink | None = None,
    ) -> ExecResult:
        """As ``SandboxBackend.run``, in the session's interpreter. Raises
        ``SandboxUnavailable`` (also once the session is closed)."""
        ...

    def close(self) -> None:
        """Remove the session's interpreter at once, even while it runs (idempotent); the
        session runs nothing afterwards."""
        ...


class SandboxBackend(Protocol):
    name: str

    def run(
        self,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event | None = None,
        on_output: OutputSink | None = None,
        inputs: tuple[SandboxFile, ...] = (),
    ) -> ExecResult:
        """Run ``code`` with Python 3 in a fresh, isolated environment and return its result:
        ``inputs`` are readable under ``/tmp/inputs``; the files it writes under
        ``/tmp/outputs`` and its matplotlib figures come back in ``files``.

        The timeout is enforced by the caller's host, not inside the sandbox; ``cancel`` set
        from another thread stops the execution as soon as it is noticed. ``on_output``, when
        given, receives what the program prints while it runs, on the calling thread, as
        ``sandbox.output.LiveOutput`` bounds it (a few pieces a second, at most the output limit
        per stream, then a marker); the result is the same with or without it. Raises
        ``SandboxUnavailable`` when nothing can run."""
        ...

    def session(self, *, owner: str, inputs: tuple[SandboxFile, ...] = ()) -> SandboxSession:
        """A session of executions sharing one interpreter, whose containers carry ``owner``
        (a run's id) so that ``remove_owned`` finds them if this process dies. Nothing starts
        before its first ``run``; ``inputs`` are given to every interpreter it starts."""
        ...

    def remove_owned(self, owner: str) -> int:
        """Remove every container of ``owner``'s sessions, whichever process made them;
        returns how many. Raises ``SandboxUnavailable``."""
        ...

    def start(self) -> None:
        """Prepare (warm pool, orphan reaper); idempotent."""
        ...

    def close(self) -> None:
        """Release everything the backend holds (pooled containers included)."""
        ...

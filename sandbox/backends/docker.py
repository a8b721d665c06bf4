"""The Docker sandbox: locked-down containers running the sandbox's kernel
(``sandbox/kernel_program.py``), one per execution or one per session of executions, a warm
pool of idle single-use containers, and a reaper for containers a crashed process left behind.

Isolation (the container is the security boundary; the AST scan in front of it only refuses
clearly dangerous code early): no network, read-only root filesystem, ``/tmp`` as a small tmpfs
(nosuid, nodev), ``/dev/mqueue`` covered by an empty read-only tmpfs, user 65534:65534, every
capability dropped, ``no-new-privileges``, the project's seccomp profile (``sandbox/seccomp.py``:
Docker's default without io_uring, ptrace, process_vm_*, keyrings, bpf, userfaultfd and perf),
private IPC and cgroup namespaces, memory with swap equal to it, a pids limit, a CPU quota,
``nofile`` and ``fsize`` ulimits, an init process, and no environment from the host. Code goes
in on stdin; nothing of the host is mounted. An OCI runtime (``runsc`` for gVisor) can be
chosen with the ``runtime`` option.

Each execution is a cell of the kernel: its code (and, for a fresh kernel, the input files)
goes in on stdin, its output comes back on the attach stream as it is printed, then the end
of the cell with a report and the output files, which this module checks against the file
limits itself. The timeout is kept on the host with a monotonic clock: when it passes, the
container is removed with force and the result says ``timed_out``. Output is read
incrementally into ``CappedStream``s, so a flood of output never reaches host memory.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import select
import socket
import struct
import threading
import time
import uuid
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
from docker import DockerClient
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container
from docker.types import Ulimit

from devassist.storable import storable_text
from sandbox.backends.base import ExecResult, SandboxFile, SkippedFile
from sandbox.engine import docker_client
from sandbox.exceptions import SandboxUnavailable
from sandbox.kernel_program import END, SKIPPED_NAMED
from sandbox.output import DEFAULT_LIMIT_CHARS, CappedStream, LiveOutput, OutputSink
from sandbox.seccomp import seccomp_profile_json
from traces.artifacts import sanitise_name

logger = structlog.get_logger(__name__)

#: Marks the backend's containers. Not the image's ``org.devassist.sandbox`` label: containers
#: inherit their image's labels, so every container of the image carries that one.
LABEL = "org.devassist.container"
LABEL_HOST = "org.devassist.host"
LABEL_PID = "org.devassist.pid"
LABEL_EXPIRES = "org.devassist.expires_at"
LABEL_ROLE = "org.devassist.role"
#: The ``session_label`` option's value, when one is set.
LABEL_SESSION = "org.devassist.session"
#: A session container's owner (a run's id): ``remove_owned`` finds them by it.
LABEL_OWNER = "org.devassist.owner"

#: The container's only writable place (its own tmpfs, nothing of the host).
CONTAINER_TMP = "/tmp"  # noqa: S108
#: What every container runs: the kernel, sent as its command line.
KERNEL_SOURCE = (Path(__file__).resolve().parent.parent / "kernel_program.py").read_text()
#: The most a cell's report (the JSON before its files' bytes) may hold.
REPORT_MAX_BYTES = 1024 * 1024
#: Seconds the end of a cell (its report and files) may take past the cell's timeout.
REPORT_GRACE_S = 5.0
#: Seconds a container may outlive its deadline before any reaper removes it.
REAP_GRACE_S = 60
_HOST = socket.gethostname()
_STREAM_STDERR = 2
_READ_CHUNK = 65536
#: Covers the engine's writable ``/dev/mqueue`` (the IPC namespace's message queues stay usable
#: through ``mq_open``; the path is not writable like the rest of the filesystem).
MQUEUE_TMPFS = "ro,nosuid,nodev,noexec,size=0"
ENGINE_HINT = (
    "Start the Docker engine (or set DOCKER_HOST), then build the sandbox image with "
    "`python manage.py sandbox_image build`."
)


@dataclass(frozen=True)
class FileLimits:
    """Caps on the output files one execution brings back."""

    files: int = 20
    file_bytes: int = 10 * 1024 * 1024
    total_bytes: int = 25 * 1024 * 1024

    def as_message(self) -> dict[str, int]:
        return {"files": self.files, "file_bytes": self.file_bytes, "total_bytes": self.total_bytes}


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 256
    pids: int = 128
    cpus: float = 1.0
    tmpfs_mb: int = 64
    nofile: int = 256
    fsize_mb: int = 128


class DockerSandbox:
    """``SandboxBackend`` on a Docker engine. Thread-safe; ``run`` blocks its calling thread."""

    name = "docker"

    def __init__(
        self,
        *,
        image: str | None = None,
        memory_mb: int = 256,
        pids_limit: int = 128,
        cpus: float = 1.0,
        tmpfs_mb: int = 64,
        nofile: int = 256,
        fsize_mb: int = 128,
        pool_size: int = 2,
        pool_max_idle_s: float = 600.0,
        reap_interval_s: float = 60.0,
        output_limit_chars: int = DEFAULT_LIMIT_CHARS,
        max_timeout_s: float = 60.0,
        runtime: str = "",
        session_label: str = "",
        output_files_max: int = 20,
        output_file_max_bytes: int = 10 * 1024 * 1024,
        output_files_max_bytes: int = 25 * 1024 * 1024,
        session_max_s: float = 3600.0,
    ) -> None:
        self._image = image
        self.runtime = runtime
        self.session_label = session_label
        self.limits = Limits(
            memory_mb=memory_mb,
            pids=pids_limit,
            cpus=cpus,
            tmpfs_mb=tmpfs_mb,
            nofile=nofile,
            fsize_mb=fsize_mb,
        )
        self.pool_size = max(0, pool_size)
        self.pool_max_idle_s = pool_max_idle_s
        self.reap_interval_s = reap_interval_s
        self.output_limit_chars = output_limit_chars
        self.max_timeout_s = max_timeout_s
        self.file_limits = FileLimits(
            files=output_files_max,
            file_bytes=output_file_max_bytes,
            total_bytes=output_files_max_bytes,
        )
        self.session_max_s = session_max_s
        self._client: DockerClient | None = None
        self._lock = threading.Lock()
        self._idle: deque[tuple[Container, float]] = deque()
        #: Containers this process's executions and sessions hold (its reaper leaves them).
        self._held: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._removals = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandbox-rm")

    # -- lifecycle --

    @property
    def image(self) -> str:
        if self._image is None:
            from sandbox.image import sandbox_image_ref

            self._image = sandbox_image_ref()
        return self._image

    def client(self) -> DockerClient:
        with self._lock:
            if self._client is None:
                try:
                    client = docker_client(timeout_s=30)
                    client.ping()
                except (DockerException, OSError) as exc:
                    raise SandboxUnavailable(
                        f"No Docker engine is reachable: {exc}", hint=ENGINE_HINT
                    ) from exc
                self._client = client
            return self._client

    def start(self) -> None:
        """Reap orphans now and start the pool/reaper thread (idempotent)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._maintain, name="sandbox-pool", daemon=True)
        self.reap_orphans()
        self._thread.start()
        _started.add(self)

    def close(self) -> None:
        """Stop the pool and the reaper, and remove every container this backend holds (the
        idle pool's, and those of executions and sessions still open)."""
        _started.discard(self)
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=30)
        self._thread = None
        self._removals.shutdown(wait=True)
        self._removals = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sandbox-rm")
        while True:
            with self._lock:
                if not self._idle:
                    break
                container, _ = self._idle.popleft()
            self._remove(container)
        # Containers still held (a run's session at process exit) serve nothing after this.
        with self._lock:
            held, self._held = sorted(self._held), set()
            client = self._client
        if client is not None:
            for container_id in held:
                self._remove(client.containers.prepare_model({"Id": container_id}))
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    # -- execution --

    def run(
        self,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event | None = None,
        on_output: OutputSink | None = None,
        inputs: tuple[SandboxFile, ...] = (),
    ) -> ExecResult:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        kernel = self._open(deadline_s=timeout_s + REAP_GRACE_S, warm=True)
        result: ExecResult | None = None
        try:
            result, _ = self._cell(
                kernel,
                code=code,
                timeout_s=timeout_s,
                cancel=cancel,
                on_output=on_output,
                inputs=inputs,
            )
            return result
        finally:
            if result is not None and not (result.timed_out or result.cancelled):
                # Single use: removing it need not delay the answer.
                self._removals.submit(self._close_kernel, kernel)
            else:
                self._close_kernel(kernel)
            logger.info(
                "sandbox_executed",
                warm=kernel.warm,
                container=kernel.container.short_id,
                duration_ms=result.duration_ms if result else None,
                timed_out=result.timed_out if result else None,
            )

    def session(self, *, owner: str, inputs: tuple[SandboxFile, ...] = ()) -> DockerSession:
        return DockerSession(self, owner=owner, inputs=inputs)

    def remove_owned(self, owner: str) -> int:
        client = self.client()
        try:
            listed = client.api.containers(
                all=True, filters={"label": [LABEL, f"{LABEL_OWNER}={owner}"]}
            )
        except (DockerException, OSError) as exc:
            raise SandboxUnavailable(f"Could not list sandbox containers: {exc}") from exc
        for entry in listed:
            self._remove(client.containers.prepare_model({"Id": entry["Id"]}))
        if listed:
            logger.info("sandbox_owner_containers_removed", owner=owner, count=len(listed))
        return len(listed)

    def _open(self, *, deadline_s: float, warm: bool, owner: str = "") -> _Kernel:
        """A started container with its kernel attached: an idle one of the pool when ``warm``
        and there is one, else a new one (labelled with ``owner`` when given)."""
        self.client()
        container = self._take_warm() if warm else None
        from_pool = container is not None
        try:
            if container is None:
                container = self._create(
                    deadline_s=deadline_s, role="session" if owner else "exec", owner=owner
                )
                sock = self._attach(container)
                container.start()
            else:
                sock = self._attach(container)
        except (APIError, DockerException, OSError) as exc:
            if container is not None:
                self._remove(container)
            if isinstance(exc, APIError) and exc.status_code == 404:
                raise SandboxUnavailable(
                    f"Sandbox image {self.image} is missing.",
                    hint="Build it with `python manage.py sandbox_image build`.",
                ) from exc
            if self.runtime and "runtime" in str(exc).lower():
                raise SandboxUnavailable(
                    f"The engine cannot run the OCI runtime {self.runtime!r}: {exc}",
                    hint="Install it and register it with the engine (`runtimes` in "
                    "daemon.json), or unset SANDBOX_RUNTIME to use the engine's default.",
                ) from exc
            raise SandboxUnavailable(f"Could not start a sandbox: {exc}", hint=ENGINE_HINT) from exc
        finally:
            if warm and self.pool_size:
                self._wake.set()
        raw = _raw_socket(sock)
        with self._lock:
            self._held.add(container.id)
        return _Kernel(container=container, raw=raw, reader=_FrameReader(raw), warm=from_pool)

    def _close_kernel(self, kernel: _Kernel) -> None:
        with contextlib.suppress(OSError):
            kernel.raw.close()
        self._remove(kernel.container)
        with self._lock:
            self._held.discard(kernel.container.id)

    def _cell(
        self,
        kernel: _Kernel,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event | None,
        on_output: OutputSink | None,
        inputs: tuple[SandboxFile, ...],
    ) -> tuple[ExecResult, bool]:
        """Run one cell in ``kernel``; returns its result and whether the kernel is still
        there to run the next one (not when it died, timed out, was cancelled or sent a report
        that breaks the protocol or the file limits)."""
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        nonce = secrets.token_hex(16)
        header = json.dumps(
            {
                "id": nonce,
                "code": code.encode("utf-8", errors="surrogatepass").decode(
                    "utf-8", errors="replace"
                ),
                "inputs": [{"name": item.name, "size": item.size} for item in inputs],
                "limits": self.file_limits.as_message(),
            }
        ).encode()
        stdout = CappedStream(self.output_limit_chars)
        stderr = CappedStream(self.output_limit_chars)
        marker = END + nonce.encode()
        out_end = _CellEnd(marker, limits=self.file_limits)
        err_end = _CellEnd(marker, limits=None)
        livefeed = LiveOutput(on_output, limit_chars=self.output_limit_chars) if on_output else None
        started = time.monotonic()
        deadline = started + timeout_s
        timed_out = cancelled = ended = False
        broken = ""
        try:
            self._send(kernel.raw, [str(len(header)).encode() + b"\n" + header, *inputs], deadline)
            while not (out_end.done and err_end.done):
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                if out_end.found and not out_end.extended:
                    # The code is over: its report and files get time of their own.
                    deadline = max(deadline, time.monotonic() + REPORT_GRACE_S)
                    out_end.extended = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                due = livefeed.due_in() if livefeed is not None else None
                frame = kernel.reader.next(min(remaining, 0.25 if due is None else min(0.25, due)))
                if frame is None:
                    if livefeed is not None:
                        livefeed.flush()
                    continue
                stream, data = frame
                if not data and stream == 0:
                    ended = True  # the kernel closed its streams: it is gone
                    break
                name = "stderr" if stream == _STREAM_STDERR else "stdout"
                printed = (err_end if name == "stderr" else out_end).feed(data)
                if printed:
                    (stderr if name == "stderr" else stdout).feed(printed)
                    if livefeed is not None:
                        livefeed.feed(name, printed)
        except ProtocolError as exc:
            broken = str(exc)
            logger.warning("sandbox_report_refused", reason=broken)
        except TimeoutError:
            timed_out = True
        except (OSError, ConnectionError) as exc:
            logger.warning("sandbox_stream_failed", error=str(exc))
            ended = True
        if livefeed is not None:
            livefeed.flush(final=True)
        report = out_end.report if out_end.done and err_end.done else None
        exit_code: int | None = None
        oom_killed = False
        if report is not None:
            exit_code = report.exit_code
        elif ended:
            exit_code, oom_killed, timed_out = self._exit_status(kernel.container, deadline)
        duration_ms = int((time.monotonic() - started) * 1000)
        out, out_cut = stdout.text()
        err, err_cut = stderr.text()
        if timed_out:
            err = (err + "\n" if err else "") + f"Execution timed out after {timeout_s:g} s."
        if broken:
            err = (err + "\n" if err else "") + f"The sandbox's report was refused: {broken}."
        result = ExecResult(
            stdout=out,
            stderr=err,
            exit_code=exit_code,
            duration_ms=duration_ms,
            timed_out=timed_out,
            oom_killed=oom_killed,
            truncated=out_cut or err_cut,
            backend=self.name,
            image=self.image,
            cancelled=cancelled,
            files=report.files if report is not None else (),
            skipped_files=report.skipped if report is not None else (),
            skipped_more=report.skipped_more if report is not None else 0,
        )
        return result, report is not None

    @staticmethod
    def _send(raw: socket.socket, parts: list[bytes | SandboxFile], deadline: float) -> None:
        """Write the message and the inputs' bytes, giving up (``TimeoutError``) at
        ``deadline``: a kernel that stops reading cannot hold the thread."""
        try:
            for part in parts:
                raw.settimeout(max(0.001, deadline - time.monotonic()))
                raw.sendall(part.data if isinstance(part, SandboxFile) else part)
        finally:
            with contextlib.suppress(OSError):
                raw.settimeout(None)

    def _exit_status(self, container: Container, deadline: float) -> tuple[int | None, bool, bool]:
        """``(exit_code, oom_killed, timed_out)`` of a kernel that is gone."""
        try:
            remaining = max(1.0, deadline - time.monotonic())
            exit_code = int(container.wait(timeout=remaining)["StatusCode"])
        except NotFound:  # removed meanwhile (its session was closed)
            return None, False, False
        except Exception:  # a wait past the deadline is a timeout too
            return None, False, True
        oom_killed = False
        if exit_code == 137:  # SIGKILL: the kernel's OOM killer, or the pids limit
            with contextlib.suppress(APIError, DockerException, OSError):
                container.reload()
                oom_killed = bool(container.attrs["State"].get("OOMKilled"))
        return exit_code, oom_killed, False

    # -- containers --

    def _create(self, *, deadline_s: float, role: str = "exec", owner: str = "") -> Container:
        limits = self.limits
        expires_at = int(time.time() + deadline_s)
        labels = {
            LABEL: "1",
            LABEL_ROLE: role,
            LABEL_HOST: _HOST,
            LABEL_PID: str(os.getpid()),
            LABEL_EXPIRES: str(expires_at),
        }
        if self.session_label:
            labels[LABEL_SESSION] = self.session_label
        if owner:
            labels[LABEL_OWNER] = owner
        return self.client().containers.create(
            self.image,
            command=["python3", "-I", "-u", "-c", KERNEL_SOURCE],
            stdin_open=True,
            user="65534:65534",
            working_dir=CONTAINER_TMP,
            environment={},
            hostname="sandbox",
            network_mode="none",
            read_only=True,
            tmpfs={
                CONTAINER_TMP: f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777",
                "/dev/mqueue": MQUEUE_TMPFS,
            },
            cap_drop=["ALL"],
            security_opt=["no-new-privileges:true", f"seccomp={seccomp_profile_json()}"],
            mem_limit=f"{limits.memory_mb}m",
            memswap_limit=f"{limits.memory_mb}m",
            pids_limit=limits.pids,
            nano_cpus=int(limits.cpus * 1e9),
            ulimits=[
                Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
                Ulimit(
                    name="fsize",
                    soft=limits.fsize_mb * 1024 * 1024,
                    hard=limits.fsize_mb * 1024 * 1024,
                ),
            ],
            init=True,
            ipc_mode="none",
            cgroupns="private",
            runtime=self.runtime or None,
            labels=labels,
            name=f"devassist-sandbox-{uuid.uuid4().hex[:12]}",
        )

    def _attach(self, container: Container) -> Any:
        return container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})

    def _remove(self, container: Container) -> None:
        try:
            container.remove(force=True)
        except NotFound:
            pass
        except (APIError, DockerException, OSError) as exc:
            # The reaper gets it later: the container's labels say when it expires.
            logger.warning("sandbox_remove_failed", container=container.short_id, error=str(exc))

    # -- warm pool --

    def _take_warm(self) -> Container | None:
        while True:
            with self._lock:
                if not self._idle:
                    return None
                container, born = self._idle.popleft()
            if time.monotonic() - born < self.pool_max_idle_s:
                return container
            self._remove(container)

    def _maintain(self) -> None:
        """Keeps ``pool_size`` idle containers, recycles stale ones, reaps orphans."""
        next_reap = time.monotonic() + self.reap_interval_s
        while not self._stop.is_set():
            try:
                self._refill()
                if time.monotonic() >= next_reap:
                    self.reap_orphans()
                    next_reap = time.monotonic() + self.reap_interval_s
            except Exception:
                logger.exception("sandbox_pool_maintenance_failed")
                self._stop.wait(5)
            self._wake.wait(timeout=5)
            self._wake.clear()

    def _refill(self) -> None:
        self._take_stale()
        while not self._stop.is_set():
            with self._lock:
                if len(self._idle) >= self.pool_size:
                    return
            container = self._create(
                deadline_s=self.pool_max_idle_s + self.max_timeout_s + REAP_GRACE_S,
                role="pool",
            )
            try:
                container.start()
            except (APIError, DockerException, OSError):
                self._remove(container)
                raise
            with self._lock:
                self._idle.append((container, time.monotonic()))

    def _take_stale(self) -> None:
        now = time.monotonic()
        stale: list[Container] = []
        with self._lock:
            while self._idle and now - self._idle[0][1] >= self.pool_max_idle_s:
                stale.append(self._idle.popleft()[0])
        for container in stale:
            self._remove(container)

    # -- orphans --

    def reap_orphans(self) -> int:
        """Remove labelled containers past their deadline, and those of dead processes on this
        host. Returns how many were removed."""
        try:
            client = self.client()
            # The plain listing (ids and labels in one call): containers may vanish meanwhile.
            listed = client.api.containers(all=True, filters={"label": LABEL})
        except (SandboxUnavailable, DockerException, OSError) as exc:
            logger.warning("sandbox_reap_failed", error=str(exc))
            return 0
        with self._lock:
            mine = {c.id for c, _ in self._idle} | self._held
        removed = 0
        now = time.time()
        for entry in listed:
            if entry["Id"] in mine:
                continue
            labels = entry.get("Labels") or {}
            try:
                expired = int(labels.get(LABEL_EXPIRES, "0")) < now
            except ValueError:
                expired = True
            orphaned = labels.get(LABEL_HOST) == _HOST and not _pid_alive(labels.get(LABEL_PID))
            if expired or orphaned:
                self._remove(client.containers.prepare_model({"Id": entry["Id"]}))
                removed += 1
        if removed:
            logger.info("sandbox_orphans_reaped", count=removed)
        return removed


#: Backends with a pool running, so that process exit (and the test session) can close them all.
_started: weakref.WeakSet[DockerSandbox] = weakref.WeakSet()


@atexit.register
def close_all() -> None:
    """Close every started backend: their idle pool containers are removed."""
    for backend in list(_started):
        backend.close()


def _pid_alive(pid: str | None) -> bool:
    try:
        os.kill(int(pid or ""), 0)
    except ValueError:
        return False
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _raw_socket(sock: Any) -> socket.socket:
    raw = getattr(sock, "_sock", sock)
    if not isinstance(raw, socket.socket):
        raise SandboxUnavailable("Unsupported Docker transport for attaching to a container.")
    return raw


class _FrameReader:
    """Reads Docker's multiplexed attach stream (8-byte headers: stream, size) without
    blocking past a timeout. ``next`` returns ``(stream, data)``, ``(0, b"")`` at end of stream,
    or None when nothing arrived in time."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.eof = False
        # poll, not select: select() fails outright on a descriptor numbered past 1,023, which
        # a busy server process (its connections, its streams) reaches.
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)

    def next(self, timeout_s: float) -> tuple[int, bytes] | None:
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            if self.eof:
                return (0, b"")
            if not self._poll.poll(timeout_s * 1000):
                return None
            chunk = self.sock.recv(_READ_CHUNK)
            if not chunk:
                self.eof = True
            else:
                self.buffer += chunk

    def _parse(self) -> tuple[int, bytes] | None:
        if len(self.buffer) < 8:
            return None
        stream, size = struct.unpack(">BxxxL", self.buffer[:8])
        if size == 0:
            del self.buffer[:8]
            return self._parse()
        available = len(self.buffer) - 8
        if available == 0:
            return None
        # Hand over partial frames too, so a huge frame never sits whole in memory.
        take = min(size, available)
        data = bytes(self.buffer[8 : 8 + take])
        if take == size:
            del self.buffer[: 8 + size]
        else:
            del self.buffer[8 : 8 + take]
            self.buffer[4:8] = struct.pack(">L", size - take)
        return stream, data


@dataclass
class _Kernel:
    """A started container whose kernel is attached: what one execution or a session holds."""

    container: Container
    raw: socket.socket
    reader: _FrameReader
    #: Whether it came from the warm pool.
    warm: bool
    born: float = field(default_factory=time.monotonic)

    def ended(self) -> bool:
        """Whether the kernel is gone (its stream ended: the container was removed or its
        process died) while no cell ran. What it printed since its last cell (a thread the
        code left running) is dropped."""
        try:
            while (frame := self.reader.next(0)) is not None:
                if frame == (0, b""):
                    return True
        except OSError:
            return True
        return False


class DockerSession:
    """``SandboxSession`` on ``DockerSandbox``: one kernel, in a container labelled with the
    owner, for all its executions while it lives (at most ``session_max_s``); a fresh one,
    given the inputs again, after a loss. Thread-safe: executions take turns, ``close`` does
    not wait for them."""

    def __init__(
        self, backend: DockerSandbox, *, owner: str, inputs: tuple[SandboxFile, ...]
    ) -> None:
        self.backend = backend
        self.owner = owner
        self.inputs = inputs
        self._kernel: _Kernel | None = None
        self._closed = False
        #: The last kernel was lost: the next execution's result says so.
        self._lost = False
        self._lock = threading.Lock()  # guards the fields above
        self._turn = threading.Lock()  # one execution at a time

    def run(
        self,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event | None = None,
        on_output: OutputSink | None = None,
    ) -> ExecResult:
        with self._turn:
            kernel, fresh = self._kernel_for_run()
            result, alive = self.backend._cell(
                kernel,
                code=code,
                timeout_s=timeout_s,
                cancel=cancel,
                on_output=on_output,
                inputs=self.inputs if fresh else (),
            )
            restarted = fresh and self._lost
            with self._lock:
                self._lost = not alive
                if not alive and self._kernel is kernel:
                    self._kernel = None
            if not alive:
                self.backend._close_kernel(kernel)
            logger.info(
                "sandbox_session_executed",
                owner=self.owner,
                container=kernel.container.short_id,
                fresh=fresh,
                alive=alive,
                duration_ms=result.duration_ms,
            )
            return replace(result, state_lost=not alive, state_restarted=restarted)

    def _kernel_for_run(self) -> tuple[_Kernel, bool]:
        """The session's kernel, and whether it is new (one past ``session_max_s`` is
        retired first: its state counts as lost)."""
        with self._lock:
            if self._closed:
                raise SandboxUnavailable("This sandbox session is closed.")
            kernel = self._kernel
            if kernel is not None and (
                time.monotonic() - kernel.born >= self.backend.session_max_s or kernel.ended()
            ):
                self._kernel, self._lost = None, True
                self.backend._removals.submit(self.backend._close_kernel, kernel)
                kernel = None
        if kernel is not None:
            return kernel, False
        kernel = self.backend._open(
            deadline_s=self.backend.session_max_s + REAP_GRACE_S, warm=False, owner=self.owner
        )
        with self._lock:
            if not self._closed:
                self._kernel = kernel
                return kernel, True
        self.backend._close_kernel(kernel)
        raise SandboxUnavailable("This sandbox session is closed.")

    def close(self) -> None:
        with self._lock:
            self._closed = True
            kernel, self._kernel = self._kernel, None
        if kernel is not None:
            self.backend._close_kernel(kernel)


class ProtocolError(Exception):
    """The end of a cell broke the kernel's protocol or the file limits."""


@dataclass(frozen=True)
class _Report:
    exit_code: int | None
    files: tuple[SandboxFile, ...]
    skipped: tuple[SkippedFile, ...]
    skipped_more: int


class _CellEnd:
    """Finds the end of a cell in one of its streams: the marker (with the nonce only this cell
    was sent); on stdout (``limits`` given) then the report's length, the report, and the
    files' bytes it announces, checked against ``limits``. ``feed`` returns what the program
    printed (everything before the marker), holding back bytes that may begin the marker.
    Raises ``ProtocolError``."""

    def __init__(self, marker: bytes, *, limits: FileLimits | None) -> None:
        self.marker = marker
        self.limits = limits
        self.buffer = bytearray()
        self.found = False
        self.extended = False
        self.done = False
        self.report: _Report | None = None
        self._length: int | None = None
        self._head: dict[str, Any] | None = None
        self._sizes: list[int] = []

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        self.buffer += data
        printed = b""
        if not self.found:
            at = self.buffer.find(self.marker)
            if at < 0:
                keep = _partial_marker(self.buffer, self.marker)
                printed = bytes(self.buffer[: len(self.buffer) - keep])
                del self.buffer[: len(self.buffer) - keep]
                return printed
            printed = bytes(self.buffer[:at])
            del self.buffer[: at + len(self.marker)]
            self.found = True
        if self.limits is None:
            if self.buffer[:1] == b"\n":
                self.done = True
                self.buffer.clear()
            elif self.buffer:
                raise ProtocolError("the end of the error stream is malformed")
        else:
            self._read_report(self.limits)
        return printed

    def _read_report(self, limits: FileLimits) -> None:
        if self._length is None:
            line_end = self.buffer.find(b"\n")
            if line_end < 0:
                if len(self.buffer) > 32:
                    raise ProtocolError("the report has no length")
                return
            try:
                self._length = int(bytes(self.buffer[:line_end]).strip())
            except ValueError:
                raise ProtocolError("the report has no length") from None
            if not 0 < self._length <= REPORT_MAX_BYTES:
                raise ProtocolError(f"a report of {self._length} bytes")
            del self.buffer[: line_end + 1]
        if self._head is None:
            if len(self.buffer) < self._length:
                return
            self._head = _report_head(bytes(self.buffer[: self._length]), limits)
            del self.buffer[: self._length]
            self._sizes = [item["size"] for item in self._head["files"]]
        needed = sum(self._sizes)
        if len(self.buffer) > needed:
            raise ProtocolError("more bytes than the report announced")
        if len(self.buffer) < needed:
            return
        files, offset = [], 0
        for item, size in zip(self._head["files"], self._sizes, strict=True):
            files.append(
                SandboxFile(name=item["name"], data=bytes(self.buffer[offset : offset + size]))
            )
            offset += size
        self.buffer.clear()
        self.report = _Report(
            exit_code=self._head["exit_code"],
            files=tuple(files),
            skipped=self._head["skipped"],
            skipped_more=self._head["skipped_more"],
        )
        self.done = True


def _report_head(raw: bytes, limits: FileLimits) -> dict[str, Any]:
    """The report's JSON, checked: its shape, and its files against ``limits``."""
    try:
        head = json.loads(raw)
    except ValueError:
        raise ProtocolError("the report is not JSON") from None
    if not isinstance(head, dict):
        raise ProtocolError("the report is not a JSON object")
    exit_code = head.get("exit_code")
    if isinstance(exit_code, bool) or not isinstance(exit_code, int | None):
        raise ProtocolError("the report's exit code is not a number")
    files = head.get("files")
    if not isinstance(files, list) or not all(
        isinstance(item, dict)
        and isinstance(item.get("name"), str)
        and isinstance(item.get("size"), int)
        and not isinstance(item.get("size"), bool)
        and 0 <= item["size"] <= limits.file_bytes
        for item in files
    ):
        raise ProtocolError("the report's files are malformed or over the size limit")
    if len(files) > limits.files or sum(item["size"] for item in files) > limits.total_bytes:
        raise ProtocolError("the report's files are over the limits")
    skipped_raw = head.get("skipped")
    skipped_more = head.get("skipped_more")
    if (
        not isinstance(skipped_raw, list)
        or not isinstance(skipped_more, int)
        or isinstance(skipped_more, bool)
        or skipped_more < 0
    ):
        raise ProtocolError("the report's skipped files are malformed")
    # Names and reasons are the program's to choose: made safe to show and to store.
    skipped = tuple(
        SkippedFile(
            name=sanitise_name(str(item.get("name", ""))),
            reason=storable_text(str(item.get("reason", "")))[:300],
        )
        for item in skipped_raw[:SKIPPED_NAMED]
        if isinstance(item, dict)
    )
    return {
        "exit_code": exit_code,
        "files": files,
        "skipped": skipped,
        "skipped_more": skipped_more + max(0, len(skipped_raw) - SKIPPED_NAMED),
    }


def _partial_marker(buffer: bytearray, marker: bytes) -> int:
    """How many bytes at the end of ``buffer`` begin ``marker``."""
    for size in range(min(len(marker) - 1, len(buffer)), 0, -1):
        if buffer.endswith(marker[:size]):
            return size
    return 0

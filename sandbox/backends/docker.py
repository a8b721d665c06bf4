"""The Docker sandbox: one fresh, locked-down container per execution, a warm pool of idle
single-use containers, and a reaper for containers a crashed process left behind.

Isolation (the container is the security boundary; the AST scan in front of it only refuses
clearly dangerous code early): no network, read-only root filesystem, ``/tmp`` as a small tmpfs
(nosuid, nodev), ``/dev/mqueue`` covered by an empty read-only tmpfs, user 65534:65534, every
capability dropped, ``no-new-privileges``, the project's seccomp profile (``sandbox/seccomp.py``:
Docker's default without io_uring, ptrace, process_vm_*, keyrings, bpf, userfaultfd and perf),
private IPC and cgroup namespaces, memory with swap equal to it, a pids limit, a CPU quota,
``nofile`` and ``fsize`` ulimits, an init process, and no environment from the host. Code goes
in on stdin; nothing of the host is mounted. An OCI runtime (``runsc`` for gVisor) can be
chosen with the ``runtime`` option.

The timeout is kept on the host with a monotonic clock: when it passes, the container is
removed with force and the result says ``timed_out``. Output is read incrementally into
``CappedStream``s, so a flood of output never reaches host memory.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import socket
import struct
import threading
import time
import uuid
import weakref
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import structlog
from docker import DockerClient
from docker.errors import APIError, DockerException, NotFound
from docker.models.containers import Container
from docker.types import Ulimit

from sandbox.backends.base import ExecResult
from sandbox.engine import docker_client
from sandbox.exceptions import SandboxUnavailable
from sandbox.output import DEFAULT_LIMIT_CHARS, CappedStream
from sandbox.seccomp import seccomp_profile_json

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

#: The container's only writable place (its own tmpfs, nothing of the host).
CONTAINER_TMP = "/tmp"  # noqa: S108
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
        self._client: DockerClient | None = None
        self._lock = threading.Lock()
        self._idle: deque[tuple[Container, float]] = deque()
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
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle)

    # -- execution --

    def run(
        self, *, code: str, timeout_s: float, cancel: threading.Event | None = None
    ) -> ExecResult:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self.client()
        container = self._take_warm()
        warm = container is not None
        try:
            if container is None:
                container = self._create(deadline_s=timeout_s + REAP_GRACE_S)
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
            if self.pool_size:
                self._wake.set()
        result: ExecResult | None = None
        try:
            result = self._execute(container, sock, code=code, timeout_s=timeout_s, cancel=cancel)
            return result
        finally:
            if result is not None and not (result.timed_out or result.cancelled):
                # The process has exited: removing it need not delay the answer.
                self._removals.submit(self._remove, container)
            else:
                self._remove(container)
            logger.info(
                "sandbox_executed",
                warm=warm,
                container=container.short_id,
                duration_ms=result.duration_ms if result else None,
                timed_out=result.timed_out if result else None,
            )

    def _execute(
        self,
        container: Container,
        sock: Any,
        *,
        code: str,
        timeout_s: float,
        cancel: threading.Event | None,
    ) -> ExecResult:
        raw = _raw_socket(sock)
        stdout = CappedStream(self.output_limit_chars)
        stderr = CappedStream(self.output_limit_chars)
        started = time.monotonic()
        deadline = started + timeout_s
        timed_out = cancelled = False
        try:
            raw.sendall(code.encode("utf-8", errors="surrogatepass"))
            raw.shutdown(socket.SHUT_WR)
            reader = _FrameReader(raw)
            while True:
                if cancel is not None and cancel.is_set():
                    cancelled = True
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                frame = reader.next(min(remaining, 0.25))
                if frame is None:
                    continue
                stream, data = frame
                if not data and stream == 0:
                    break  # end of output: the process closed its streams
                (stderr if stream == _STREAM_STDERR else stdout).feed(data)
        except (OSError, ConnectionError) as exc:
            logger.warning("sandbox_stream_failed", error=str(exc))
        finally:
            with contextlib.suppress(OSError):
                raw.close()
        exit_code: int | None = None
        oom_killed = False
        if not (timed_out or cancelled):
            try:
                remaining = max(1.0, deadline - time.monotonic())
                exit_code = int(container.wait(timeout=remaining)["StatusCode"])
                if exit_code == 137:  # SIGKILL: the kernel's OOM killer, or the pids limit
                    container.reload()
                    oom_killed = bool(container.attrs["State"].get("OOMKilled"))
            except Exception:  # a wait past the deadline is a timeout too
                timed_out = True
        duration_ms = int((time.monotonic() - started) * 1000)
        out, out_cut = stdout.text()
        err, err_cut = stderr.text()
        if timed_out:
            err = (err + "\n" if err else "") + f"Execution timed out after {timeout_s:g} s."
        return ExecResult(
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
        )

    # -- containers --

    def _create(self, *, deadline_s: float, role: str = "exec") -> Container:
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
        return self.client().containers.create(
            self.image,
            command=["python3", "-I", "-u", "-"],
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
            mine = {c.id for c, _ in self._idle}
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

    def next(self, timeout_s: float) -> tuple[int, bytes] | None:
        while True:
            frame = self._parse()
            if frame is not None:
                return frame
            if self.eof:
                return (0, b"")
            ready, _, _ = select.select([self.sock], [], [], timeout_s)
            if not ready:
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

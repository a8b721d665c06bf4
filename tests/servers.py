"""Real servers for tests: the ASGI application in a daphne subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
DAPHNE = Path(sys.executable).with_name("daphne")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without the test run's service settings, plus ``env``."""
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"}
        and not k.startswith(("TEST_", "PYTEST_"))
    }
    return {**base, "DJANGO_SETTINGS_MODULE": "devassist.settings", **env}


def manage(env: dict[str, str], *args: str) -> str:
    """Run ``manage.py`` with ``clean_env(env)``; returns stdout, fails on a non-zero exit."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


@contextmanager
def http_server(
    command: list[str],
    *,
    port: int,
    ready_path: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    started: Callable[[subprocess.Popen[bytes]], object] | None = None,
) -> Iterator[str]:
    """Run ``command`` (a server that listens on 127.0.0.1:``port``) and yield its base URL
    once ``ready_path`` answers; the server is always stopped (a test that killed it itself
    is fine). Its output goes to a file (a pipe nobody reads would block it) and is shown when
    it fails to start. ``started`` is given the process as soon as it exists (to kill it)."""
    base_url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile() as log:

        def output() -> str:
            log.seek(0)
            return log.read().decode(errors="replace")[-5000:]

        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        if started is not None:
            started(process)
        name = Path(command[0]).name
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited with {process.returncode}:\n{output()}")
                try:
                    if httpx.get(f"{base_url}{ready_path}", timeout=2).status_code in (200, 503):
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{name} did not answer {ready_path} in time:\n{output()}")
                time.sleep(0.2)
            yield base_url
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextmanager
def daphne_server(
    env: dict[str, str],
    *,
    timeout_s: float = 30.0,
    started: Callable[[subprocess.Popen[bytes]], object] | None = None,
) -> Iterator[str]:
    """Run DevAssist under daphne with ``env`` (on top of a clean copy of os.environ) and
    yield its base URL once ``/healthz`` answers; ``started`` as for ``http_server``."""
    port = free_port()
    command = [str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), "devassist.asgi:application"]
    with http_server(
        command,
        port=port,
        ready_path="/healthz",
        env=clean_env(env),
        timeout_s=timeout_s,
        started=started,
    ) as base_url:
        yield base_url


@contextmanager
def otlp_grpc_process(env: dict[str, str]) -> Iterator[str]:
    """Run ``manage.py otlp_grpc`` with ``clean_env(env)`` on a free loopback port and yield
    its address (``host:port``) once it listens; then stop it with SIGTERM, which it must
    end on cleanly (exit 0, saying so): a ``RuntimeError`` otherwise."""
    address = f"127.0.0.1:{free_port()}"
    receiver = subprocess.Popen(
        [sys.executable, "manage.py", "otlp_grpc", "--address", address],
        cwd=REPO,
        env=clean_env(env),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert receiver.stdout is not None
        line = receiver.stdout.readline()
        if not line.startswith(f"OTLP/gRPC on {address}"):
            raise RuntimeError(f"manage.py otlp_grpc did not start: {line!r}")
        yield address
    finally:
        receiver.send_signal(signal.SIGTERM)
        out, _ = receiver.communicate(timeout=30)
    if receiver.returncode != 0 or "OTLP/gRPC stopped" not in out:
        raise RuntimeError(f"manage.py otlp_grpc did not stop cleanly ({receiver.returncode})")

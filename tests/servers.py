"""Real servers for tests: the ASGI application in a daphne subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
DAPHNE = Path(sys.executable).with_name("daphne")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def daphne_server(env: dict[str, str], *, timeout_s: float = 30.0) -> Iterator[str]:
    """Run DevAssist under daphne with ``env`` (on top of a clean copy of os.environ) and
    yield its base URL once ``/healthz`` answers; the server is always stopped."""
    port = free_port()
    base_env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
        and not k.startswith(("TEST_", "PYTEST_"))
    }
    full_env = {**base_env, "DJANGO_SETTINGS_MODULE": "devassist.settings", **env}
    process = subprocess.Popen(
        [str(DAPHNE), "-b", "127.0.0.1", "-p", str(port), "devassist.asgi:application"],
        cwd=REPO,
        env=full_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                output = process.stdout.read().decode(errors="replace") if process.stdout else ""
                raise RuntimeError(f"daphne exited with {process.returncode}:\n{output}")
            try:
                if httpx.get(f"{base_url}/healthz", timeout=2).status_code in (200, 503):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("daphne did not answer /healthz in time")
            time.sleep(0.2)
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

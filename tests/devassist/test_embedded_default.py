"""The zero-setup default: SQLite under the var dir and the in-memory channel layer, served by
daphne exactly as `make run` does. The only tests that use SQLite."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN_DIR = Path(sys.executable).parent
STARTUP_TIMEOUT_S = 20.0


def clean_env(var_dir: Path) -> dict[str, str]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"DATABASE_URL", "REDIS_URL", "SECRET_KEY"}
        and not name.startswith(("TEST_", "PYTEST_"))
    }
    env.update(
        DEVASSIST_VAR_DIR=str(var_dir),
        DEBUG="1",
        DJANGO_SETTINGS_MODULE="devassist.settings",
        LOG_LEVEL="WARNING",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stderr}"
    return result.stdout


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_login_page(base_url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"daphne exited with {server.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{base_url}/login/", timeout=2).status_code == HTTPStatus.OK:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"daphne did not answer /login/ in time:\n{log.read_text()}")


@pytest.fixture(scope="module")
def embedded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, str]]:
    """(base url, var dir, demo password) of a daphne serving the embedded defaults."""
    tmp_path = tmp_path_factory.mktemp("embedded")
    var_dir = tmp_path / "var"
    env = clean_env(var_dir)
    manage(env, "migrate", "--noinput")
    demo = re.search(r"Demo login: username demo  password (\S+)", manage(env, "ensure_demo_user"))
    assert demo is not None
    port = free_port()
    log = tmp_path / "daphne.log"
    with log.open("wb") as log_file:
        server = subprocess.Popen(
            [
                str(BIN_DIR / "daphne"),
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "devassist.asgi:application",
            ],
            cwd=REPO_ROOT,
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        wait_for_login_page(base_url, server, log)
        yield base_url, var_dir, demo.group(1)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def test_embedded_default_uses_sqlite_and_the_in_memory_channel_layer(
    embedded_server: tuple[str, Path, str],
) -> None:
    base_url, var_dir, _ = embedded_server

    response = httpx.get(f"{base_url}/healthz", timeout=10)

    report = response.json()
    assert report["checks"]["database"]["ok"] is True
    assert report["checks"]["database"]["vendor"] == "sqlite"
    assert report["checks"]["channel_layer"]["ok"] is True
    assert report["checks"]["channel_layer"]["backend"] == "InMemoryChannelLayer"
    assert response.status_code == HTTPStatus.OK
    assert report["status"] in {"ok", "degraded"}
    assert (var_dir / "devassist.sqlite3").is_file()
    assert (var_dir / "secret_key").is_file()


def test_embedded_default_demo_user_can_log_in(embedded_server: tuple[str, Path, str]) -> None:
    base_url, _, password = embedded_server

    with httpx.Client(base_url=base_url, timeout=10) as browser:
        assert browser.get("/").headers["location"] == "/login/?next=/"
        login_page = browser.get("/login/")
        csrf_token = login_page.cookies["csrftoken"]
        response = browser.post(
            "/login/",
            data={
                "username": "demo",
                "password": password,
                "csrfmiddlewaretoken": csrf_token,
                "next": "/",
            },
        )
        assert response.status_code == HTTPStatus.FOUND
        assert response.headers["location"] == "/"
        home = browser.get("/")

    assert home.status_code == HTTPStatus.OK
    assert "demo" in home.text

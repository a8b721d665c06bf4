"""The session-end container check of tests/conftest.py, run in nested test sessions: it counts
the containers of the session and of the processes it started, and no one else's on the engine
(a `make run` server, another test session)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.backends.docker import (
    LABEL,
    LABEL_EXPIRES,
    LABEL_HOST,
    LABEL_PID,
    LABEL_ROLE,
    LABEL_SESSION,
)
from sandbox.engine import docker_client
from tests.servers import REPO

pytestmark = pytest.mark.docker

PASSING = "def test_nothing_runs_in_the_sandbox():\n    pass\n"

#: Starts a process of the session (as tests/servers.py starts daphne) that creates a sandbox
#: container and keeps running, so no reaper takes the container for an orphan; records
#: ``<pid> <container id>`` where the outer test can clean up.
LEAKING = """
import os, subprocess, sys
from pathlib import Path
from tests.servers import REPO, clean_env

CODE = (
    "import time, django\\n"
    "django.setup()\\n"
    "from sandbox.backends import get_sandbox\\n"
    "print(get_sandbox()._create(deadline_s=600).id, flush=True)\\n"
    "time.sleep(300)\\n"
)

def test_a_process_of_this_session_leaves_a_container():
    process = subprocess.Popen(
        [sys.executable, "-c", CODE],
        cwd=REPO, env=clean_env({}), stdout=subprocess.PIPE, text=True,
    )
    container = process.stdout.readline().strip()
    Path(os.environ["LEAK_RECORD"]).write_text(f"{process.pid} {container}")
    assert container
"""


#: The nested session's conftest: the check under test, from the project's root conftest.
CONFTEST = "from tests.conftest import _no_sandbox_container_outlives_the_session  # noqa\n"


def nested_session(tmp_path: Path, test_source: str) -> subprocess.CompletedProcess[str]:
    """Run ``test_source`` as a pytest session of its own, with the project's settings and
    the session-end check."""
    (tmp_path / "conftest.py").write_text(CONFTEST)
    probe = tmp_path / "test_probe.py"
    probe.write_text(test_source)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-c",
            str(REPO / "pyproject.toml"),
            "--rootdir",
            str(REPO),
            "-q",
            str(probe),
        ],
        cwd=REPO,
        env={**os.environ, "LEAK_RECORD": str(tmp_path / "leak")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_containers_of_other_devassist_processes_on_the_engine_do_not_count(
    tmp_path, sandbox_image
):
    # A `make run` server's pool container (a live process on this host, no session label)
    # and another test session's.
    far = str(int(time.time()) + 3600)
    common = {LABEL: "1", LABEL_ROLE: "pool", LABEL_HOST: socket.gethostname(), LABEL_EXPIRES: far}
    client = docker_client(timeout_s=10)
    others = [
        client.containers.create(sandbox_image, command=["true"], labels={**common, **extra})
        for extra in ({LABEL_PID: "1"}, {LABEL_PID: "1", LABEL_SESSION: "tests-elsewhere"})
    ]
    try:
        result = nested_session(tmp_path, PASSING)
    finally:
        for container in others:
            container.remove(force=True)
        client.close()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_a_container_left_by_a_process_the_session_started_fails_the_session(
    tmp_path, sandbox_image
):
    record = tmp_path / "leak"
    try:
        result = nested_session(tmp_path, LEAKING)
    finally:
        pid, _, container = record.read_text().partition(" ") if record.exists() else ("", "", "")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
        if container:
            client = docker_client(timeout_s=10)
            try:
                client.api.remove_container(container, force=True)
            finally:
                client.close()
    assert container, result.stdout + result.stderr
    assert result.returncode != 0
    assert "sandbox containers left behind" in result.stdout
    assert "1 passed" in result.stdout  # the test passed; the session's check failed

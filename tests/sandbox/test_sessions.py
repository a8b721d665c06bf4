"""Sessions: one interpreter for a run's executions, in a real container labelled with its owner.
State persists between executions and never crosses sessions; each execution keeps its own
timeout and output limits; a lost interpreter is said so, and the next execution starts a
fresh one; closing removes the container, even mid-execution."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from sandbox.backends.base import SandboxFile
from sandbox.backends.docker import LABEL_OWNER, DockerSandbox, DockerSession
from sandbox.engine import docker_client
from sandbox.exceptions import SandboxUnavailable


def owned(owner: str) -> list[str]:
    """The ids of the containers labelled with ``owner``."""
    client = docker_client(timeout_s=10)
    try:
        listed = client.api.containers(all=True, filters={"label": f"{LABEL_OWNER}={owner}"})
    finally:
        client.close()
    return [entry["Id"] for entry in listed]


@pytest.fixture
def owner() -> str:
    return f"run-{uuid.uuid4()}"


@pytest.fixture
def session(sandbox: DockerSandbox, owner: str) -> Iterator[DockerSession]:
    opened = sandbox.session(owner=owner)
    yield opened
    opened.close()


def test_variables_imports_and_files_persist_between_executions(session):
    first = session.run(
        code="import json\nx = 41\nopen('/tmp/kept.txt', 'w').write('kept')", timeout_s=10
    )
    second = session.run(
        code="x += 1\nprint(x, json.dumps([1]), open('/tmp/kept.txt').read())", timeout_s=10
    )

    assert first.exit_code == 0, first.stderr
    assert second.stdout == "42 [1] kept\n"
    assert (second.state_lost, second.state_restarted) == (False, False)


def test_sessions_share_nothing(sandbox, owner):
    one = sandbox.session(owner=owner)
    other = sandbox.session(owner=f"{owner}-other")
    try:
        one.run(code="secret = 'one'\nopen('/tmp/one.txt', 'w').write('1')", timeout_s=10)
        result = other.run(
            code="import os\nprint('secret' in globals(), os.path.exists('/tmp/one.txt'))",
            timeout_s=10,
        )
    finally:
        one.close()
        other.close()

    assert result.stdout == "False False\n"


def test_the_container_is_labelled_with_its_owner_and_removed_on_close(sandbox, owner):
    session = sandbox.session(owner=owner)
    assert owned(owner) == []  # nothing before the first execution

    session.run(code="pass", timeout_s=10)
    assert len(owned(owner)) == 1
    session.close()
    session.close()  # idempotent

    assert owned(owner) == []
    with pytest.raises(SandboxUnavailable, match="closed"):
        session.run(code="pass", timeout_s=10)


def test_a_script_style_exit_and_an_exception_keep_the_state(session):
    session.run(code="kept = 1", timeout_s=10)
    exited = session.run(code="import sys\nsys.exit(3)", timeout_s=10)
    raised = session.run(code="1 / 0", timeout_s=10)
    after = session.run(code="print(kept)", timeout_s=10)

    assert exited.exit_code == 3
    assert raised.exit_code == 1
    assert "ZeroDivisionError" in raised.stderr
    assert 'File "<cell>", line 1' in raised.stderr
    assert "kernel_program" not in raised.stderr
    assert after.stdout == "1\n"
    assert not any(r.state_lost for r in (exited, raised, after))


def test_a_timeout_kills_the_interpreter_and_the_next_execution_starts_afresh(session, owner):
    session.run(code="x = 1", timeout_s=10)
    started = time.monotonic()
    timed_out = session.run(code="while True:\n    pass", timeout_s=2)
    took = time.monotonic() - started
    gone = owned(owner)
    fresh = session.run(code="print('x' in globals())", timeout_s=10)
    later = session.run(code="print('still fresh')", timeout_s=10)

    assert timed_out.timed_out
    assert timed_out.exit_code is None
    assert timed_out.state_lost
    assert took < 6
    assert gone == []  # the host killed it: nothing of it is left
    assert fresh.stdout == "False\n"
    assert (fresh.state_lost, fresh.state_restarted) == (False, True)
    assert (later.state_lost, later.state_restarted) == (False, False)


def test_a_crashed_interpreter_is_reported_and_replaced(session):
    session.run(code="x = 1", timeout_s=10)
    crashed = session.run(code="import os\nprint('bye', flush=True)\nos._exit(7)", timeout_s=10)
    fresh = session.run(code="print('x' in globals())", timeout_s=10)

    assert crashed.stdout == "bye\n"
    assert crashed.exit_code == 7
    assert crashed.state_lost
    assert fresh.state_restarted
    assert fresh.stdout == "False\n"


def test_each_execution_keeps_its_own_output_limit(sandbox, owner):
    small = DockerSandbox(image=sandbox.image, pool_size=0, output_limit_chars=1000)
    session = small.session(owner=owner)
    try:
        flooded = session.run(code="print('x' * 50_000)", timeout_s=10)
        quiet = session.run(code="print('short')", timeout_s=10)
    finally:
        session.close()
        small.close()

    assert flooded.truncated
    assert len(flooded.stdout) < 1200
    assert (quiet.stdout, quiet.truncated) == ("short\n", False)


def test_live_output_reaches_its_reader_in_every_execution(session):
    for number in (1, 2):
        pieces: list[tuple[str, str]] = []
        code = f"import sys, time\nprint('a{number}', flush=True)\ntime.sleep(0.6)\nprint('b')"
        result = session.run(
            code=code,
            timeout_s=10,
            on_output=lambda stream, text, into=pieces: into.append((stream, text)),
        )
        assert result.stdout == f"a{number}\nb\n"
        assert "".join(text for stream, text in pieces if stream == "stdout") == result.stdout
        assert len(pieces) >= 2  # the first line came before the sleep ended


def test_close_stops_an_execution_that_is_running(sandbox, owner):
    session = sandbox.session(owner=owner)
    session.run(code="pass", timeout_s=10)
    results = []
    worker = threading.Thread(
        target=lambda: results.append(session.run(code="import time\ntime.sleep(30)", timeout_s=60))
    )
    worker.start()
    time.sleep(1)
    started = time.monotonic()
    session.close()
    worker.join(timeout=15)

    assert not worker.is_alive()
    assert time.monotonic() - started < 15
    assert owned(owner) == []
    assert results
    assert results[0].state_lost


def test_cancel_stops_a_session_execution(session):
    cancel = threading.Event()
    threading.Timer(1.0, cancel.set).start()
    started = time.monotonic()
    result = session.run(code="import time\ntime.sleep(30)", timeout_s=60, cancel=cancel)

    assert result.cancelled
    assert result.state_lost
    assert time.monotonic() - started < 10


def test_inputs_are_read_only_under_tmp_inputs_and_given_again_after_a_loss(sandbox, owner):
    inputs = (
        SandboxFile(name="sales.csv", data=b"month,sales\njan,3\nfeb,5\n"),
        SandboxFile(name="blob.bin", data=bytes(range(256)) * 4000),
    )
    session = sandbox.session(owner=owner, inputs=inputs)
    write = (
        "import os\n"
        "for path in ('/tmp/inputs/sales.csv', '/tmp/inputs/new.txt'):\n"
        "    try:\n"
        "        open(path, 'a').write('x')\n"
        "        print('wrote', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
    )
    try:
        read = session.run(
            code="import pandas\nprint(pandas.read_csv('/tmp/inputs/sales.csv')['sales'].sum())\n"
            "print(len(open('/tmp/inputs/blob.bin', 'rb').read()))",
            timeout_s=20,
        )
        refused = session.run(code=write, timeout_s=10)
        session.run(code="import os\nos._exit(1)", timeout_s=10)
        again = session.run(code="print(open('/tmp/inputs/sales.csv').read())", timeout_s=10)
    finally:
        session.close()

    assert read.stdout == f"8\n{256 * 4000}\n", read.stderr
    assert refused.stdout == "refused 13\nrefused 13\n"
    assert again.state_restarted
    assert again.stdout == "month,sales\njan,3\nfeb,5\n\n"


def test_remove_owned_removes_the_owners_containers_from_any_process(sandbox, owner):
    session = sandbox.session(owner=owner)
    session.run(code="pass", timeout_s=10)
    other = sandbox.session(owner=f"{owner}-other")
    other.run(code="pass", timeout_s=10)
    try:
        # As another worker would, with a backend of its own.
        elsewhere = DockerSandbox(image=sandbox.image, pool_size=0)
        removed = elsewhere.remove_owned(owner)
        elsewhere.close()

        assert removed == 1
        assert owned(owner) == []
        assert len(owned(f"{owner}-other")) == 1
        lost = session.run(code="print(1)", timeout_s=10)  # its kernel is gone: a fresh one
        assert lost.stdout == "1\n"
        assert lost.state_restarted
    finally:
        session.close()
        other.close()

"""Output files: what code writes under /tmp/outputs and the figures matplotlib holds come back
from the real container within the file limits, never through a symbolic link, with what was
left out and why; a report that breaks the protocol or the limits is refused on the host."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from sandbox.backends.docker import (
    REPORT_MAX_BYTES,
    DockerSandbox,
    FileLimits,
    ProtocolError,
    _CellEnd,
)
from sandbox.kernel_program import END, SKIPPED_NAMED
from traces.artifacts import sniff

PASSWD_LINE = "root:x:0:0"


@pytest.fixture
def small_limits(sandbox: DockerSandbox) -> Iterator[DockerSandbox]:
    """A backend with small file limits: 5 files, 1 MB each, 2.5 MB in all."""
    backend = DockerSandbox(
        image=sandbox.image,
        pool_size=0,
        output_files_max=5,
        output_file_max_bytes=1_000_000,
        output_files_max_bytes=2_500_000,
    )
    yield backend
    backend.close()


def files_of(result) -> dict[str, bytes]:
    return {f.name: f.data for f in result.files}


def reasons_of(result) -> dict[str, str]:
    return {f.name: f.reason for f in result.skipped_files}


def test_shown_and_open_figures_come_back_as_png(sandbox):
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [3, 1, 2])\n"
        "plt.show()\n"
        "plt.figure(figsize=(4, 3))\n"
        "plt.bar(['a', 'b'], [3, 4])\n"
    )
    result = sandbox.run(code=code, timeout_s=30)

    assert result.exit_code == 0, result.stderr
    files = files_of(result)
    assert sorted(files) == ["figure-1.png", "figure-2.png"]
    assert sniff(files["figure-1.png"]) == ("image/png", (640, 480))
    assert sniff(files["figure-2.png"]) == ("image/png", (400, 300))
    assert result.skipped_files == ()


def test_a_figure_the_code_saved_under_outputs_is_not_saved_twice(sandbox):
    code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2])\n"
        "plt.savefig('/tmp/outputs/kept.png')\n"  # left open, unchanged: kept.png only
        "changed = plt.figure()\n"
        "plt.plot([2, 1])\n"
        "changed.savefig('/tmp/outputs/before.png')\n"
        "plt.title('changed after saving')\n"  # changed since: saved again
        "elsewhere = plt.figure()\n"
        "plt.plot([3, 3])\n"
        "elsewhere.savefig('/tmp/not-an-output.png')\n"  # not under outputs: saved
    )
    result = sandbox.run(code=code, timeout_s=30)

    assert result.exit_code == 0, result.stderr
    assert sorted(files_of(result)) == ["before.png", "figure-1.png", "figure-2.png", "kept.png"]


def test_files_under_outputs_come_back_with_their_relative_paths(sandbox):
    code = (
        "import os, pandas\n"
        "os.makedirs('/tmp/outputs/tables', exist_ok=True)\n"
        "pandas.DataFrame({'month': ['jan', 'feb'], 'sales': [3, 5]})"
        ".to_csv('/tmp/outputs/tables/sales.csv', index=False)\n"
        "open('/tmp/outputs/notes.txt', 'w').write('done')\n"
        "open('/tmp/elsewhere.txt', 'w').write('not an output')\n"
    )
    result = sandbox.run(code=code, timeout_s=30)

    assert files_of(result) == {
        "notes.txt": b"done",
        "tables/sales.csv": b"month,sales\njan,3\nfeb,5\n",
    }


def test_a_session_brings_back_only_new_or_changed_files(sandbox):
    session = sandbox.session(owner=f"run-{uuid.uuid4()}")
    try:
        first = session.run(
            code="import matplotlib.pyplot as plt\nplt.plot([1, 2])\n"
            "open('/tmp/outputs/a.txt', 'w').write('1')\n"
            "open('/tmp/outputs/b.txt', 'w').write('1')",
            timeout_s=30,
        )
        second = session.run(
            code="plt.plot([2, 1])\nopen('/tmp/outputs/b.txt', 'w').write('22')", timeout_s=30
        )
        third = session.run(code="print('nothing new')", timeout_s=30)
    finally:
        session.close()

    assert sorted(files_of(first)) == ["a.txt", "b.txt", "figure-1.png"]
    assert sorted(files_of(second)) == ["b.txt", "figure-2.png"]
    assert files_of(second)["b.txt"] == b"22"
    assert third.files == ()


def test_ten_thousand_files_are_capped_and_counted(small_limits):
    code = (
        "import os\n"
        "for i in range(10_000):\n"
        "    open(f'/tmp/outputs/f{i:05}.txt', 'w').write(str(i))\n"
    )
    result = small_limits.run(code=code, timeout_s=60)

    assert result.exit_code == 0, result.stderr
    assert sorted(files_of(result)) == [f"f{i:05}.txt" for i in range(5)]
    assert len(result.skipped_files) == SKIPPED_NAMED
    assert result.skipped_files[0].reason == "over the limit of 5 files per execution"
    assert result.skipped_more == 10_000 - 5 - SKIPPED_NAMED


def test_a_huge_file_is_refused_by_tmp_and_big_ones_are_left_out_by_the_limits(small_limits):
    code = (
        "import os\n"
        "try:\n"
        "    with open('/tmp/outputs/huge.bin', 'wb') as f:\n"
        "        for _ in range(1024):\n"
        "            f.write(b'x' * (1 << 20))\n"
        "except OSError as exc:\n"
        "    print('stopped', exc.errno)\n"
        "os.remove('/tmp/outputs/huge.bin')\n"
        "open('/tmp/outputs/big.bin', 'wb').write(b'y' * 1_500_000)\n"
        "for name in ('one', 'two', 'three'):\n"
        "    open(f'/tmp/outputs/{name}.bin', 'wb').write(b'z' * 900_000)\n"
    )
    result = small_limits.run(code=code, timeout_s=60)

    assert result.stdout == "stopped 28\n"  # ENOSPC: /tmp is 64 MB
    assert sorted(files_of(result)) == ["one.bin", "three.bin"]
    reasons = reasons_of(result)
    assert reasons["big.bin"] == "1500000 bytes, over the limit of 1000000"
    assert reasons["two.bin"] == "over the limit of 2500000 bytes per execution"


def test_symbolic_links_are_never_followed(sandbox):
    code = (
        "import os\n"
        "os.symlink('/etc/passwd', '/tmp/outputs/passwd.txt')\n"
        "os.symlink('/etc', '/tmp/outputs/etc')\n"
        "os.symlink('../../etc/passwd', '/tmp/outputs/relative')\n"
        "open('/tmp/outputs/real.txt', 'w').write('real')\n"
    )
    result = sandbox.run(code=code, timeout_s=30)

    assert files_of(result) == {"real.txt": b"real"}
    assert reasons_of(result) == {
        "etc": "a symbolic link (not followed)",
        "passwd.txt": "a symbolic link (not followed)",
        "relative": "a symbolic link (not followed)",
    }


def test_an_outputs_folder_that_is_a_link_is_not_read(sandbox):
    code = "import os\nos.rmdir('/tmp/outputs')\nos.symlink('/etc', '/tmp/outputs')\n"
    result = sandbox.run(code=code, timeout_s=30)

    assert result.files == ()
    assert [f.reason for f in result.skipped_files] == [
        "/tmp/outputs is not a folder (a symbolic link?): not read"
    ]
    assert PASSWD_LINE not in repr(result)


def test_fifos_deep_folders_and_odd_names(sandbox):
    code = (
        "import os\n"
        "os.mkfifo('/tmp/outputs/pipe')\n"
        "os.makedirs('/tmp/outputs/' + '/'.join('d' * 12))\n"
        "open('/tmp/outputs/' + '/'.join('d' * 12) + '/deep.txt', 'w').write('deep')\n"
        "open(b'/tmp/outputs/\\xff\\x1b[31m<script>.png', 'wb').write(b'<html>')\n"
        "open('/tmp/outputs/..dots', 'w').write('dots')\n"
    )
    result = sandbox.run(code=code, timeout_s=30)

    assert result.exit_code == 0, result.stderr
    files = files_of(result)
    assert files["..dots"] == b"dots"
    odd = [name for name in files if name.endswith("<script>.png")]
    assert len(odd) == 1
    assert files[odd[0]] == b"<html>"
    assert not any(name.endswith("deep.txt") for name in files)
    reasons = reasons_of(result)
    assert reasons["pipe"] == "not a regular file"
    assert "a folder nested too deep" in reasons.values()
    # Names reported as skipped are made safe on the host.
    assert all(name.isprintable() for name in reasons)


def test_a_forged_report_over_the_limits_is_refused_and_the_interpreter_replaced(small_limits):
    """The code can reach the kernel's streams (it is the code's own container): a report it
    forges is checked on the host like any other, and one over the limits is refused."""
    forge = (
        "import json, os, sys\n"
        "frame = sys._getframe()\n"
        "while 'message' not in frame.f_locals:\n"
        "    frame = frame.f_back\n"
        "marker = b'\\x1edevassist-end:' + frame.f_locals['message']['id'].encode()\n"
        "report = json.dumps({'exit_code': 0, 'files': [{'name': 'x', 'size': 10**9}],"
        " 'skipped': [], 'skipped_more': 0}).encode()\n"
        "os.write(2, marker + b'\\n')\n"
        "os.write(1, marker + b' ' + str(len(report)).encode() + b'\\n' + report)\n"
        "import time\ntime.sleep(5)\n"
    )
    session = small_limits.session(owner=f"run-{uuid.uuid4()}")
    try:
        session.run(code="kept = 1", timeout_s=10)
        forged = session.run(code=forge, timeout_s=20)
        after = session.run(code="print('kept' in globals())", timeout_s=10)
    finally:
        session.close()

    assert forged.files == ()
    assert "The sandbox's report was refused" in forged.stderr
    assert forged.state_lost
    assert after.state_restarted
    assert after.stdout == "False\n"


# --- the end of a cell, read on the host (no engine) -------------------------------------------

LIMITS = FileLimits(files=2, file_bytes=10, total_bytes=15)
MARKER = END + b"0123"


def report(files: list[tuple[str, bytes]], **head: object) -> bytes:
    body = json.dumps(
        {
            "exit_code": 0,
            "files": [{"name": name, "size": len(data)} for name, data in files],
            "skipped": [],
            "skipped_more": 0,
            **head,
        }
    ).encode()
    return MARKER + b" " + str(len(body)).encode() + b"\n" + body + b"".join(d for _, d in files)


def feed_bytewise(end: _CellEnd, data: bytes) -> bytes:
    return b"".join(end.feed(data[i : i + 1]) for i in range(len(data)))


def test_the_end_is_found_across_reads_and_what_came_before_is_output():
    end = _CellEnd(MARKER, limits=LIMITS)
    printed = feed_bytewise(end, b"hello \x1ed\n" + report([("a.txt", b"12345"), ("b", b"")]))

    assert printed == b"hello \x1ed\n"
    assert end.done
    assert end.report is not None
    assert [(f.name, f.data) for f in end.report.files] == [("a.txt", b"12345"), ("b", b"")]


def test_the_error_stream_ends_at_its_marker_and_a_newline():
    end = _CellEnd(MARKER, limits=None)

    assert end.feed(b"oops" + MARKER[:5]) == b"oops"
    assert end.feed(MARKER[5:] + b"\n") == b""
    assert end.done


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (report([("a", b"1"), ("b", b"2"), ("c", b"3")]), "over the limits"),
        (report([("a", b"x" * 11)]), "over the size limit"),
        (report([("a", b"x" * 8), ("b", b"y" * 8)]), "over the limits"),
        (report([("a", b"1")], exit_code="0"), "exit code"),
        (report([], skipped="x"), "skipped"),
        (MARKER + b" 12\nnot json at!", "not JSON"),
        (MARKER + b" " + str(REPORT_MAX_BYTES + 1).encode() + b"\n", "bytes"),
        (MARKER + b" x\n", "no length"),
        (report([("a", b"1")]) + b"extra", "more bytes"),
    ],
)
def test_a_report_that_breaks_the_protocol_or_the_limits_is_refused(data, reason):
    end = _CellEnd(MARKER, limits=LIMITS)

    with pytest.raises(ProtocolError, match=reason):
        end.feed(data)

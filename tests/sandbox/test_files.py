"""Files given to a run: checked at the door (413 past the limits, with the limits in the
details), named safely and uniquely, described by content."""

from __future__ import annotations

import hashlib
import json
from http import HTTPStatus

import pytest

from devassist.api import api
from sandbox.exceptions import SandboxInputsTooLarge
from sandbox.files import input_files


def test_names_are_made_safe_and_unique_and_types_sniffed():
    files = input_files(
        [
            ("../../etc/sales.csv", b"month,sales\njan,3\n"),
            ("sales.csv", b"a,b\n"),
            ("SALES.csv", b"\x00\x01"),
            ("a\x00b<script>.txt", b"text"),
            ("", b""),
        ]
    )

    assert [(f.name, f.media_type) for f in files] == [
        ("etc_sales.csv", "text/csv"),
        ("sales.csv", "text/csv"),
        ("SALES-2.csv", "application/octet-stream"),
        ("a_b_script_.txt", "text/plain"),
        ("file", "text/plain"),
    ]
    assert files[1].path == "/tmp/inputs/sales.csv"
    assert files[0].describe() == {
        "name": "etc_sales.csv",
        "path": "/tmp/inputs/etc_sales.csv",
        "size": 18,
        "media_type": "text/csv",
        "sha256": hashlib.sha256(b"month,sales\njan,3\n").hexdigest(),
    }


def test_too_many_files_is_413_with_the_limits(settings):
    settings.SANDBOX_INPUT_FILES_MAX = 2

    with pytest.raises(SandboxInputsTooLarge) as refused:
        input_files([("a", b""), ("b", b""), ("c", b"")])

    assert refused.value.code == "sandbox_inputs_too_large"
    assert refused.value.details["max_files"] == 2
    assert refused.value.details["files"] == 3


def test_a_file_over_the_size_limit_is_413_naming_it(settings):
    settings.SANDBOX_INPUT_FILE_MAX_BYTES = 10

    with pytest.raises(SandboxInputsTooLarge, match=r"big\.bin is 11 bytes") as refused:
        input_files([("ok.txt", b"x" * 10), ("big.bin", b"x" * 11)])

    assert refused.value.details["name"] == "big.bin"


def test_files_over_the_total_are_413(settings):
    settings.SANDBOX_INPUT_FILE_MAX_BYTES = 10
    settings.SANDBOX_INPUT_FILES_MAX_BYTES = 15

    with pytest.raises(SandboxInputsTooLarge, match="16 bytes together"):
        input_files([("a", b"x" * 8), ("b", b"y" * 8)])


def test_the_refusal_is_a_413_envelope(settings, rf):
    settings.SANDBOX_INPUT_FILES_MAX = 1
    request = rf.post("/chat")
    request.request_id = "req-1"
    with pytest.raises(SandboxInputsTooLarge) as refused:
        input_files([("a", b""), ("b", b"")])

    response = api.on_exception(request, refused.value)

    assert response.status_code == HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    body = json.loads(response.content)
    assert body["error"]["code"] == "sandbox_inputs_too_large"
    assert body["error"]["details"]["max_files"] == 1

"""Artifacts: media types from content, safe names, serving headers, storage through Django's
storage API, and the lookup behind the artifact URL (on PostgreSQL and without JSON
containment)."""

from __future__ import annotations

import struct
import uuid
import zlib
from http import HTTPStatus
from typing import Any

import pytest
from django.core.files.storage import storages

from tests.traces.factories import add, make_trace, step
from traces.artifacts import (
    artifact_bytes,
    artifact_url,
    artifacts_of,
    is_inline,
    sanitise_name,
    serving_headers,
    sniff,
    store_files,
)
from traces.exceptions import ArtifactNotFound
from traces.selectors import artifact_get


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body)
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00" + b"\x00\x00\x00" * width)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels)


def jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00"
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + b"\x01\x11\x00"
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


# --- sniffing ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (png(640, 480), ("image/png", (640, 480))),
        (jpeg(300, 200), ("image/jpeg", (300, 200))),
        (b"GIF89a" + struct.pack("<HH", 16, 9) + b"\x00" * 8, ("image/gif", (16, 9))),
        (
            b"RIFF\x00\x00\x00\x00WEBPVP8X"
            + b"\x00" * 8
            + (99).to_bytes(3, "little")
            + (49).to_bytes(3, "little"),
            ("image/webp", (100, 50)),
        ),
        (b"%PDF-1.7\n...", ("application/pdf", None)),
        (b"PK\x03\x04rest", ("application/zip", None)),
        (b"\x00\x01\x02binary", ("application/octet-stream", None)),
        (b"\xff\xfe\xfdnot utf-8", ("application/octet-stream", None)),
        ("plain text, é".encode(), ("text/plain", None)),
    ],
)
def test_the_media_type_comes_from_the_content(data, expected):
    assert sniff(data, "whatever.png") == expected


@pytest.mark.parametrize(
    ("name", "data", "expected"),
    [
        ("sales.csv", b"a,b\n1,2\n", "text/csv"),
        ("sales.tsv", b"a\tb\n", "text/tab-separated-values"),
        ("chart.png", b"<html><script>alert(1)</script>", "text/html"),
        ("chart.png", b"  <svg xmlns='http://www.w3.org/2000/svg'></svg>", "image/svg+xml"),
        ("drawing.svg", b"<?xml version='1.0'?><svg/>", "image/svg+xml"),
        ("notes.txt", b"a < b and <c> is fine", "text/plain"),
        ("data.csv", b"\x00\x00binary", "application/octet-stream"),
        ("image.csv", png(1, 1), "image/png"),
    ],
)
def test_a_name_only_tells_kinds_of_text_apart(name, data, expected):
    assert sniff(data, name)[0] == expected


def test_broken_image_headers_have_no_dimensions():
    assert sniff(png(0, 10)) == ("image/png", None)
    assert sniff(b"\xff\xd8\xff\xe0\x00") == ("image/jpeg", None)


def test_a_character_cut_at_the_probe_is_still_text():
    data = ("x" * 65_535 + "é").encode()  # é straddles the 64 KiB probe

    assert sniff(data, "long.txt")[0] == "text/plain"


# --- names and headers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        ("../../x", "x"),
        ("<script>.png", "_script_.png"),
        ("tables/sales.csv", "tables_sales.csv"),
        ("a\x00b\x1b[31m.txt", "a_b_31m.txt"),
        ("\udcff\u202egnp.exe", "_gnp.exe"),
        ('quote".txt', "quote_.txt"),
        ("..", "file"),
        (".hidden", "hidden"),
        ("résumé 2024.pdf", "résumé 2024.pdf"),
        ("x" * 300 + ".png", "x" * 116 + ".png"),
    ],
)
def test_names_are_made_safe_to_show_and_download(raw, safe):
    assert sanitise_name(raw) == safe


@pytest.mark.parametrize(
    ("media_type", "content_type", "inline"),
    [
        ("image/png", "image/png", True),
        ("image/webp", "image/webp", True),
        ("text/plain", "text/plain; charset=utf-8", True),
        ("text/csv", "text/csv; charset=utf-8", False),
        ("image/svg+xml", "application/octet-stream", False),
        ("text/html", "application/octet-stream", False),
        ("text/javascript", "application/octet-stream", False),
        ("application/pdf", "application/octet-stream", False),
    ],
)
def test_only_raster_images_and_plain_text_are_inline(media_type, content_type, inline):
    headers = serving_headers({"media_type": media_type, "name": "f"})

    assert headers["Content-Type"] == content_type
    assert headers["Content-Disposition"].startswith("inline;" if inline else "attachment;")
    assert is_inline(media_type) is inline
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"


def test_the_download_name_is_quoted_both_ways():
    headers = serving_headers({"media_type": "image/png", "name": 'ventes "été".png'})

    assert headers["Content-Disposition"] == (
        "inline; filename=\"ventes __t__.png\"; filename*=UTF-8''ventes%20_%C3%A9t%C3%A9_.png"
    )


def test_records_are_read_from_both_step_shapes_and_odd_ones_left_out():
    record = {"id": "a", "name": "x.png", "media_type": "image/png", "size": 1}

    assert artifacts_of({"result": {"artifacts": [record]}}) == [record]
    assert artifacts_of({"artifacts": [record, {"id": 1}, "x"]}) == [record]
    assert artifacts_of({"result": "text"}) == []
    assert artifacts_of(None) == []


# --- storage and lookup --------------------------------------------------------------------------


@pytest.mark.django_db
def test_files_are_stored_under_ids_never_under_their_names(user):
    trace = make_trace(user)

    stored, failed = store_files(
        [("../../etc/x.png", png(2, 3)), ("t.csv", b"a,b\n")], trace_id=trace.id
    )

    assert failed == []
    assert [(a.name, a.media_type, a.width, a.height) for a in stored] == [
        ("etc_x.png", "image/png", 2, 3),
        ("t.csv", "text/csv", None, None),
    ]
    _, names = storages["artifacts"].listdir(str(trace.id))
    assert sorted(names) == sorted(str(a.id) for a in stored)
    assert artifact_bytes(trace.id, stored[1].id) == b"a,b\n"


@pytest.mark.django_db
def test_a_storage_that_fails_leaves_that_file_out_with_a_reason(user, monkeypatch):
    trace = make_trace(user)
    storage = storages["artifacts"]
    real_save = storage.save
    calls = iter([OSError("disk full"), None])

    def flaky_save(name: str, content: Any, **kwargs: Any) -> str:
        error = next(calls)
        if error is not None:
            raise error
        return real_save(name, content, **kwargs)

    monkeypatch.setattr(storage, "save", flaky_save)
    stored, failed = store_files([("a.txt", b"a"), ("b.txt", b"b")], trace_id=trace.id)

    assert [a.name for a in stored] == ["b.txt"]
    assert [(f.name, f.reason) for f in failed] == [("a.txt", "not stored: OSError")]


def record_step(user: Any, *, nested: bool) -> tuple[Any, dict[str, Any]]:
    trace = make_trace(user)
    [artifact], _ = store_files([("plot.png", png(4, 4))], trace_id=trace.id)
    record = artifact.as_dict()
    data = {"result": {"artifacts": [record]}} if nested else {"artifacts": [record]}
    other = {"result": {"artifacts": [{**record, "id": str(uuid.uuid4())}]}}
    add(trace, step("goal"), step("result", data=other), step("result", data=data))
    return trace, record


@pytest.mark.django_db
@pytest.mark.parametrize("containment", [True, False])
@pytest.mark.parametrize("nested", [True, False])
def test_the_record_is_found_with_and_without_json_containment(
    user, other_user, staff_user, monkeypatch, containment, nested
):
    from django.db import connection

    monkeypatch.setattr(connection.features, "supports_json_field_contains", containment)
    trace, record = record_step(user, nested=nested)
    artifact_id = uuid.UUID(record["id"])

    assert artifact_get(viewer=user, trace_id=trace.id, artifact_id=artifact_id) == record
    assert artifact_get(viewer=staff_user, trace_id=trace.id, artifact_id=artifact_id) == record
    with pytest.raises(ArtifactNotFound):
        artifact_get(viewer=user, trace_id=trace.id, artifact_id=uuid.uuid4())


@pytest.mark.django_db
def test_the_url_answers_404_for_a_file_the_storage_lost(user, api):
    trace, record = record_step(user, nested=True)
    url = artifact_url(trace.id, record["id"])
    assert api.get(url).status_code == HTTPStatus.OK

    storages["artifacts"].delete(f"{trace.id}/{record['id']}")

    response = api.get(url)
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert response.json()["error"]["code"] == "artifact_not_found"


@pytest.mark.django_db
def test_another_users_artifact_is_404_like_a_missing_trace(user, other_api):
    trace, record = record_step(user, nested=True)

    response = other_api.get(artifact_url(trace.id, record["id"]))

    assert response.status_code == HTTPStatus.NOT_FOUND
    assert response.json()["error"]["code"] == "trace_not_found"

"""The collections API: listing, staff-only uploads and deletes, limits and the error
envelope."""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agent.knowledge.ingest import ingest_paths
from agent.knowledge.search import search
from agent.knowledge.store import collection_names

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("knowledge")]

URL = "/api/collections"


def upload(client: Client, name: str, *files: tuple[str, bytes]) -> Any:
    return client.post(
        f"{URL}/{name}/documents",
        {"files": [SimpleUploadedFile(filename, data) for filename, data in files]},
    )


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["error"]["code"] == code
    assert set(body) == {"error", "request_id"}
    assert body["request_id"] == response["X-Request-ID"]
    return body


@pytest.fixture
def project_docs(tmp_path: Path) -> str:
    root = tmp_path / "project"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# Readme\n\nStart here.\n\n## Setup\n\nRun it.\n")
    (root / "docs" / "guide.md").write_text("# Guide\n\nThe guide.\n")
    ingest_paths(paths=[root / "README.md", root / "docs"], collection="project_docs")
    return "project_docs"


def test_listing_needs_a_login() -> None:
    assert_error(Client().get(URL), HTTPStatus.UNAUTHORIZED, "not_authenticated")


def test_any_user_lists_collections_with_counts(api: Client, project_docs: str) -> None:
    response = api.get(URL)

    assert response.status_code == HTTPStatus.OK
    assert response.json() == [{"name": "project_docs", "chunks": 3, "documents": 2, "error": ""}]


def test_staff_upload_ingests_and_reports(staff_api: Client) -> None:
    response = upload(
        staff_api,
        "team_docs",
        ("faq.md", b"# FAQ\n\nThe office opens at nine.\n"),
        ("notes.txt", b"Parking is behind the building."),
        ("logo.png", b"\x89PNG"),
        ("empty.md", b""),
    )

    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    assert body["collection"] == "team_docs"
    assert body["added"] == ["faq.md", "notes.txt"]
    assert body["unsupported"] == ["logo.png"]
    assert body["empty"] == ["empty.md"]
    assert body["chunks_written"] == 2
    assert [r.source for r in search(query="office", top_k=3, collection="team_docs")] == ["faq.md"]
    assert staff_api.get(URL).json() == [
        {"name": "team_docs", "chunks": 2, "documents": 2, "error": ""}
    ]


def test_uploading_the_same_file_again_is_a_no_op(staff_api: Client) -> None:
    upload(staff_api, "team_docs", ("faq.md", b"# FAQ\n\nNine.\n"))

    body = upload(staff_api, "team_docs", ("faq.md", b"# FAQ\n\nNine.\n")).json()

    assert body["unchanged"] == ["faq.md"]
    assert body["chunks_written"] == 0


def test_writes_are_staff_only(api: Client, project_docs: str) -> None:
    assert_error(upload(api, "team_docs", ("a.md", b"# A")), HTTPStatus.FORBIDDEN, "forbidden")
    assert_error(api.delete(f"{URL}/{project_docs}"), HTTPStatus.FORBIDDEN, "forbidden")
    assert_error(
        api.delete(f"{URL}/{project_docs}/documents/README.md"),
        HTTPStatus.FORBIDDEN,
        "forbidden",
    )
    assert collection_names() == [project_docs]


def test_an_upload_over_the_limit_is_413(staff_api: Client, settings: Any) -> None:
    settings.KNOWLEDGE_UPLOAD_MAX_BYTES = 100

    response = upload(staff_api, "team_docs", ("a.md", b"x" * 60), ("b.md", b"y" * 60))

    body = assert_error(response, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "payload_too_large")
    assert body["error"]["details"] == {"size": 120, "limit": 100}
    assert collection_names() == []


def test_an_upload_without_files_is_invalid(staff_api: Client) -> None:
    response = staff_api.post(f"{URL}/team_docs/documents", {})

    assert_error(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")


def test_an_invalid_collection_name_is_400(staff_api: Client) -> None:
    response = upload(staff_api, "a", ("a.md", b"# A"))

    assert_error(response, HTTPStatus.BAD_REQUEST, "collection_name_invalid")


def test_staff_delete_a_document_by_its_source_path(staff_api: Client, project_docs: str) -> None:
    response = staff_api.delete(f"{URL}/{project_docs}/documents/docs/guide.md")

    assert response.status_code == HTTPStatus.NO_CONTENT
    assert staff_api.get(URL).json() == [
        {"name": project_docs, "chunks": 2, "documents": 1, "error": ""}
    ]
    assert search(query="guide", top_k=3, collection=project_docs) == []


def test_deleting_what_does_not_exist_is_404(staff_api: Client, project_docs: str) -> None:
    body = assert_error(
        staff_api.delete(f"{URL}/missing_docs/documents/README.md"),
        HTTPStatus.NOT_FOUND,
        "collection_not_found",
    )
    assert body["error"]["details"]["collections"] == [project_docs]
    assert_error(
        staff_api.delete(f"{URL}/{project_docs}/documents/nope.md"),
        HTTPStatus.NOT_FOUND,
        "document_not_found",
    )
    assert_error(
        staff_api.delete(f"{URL}/missing_docs"), HTTPStatus.NOT_FOUND, "collection_not_found"
    )


def test_staff_delete_a_collection(staff_api: Client, project_docs: str, knowledge: Path) -> None:
    response = staff_api.delete(f"{URL}/{project_docs}")

    assert response.status_code == HTTPStatus.NO_CONTENT
    assert collection_names() == []
    assert not (knowledge / "bm25" / project_docs).exists()
    assert staff_api.get(URL).json() == []

"""Files attached to chat messages: multipart ``POST /chat`` and ``POST /agent``, the files kept
with the message and read by the run's code (and by a regeneration's and an edit's), the
limits, and who may download them."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agent.models import AgentRun
from chat.models import Attachment, Conversation, Message
from chat.services import conversation_delete, conversations_purge
from tests.agent.test_agent_api import assert_error
from traces.artifacts import artifact_storage
from traces.models import Step

pytestmark = pytest.mark.django_db

CSV = b"month,sales\njan,3\nfeb,5\n"
READ = "import pandas as pd\nprint(pd.read_csv('/tmp/inputs/sales.csv')['sales'].sum())"


def call(code: str) -> str:
    return f"Thought: read it\nAction: tool:execute_code\nargs: {json.dumps({'code': code})}"


def send(client: Client, url: str, body: dict[str, Any], *files: tuple[str, bytes]) -> Any:
    uploads = [SimpleUploadedFile(name, data) for name, data in files]
    return client.post(url, {"payload": json.dumps(body), "files": uploads})


def test_a_multipart_message_keeps_its_file_and_the_code_reads_it(
    api, user, scripted, sandbox_image
):
    scripted.script([call(READ), "Thought: done\nAction: final: 8 sold."])

    response = send(api, "/chat", {"message": "sum the sales"}, ("sales.csv", CSV))

    assert response.status_code == HTTPStatus.OK, response.content
    body = response.json()
    assert body["route"] == "agent"  # files go to the agent, unless a route is asked for
    assert body["steps"][0]["observation"]["stdout"] == "8\n"
    (attachment,) = Attachment.objects.all()
    assert (attachment.name, attachment.media_type, attachment.size) == (
        "sales.csv",
        "text/csv",
        len(CSV),
    )
    assert attachment.message.content == "sum the sales"
    goal = Step.objects.get(pk=body["run_id"])
    assert goal.data["inputs"][0]["path"] == "/tmp/inputs/sales.csv"
    # The model is told where the file is.
    assert "/tmp/inputs/sales.csv" in str(scripted.requests[0]["messages"])
    shown = api.get(f"/chat/conversations/{body['conversation_id']}").json()["messages"][0]
    assert [(a["name"], a["size"]) for a in shown["attachments"]] == [("sales.csv", len(CSV))]


def test_a_regeneration_and_an_edit_give_the_code_the_same_files(
    api, user, scripted, sandbox_image
):
    final = "Thought: done\nAction: final: ok"
    scripted.script([call(READ), final, call(READ), final, call(READ), final])
    body = send(api, "/chat", {"message": "sum the sales"}, ("sales.csv", CSV)).json()
    question, answer = (
        m["id"]
        for m in api.get(f"/chat/conversations/{body['conversation_id']}").json()["messages"]
    )

    again = api.post(f"/chat/messages/{answer}/regenerate").json()
    edited = api.post(
        f"/chat/messages/{question}/edit",
        data=json.dumps({"message": "sum the sales, please", "use_agent": True}),
        content_type="application/json",
    ).json()

    for result in (again, edited):
        assert result["steps"][0]["observation"]["stdout"] == "8\n"
    edit_message = Message.objects.get(content="sum the sales, please")
    assert [a.name for a in edit_message.attachments.all()] == ["sales.csv"]
    # One stored copy of the bytes for both messages.
    assert Attachment.objects.values("storage_name").distinct().count() == 1


def test_agent_without_a_conversation_takes_files_too(api, scripted, sandbox_image):
    scripted.script([call(READ), "Thought: done\nAction: final: ok"])

    response = send(
        api, "/agent", {"message": "sum", "tools": ["execute_code"]}, ("sales.csv", CSV)
    )

    assert response.status_code == HTTPStatus.OK, response.content
    assert response.json()["steps"][0]["observation"]["stdout"] == "8\n"
    assert not Attachment.objects.exists()  # no message to keep them with


def test_too_many_or_too_large_files_are_413_and_nothing_is_stored(api, scripted, settings):
    settings.SANDBOX_INPUT_FILES_MAX = 2
    settings.SANDBOX_INPUT_FILE_MAX_BYTES = 10

    many = send(api, "/chat", {"message": "x"}, ("a", b"1"), ("b", b"2"), ("c", b"3"))
    large = send(api, "/chat", {"message": "x"}, ("big.csv", b"x" * 11))

    assert_error(many, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "sandbox_inputs_too_large")
    body = assert_error(large, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "sandbox_inputs_too_large")
    assert body["error"]["details"]["name"] == "big.csv"
    assert not Conversation.objects.exists()
    assert not AgentRun.objects.exists()
    assert not Attachment.objects.exists()


def test_a_multipart_request_needs_its_json_in_a_payload_part(api):
    response = api.post("/chat", {"message": "hi"})

    body = assert_error(response, HTTPStatus.UNPROCESSABLE_ENTITY, "validation_error")
    assert "payload" in json.dumps(body["error"]["details"])


def test_a_refused_message_removes_the_files_it_stored(api, user, scripted):
    scripted.script(["A1"])
    conversation_id = api.post(
        "/chat",
        data=json.dumps({"message": "hi", "use_agent": False}),
        content_type="application/json",
    ).json()["conversation_id"]
    storage = artifact_storage()
    before = storage.listdir("attachments")[1] if storage.exists("attachments") else []

    missing = send(
        api,
        "/chat",
        {"message": "x", "conversation_id": "00000000-0000-0000-0000-000000000000"},
        ("a.txt", b"hello"),
    )

    assert_error(missing, HTTPStatus.NOT_FOUND, "conversation_not_found")
    after = storage.listdir("attachments")[1] if storage.exists("attachments") else []
    assert after == before
    assert Conversation.objects.filter(pk=conversation_id).exists()


def test_files_are_served_to_their_owner_only_and_never_run(
    client, api, other_user, user, scripted, settings
):
    scripted.script(["Noted."])
    client.force_login(user)
    page = b"<html><script>alert(1)</script></html>"
    body = send(
        client,
        "/chat",
        {"message": "keep this", "use_agent": False},
        ("page.html", page),
        ("notes.txt", b"plain"),
    ).json()
    rows = {a.name: a for a in Attachment.objects.all()}
    shown = client.get(f"/c/{body['conversation_id']}/").content.decode()
    url = f"/chat/attachments/{rows['page.html'].id}"
    assert url in shown

    served = client.get(url)
    text = client.get(f"/chat/attachments/{rows['notes.txt'].id}")

    assert served.status_code == HTTPStatus.OK
    assert b"".join(served.streaming_content) == page
    assert served["Content-Type"] == "application/octet-stream"
    assert served["Content-Disposition"].startswith("attachment;")
    assert served["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in served["Content-Security-Policy"]
    assert text["Content-Disposition"].startswith("inline;")
    assert api.get(url).status_code == HTTPStatus.OK  # the owner's bearer token too
    client.force_login(other_user)
    assert_error(client.get(url), HTTPStatus.NOT_FOUND, "attachment_not_found")
    # Purged with the conversation: the row and the bytes.
    settings.CHAT_UNDO_DELETE_S = 0
    conversation_delete(conversation=Conversation.objects.get())
    conversations_purge()
    assert not Attachment.objects.exists()
    assert not artifact_storage().exists(rows["page.html"].storage_name)


def test_a_hostile_file_name_is_made_safe_everywhere(client, user, scripted):
    scripted.script(["Noted."])
    client.force_login(user)
    hostile = '../../<img src=x onerror="alert(1)">.csv'

    body = send(client, "/chat", {"message": "keep", "use_agent": False}, (hostile, CSV)).json()

    (attachment,) = Attachment.objects.all()
    assert "/" not in attachment.name
    assert "<" not in attachment.name
    assert attachment.name.endswith(".csv")
    page = client.get(f"/c/{body['conversation_id']}/").content.decode()
    assert "<img src=x" not in page
    served = client.get(f"/chat/attachments/{attachment.id}")
    assert served["Content-Disposition"].startswith(f'attachment; filename="{attachment.name}";')

"""The chat on the zero-setup default (`make run`): SQLite, the in-memory channel layer and the
offline provider, served by daphne."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from http import HTTPStatus
from pathlib import Path

import httpx
import pytest

from tests.agent.test_agent_api import sse_events
from tests.servers import daphne_server, manage

ENV = {"DEBUG": "1", "LOG_LEVEL": "WARNING", "SANDBOX_WARM_ON_START": "0"}


@pytest.fixture(scope="module")
def embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base url, API token of the demo user) of a daphne on the embedded defaults."""
    env = {**ENV, "DEVASSIST_VAR_DIR": str(tmp_path_factory.mktemp("embedded-chat") / "var")}
    manage(env, "migrate", "--noinput")
    manage(env, "ensure_demo_user")
    token = manage(env, "create_api_token", "demo").strip()
    with daphne_server(env) as base_url:
        yield base_url, token


def test_a_new_user_chats_runs_code_and_finds_the_conversation(
    embedded: tuple[str, str], sandbox_image: str
) -> None:
    base_url, token = embedded
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        stream = api.post("/chat?stream=true", json={"message": "run: print(1+1)"})
        events = sse_events(stream.text)
        meta = events[0][1]
        listed = api.get("/chat/conversations", params={"q": "print"}).json()
        shown = api.get(f"/chat/conversations/{meta['conversation_id']}").json()

    assert stream.status_code == HTTPStatus.OK
    assert (meta["agent"], meta["model"]) == (True, "offline")
    (step,) = [event for _, event in events if event["type"] == "step"]
    assert step["observation"]["stdout"] == "2\n"
    assert events[-1][1]["status"] == "completed"
    assert [c["id"] for c in listed["conversations"]] == [meta["conversation_id"]]
    assert [m["role"] for m in shown["messages"]] == ["user", "assistant"]
    assert "2" in shown["messages"][1]["content"]


def test_the_readme_offline_chat_example_runs_its_code(
    embedded: tuple[str, str], sandbox_image: str
) -> None:
    # The body exactly as the README gives it for the offline provider.
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (body,) = [
        json.loads(raw)
        for raw in re.findall(r"^  -d '(.*)'$", readme, flags=re.MULTILINE)
        if "```python" in raw and "use_agent" in raw
    ]
    base_url, token = embedded
    with httpx.Client(
        base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as api:
        events = [event for _, event in sse_events(api.post("/chat?stream=true", json=body).text)]

    assert (events[0]["type"], events[0]["agent"]) == ("meta", True)
    steps = [event for event in events if event["type"] == "step"]
    assert [step["tool_name"] for step in steps] == ["execute_code"]
    assert steps[0]["observation"]["stdout"] == "5\n"
    assert any(event["type"] == "delta" for event in events)
    assert events[-1] == {"type": "done", "run_id": events[0]["run_id"], "status": "completed"}

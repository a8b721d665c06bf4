"""The chat page's HTMX send action and the run's HTML stream (GET /ui/chat/runs/<id>/stream):
named SSE events whose data is HTML rendered on the server, escaped, framed one ``data:`` line
per line; re-attaching with ``Last-Event-ID``; someone else's run is 404."""

from __future__ import annotations

import json
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.template.loader import render_to_string
from django.test import AsyncClient

from agent.knowledge.ingest import ingest_paths
from agent.models import AgentRun
from chat.turns import chat_turn_start
from chat.views import sse_frame, step_view
from tests.chat.test_persistence import live_markup
from traces.models import Step

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = '<script>window.pwned = 1</script> <img src=x onerror="alert(1)">'


def html_events(raw: str) -> list[tuple[int, str, str]]:
    """``(id, event name, data)`` of each event in an SSE body, as EventSource reads them."""
    events = []
    for block in raw.split("\n\n"):
        fields: dict[str, list[str]] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            fields.setdefault(name, []).append(value.removeprefix(" "))
        if "data" in fields:
            events.append((int(fields["id"][0]), fields["event"][0], "\n".join(fields["data"])))
    return events


async def stream(client: AsyncClient, run_id: Any, **headers: str) -> list[tuple[int, str, str]]:
    response = await client.get(f"/ui/chat/runs/{run_id}/stream", headers=headers)
    assert response.status_code == HTTPStatus.OK
    assert response["Content-Type"].startswith("text/event-stream")
    return html_events(await body_of(response))


async def body_of(response: Any) -> str:
    """A streaming response's whole body (the stream ends with the run's ``done``)."""
    return b"".join([chunk async for chunk in response.streaming_content]).decode()


async def signed_in(user: Any) -> AsyncClient:
    client = AsyncClient()
    await client.aforce_login(user)
    return client


async def test_a_finished_run_answers_at_once_with_escaped_html(user, scripted):
    scripted.script([f"Careful: {HOSTILE}\n\n**done**"])
    turn = await chat_turn_start(user=user, message="say it", use_agent=False, use_rag=False)
    await turn.task
    events = await stream(await signed_in(user), turn.run.id)

    names = [name for _, name, _ in events]
    assert names[-1] == "done"
    assert set(names) == {"delta", "done"}
    text = "".join(data for _, name, data in events if name == "delta")
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in text
    assert "<script" not in text
    done = events[-1][2]
    assert "<strong>done</strong>" in done
    # The answer is inert; what follows it is the turn's own header and actions, swapped in.
    body, _, controls = done.partition("<header")
    assert live_markup(body) == []
    assert "pwned" not in controls.split('<template class="message-source">')[0]
    assert [seq for seq, _, _ in events] == sorted({seq for seq, _, _ in events})


async def test_last_event_id_re_attaches_without_duplicates(user, scripted):
    words = [f"w{i} " for i in range(6)]
    scripted.script([{"content": "".join(words), "chunks": words, "chunk_delay_s": 0.05}])
    turn = await chat_turn_start(user=user, message="count", use_agent=False, use_rag=False)
    await turn.task
    client = await signed_in(user)
    full = await stream(client, turn.run.id)
    cut = full[1][0]
    by_header = await stream(client, turn.run.id, **{"Last-Event-ID": str(cut)})
    assert by_header == [event for event in full if event[0] > cut]
    by_query = await client.get(f"/ui/chat/runs/{turn.run.id}/stream?after_seq={cut}")
    assert html_events(await body_of(by_query)) == by_header


async def test_a_live_run_streams_its_answer_as_it_comes(user, scripted):
    words = [f"w{i} " for i in range(10)]
    scripted.script([{"content": "".join(words), "chunks": words, "chunk_delay_s": 0.1}])
    turn = await chat_turn_start(user=user, message="count", use_agent=False, use_rag=False)
    events = await stream(await signed_in(user), turn.run.id)
    await turn.task
    text = "".join(data for _, name, data in events if name == "delta")
    assert text == "".join(words)
    assert events[-1][1] == "done"
    assert "w9" in events[-1][2]


async def test_a_tool_observation_is_escaped_in_its_step_card(
    user, scripted, knowledge: Path, tmp_path: Path, settings: Any
):
    docs = tmp_path / "hostile"
    docs.mkdir()
    (docs / "xss.md").write_text(f"# Widgets\n\nWidgets render {HOSTILE} in the page.\n")
    await sync_to_async(ingest_paths)(paths=[docs], collection="hostile_docs")
    settings.KNOWLEDGE_DEFAULT_COLLECTION = "hostile_docs"
    scripted.script(
        [
            'Thought: look it up\nAction: tool:search_docs\nargs: {"query": "widgets render"}',
            "Thought: found it\nAction: final: Widgets render markup.",
        ]
    )
    turn = await chat_turn_start(user=user, message="how do widgets render?", use_agent=True)
    await turn.task
    events = await stream(await signed_in(user), turn.run.id)

    steps = [data for _, name, data in events if name == "step"]
    assert len(steps) == 1
    # Live, the finished card replaces its running card (by the card's id, out of band).
    own = f' id="step-{turn.run.id}-1" hx-swap-oob="true"'
    assert own in steps[0]
    card = steps[0].replace(own, "")
    assert card.startswith('<details class="step">')
    assert "\n" in card
    assert "search_docs" in card
    assert "xss.md" in card
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in card
    assert live_markup(card) == []
    # The page renders the stored step from the same partial, to the same markup.
    page = await (await signed_in(user)).get(f"/c/{turn.run.conversation_id}/")
    assert card in page.content.decode()


async def test_a_running_tools_card_and_output_are_escaped_and_aimed_at_its_card(
    user, scripted, sandbox_image
):
    code = f"import sys\nprint({HOSTILE!r}, flush=True)\nprint('</pre>oops', file=sys.stderr)"
    scripted.script(
        [
            "Thought: print\nAction: tool:execute_code\nargs: " + json.dumps({"code": code}),
            "Thought: done\nAction: final: Printed.",
        ]
    )
    turn = await chat_turn_start(user=user, message="run it", use_agent=True)
    await turn.task
    events = await stream(await signed_in(user), turn.run.id)

    names = [name for _, name, _ in events]
    assert names.index("step_started") < names.index("output") < names.index("step")
    running = next(data for _, name, data in events if name == "step_started")
    assert running.startswith(f'<details class="step running" id="step-{turn.run.id}-1" open>')
    assert "execute_code" in running
    assert "&lt;script&gt;" in running  # the arguments, escaped
    assert live_markup(running) == []
    action = await Step.objects.aget(trace__run=turn.run, step_type="action")
    outputs = {
        data.split('"')[1]: data for _, name, data in events if name == "output"
    }  # the swap's target → the piece
    stdout = outputs[f"beforeend:#live-{action.id}-stdout"]
    assert f'id="live-{action.id}-stdout"' in running
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in stdout
    assert live_markup(stdout) == ["span[hx-swap-oob]"]  # the page's own swap, nothing else
    assert "&lt;/pre&gt;oops" in outputs[f"beforeend:#live-{action.id}-stderr"]


async def test_a_page_loaded_mid_run_shows_the_run_as_a_live_turn(user, scripted):
    scripted.script([{"content": "slow", "delay_s": 1}])
    turn = await chat_turn_start(user=user, message="take your time", use_agent=False)
    client = await signed_in(user)
    page = (await client.get(f"/c/{turn.run.conversation_id}/")).content.decode()
    assert f'sse-connect="/ui/chat/runs/{turn.run.id}/stream"' in page
    assert page.count('class="turn assistant live"') == 1
    await turn.task
    page = (await client.get(f"/c/{turn.run.conversation_id}/")).content.decode()
    assert "sse-connect" not in page
    assert "<p>slow</p>" in page


async def test_someone_elses_run_is_404_and_an_anonymous_client_is_sent_to_log_in(
    user, other_user, scripted
):
    scripted.script(["mine"])
    turn = await chat_turn_start(user=user, message="hi", use_agent=False, use_rag=False)
    await turn.task
    foreign = await (await signed_in(other_user)).get(f"/ui/chat/runs/{turn.run.id}/stream")
    assert foreign.status_code == HTTPStatus.NOT_FOUND
    anonymous = await AsyncClient().get(f"/ui/chat/runs/{turn.run.id}/stream")
    assert anonymous.status_code == HTTPStatus.FOUND
    assert anonymous["Location"].startswith("/login/")


async def test_sending_renders_the_user_turn_and_a_live_turn_on_the_stream(user, scripted):
    scripted.script(["Hello there."])
    client = await signed_in(user)
    response = await client.post(
        "/ui/chat/messages",
        {"message": HOSTILE, "route": "chat", "conversation_id": ""},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == HTTPStatus.OK, response.content
    run = await AgentRun.objects.aget()
    html = response.content.decode()
    assert "&lt;script&gt;window.pwned = 1&lt;/script&gt;" in html
    assert "<script" not in html
    assert f'sse-connect="/ui/chat/runs/{run.id}/stream"' in html
    assert 'sse-close="done"' in html
    assert '<span class="badge route-chat">Chat</span>' in html
    assert f'value="{run.conversation_id}" hx-swap-oob="true"' in html
    assert response["HX-Replace-Url"] == f"/c/{run.conversation_id}/"
    assert "conversations-changed" in response["HX-Trigger-After-Swap"]

    events = await stream(client, run.id)
    assert "Hello there." in events[-1][2]

    again = await client.post(
        "/ui/chat/messages",
        {"message": "and again", "route": "chat", "conversation_id": str(run.conversation_id)},
        headers={"HX-Request": "true"},
    )
    assert again.status_code == HTTPStatus.OK
    assert "HX-Replace-Url" not in again
    assert 'hx-swap-oob="delete"' not in again.content.decode()
    second = await AgentRun.objects.exclude(pk=run.id).aget()
    assert second.conversation_id == run.conversation_id
    await stream(client, second.id)  # the run ends before the test does


@pytest.mark.parametrize(
    ("message", "status", "error"),
    [
        ("   ", HTTPStatus.BAD_REQUEST, "The message is empty."),
        ("", HTTPStatus.BAD_REQUEST, "The message is empty."),
        ("x" * 32_001, HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "longer than 32000 characters"),
    ],
)
async def test_a_refused_message_renders_as_a_failed_turn(user, message, status, error):
    client = await signed_in(user)
    response = await client.post(
        "/ui/chat/messages", {"message": message, "route": "auto"}, headers={"HX-Request": "1"}
    )
    assert response.status_code == status
    assert error in response.content.decode()
    assert 'class="turn assistant failed"' in response.content.decode()
    assert not await AgentRun.objects.aexists()


async def test_someone_elses_conversation_is_refused_as_unknown(user, other_user, scripted):
    scripted.script(["mine"])
    turn = await chat_turn_start(user=user, message="hi", use_agent=False, use_rag=False)
    await turn.task
    response = await (await signed_in(other_user)).post(
        "/ui/chat/messages",
        {"message": "let me in", "conversation_id": str(turn.run.conversation_id)},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == HTTPStatus.NOT_FOUND
    assert await AgentRun.objects.acount() == 1


async def test_without_htmx_sending_goes_to_the_conversation(user, scripted):
    scripted.script(["ok"])
    client = await signed_in(user)
    response = await client.post("/ui/chat/messages", {"message": "plain form", "route": "chat"})
    run = await AgentRun.objects.aget()
    assert response.status_code == HTTPStatus.FOUND
    assert response["Location"] == f"/c/{run.conversation_id}/"
    await stream(client, run.id)


# --- the step card ------------------------------------------------------------------------


def card(observation: Any, **fields: Any) -> str:
    step = {"tool_name": "execute_code", "latency_ms": 12, "observation": observation, **fields}
    return render_to_string("chat/_step.html", {"step": step_view(step)})


def test_a_program_result_shows_its_streams_exit_code_and_flags_escaped():
    html = card(
        {
            "stdout": f"{HOSTILE}\n",
            "stderr": "Traceback <b>",
            "exit_code": 137,
            "duration_ms": 3,
            "timed_out": False,
            "oom_killed": True,
            "truncated": True,
        },
        tool_args={"code": "print('<script>')"},
        thought="<i>think</i>",
    )
    assert live_markup(html) == []
    assert '<pre class="step-stdout">&lt;script&gt;window.pwned = 1&lt;/script&gt;' in html
    assert '<pre class="step-stderr">Traceback &lt;b&gt;</pre>' in html
    assert '<span class="step-exit">137</span>' in html
    assert "out of memory" in html
    assert "output truncated" in html
    assert "timed out" not in html
    assert "&lt;i&gt;think&lt;/i&gt;" in html
    assert "<span class=\"tok-s1\">'&lt;script&gt;'</span>" in html  # highlighted


def test_a_text_observation_a_legacy_one_and_search_results_render_escaped():
    text = card("Observation: not json <script>x</script>")
    assert '<pre class="step-observation">Observation: not json &lt;script&gt;' in text
    legacy = card('Observation: {"stdout": "<b>42</b>", "exit_code": 0}')
    assert '<pre class="step-stdout">&lt;b&gt;42&lt;/b&gt;</pre>' in legacy
    results = card(
        {"results": [{"source": "a.md#x", "title": "<T>", "content": "<script>y</script>"}]},
        tool_name="search_docs",
    )
    assert "a.md#x" in results
    assert "&lt;T&gt;" in results
    assert "&lt;script&gt;y" in results
    assert "Nothing found here" in card({"results": [], "message": "Nothing found here"})
    blocked = card({"blocked": True, "safety": "blocked: <os.system>", "findings": []})
    assert "blocked: &lt;os.system&gt;" in blocked
    for html in (text, legacy, results, blocked):
        assert live_markup(html) == []


def test_an_sse_frame_holds_one_data_line_per_line_of_html():
    frame = sse_frame(7, "delta", "a\nb\r\nc\rd")
    assert frame == b"id: 7\nevent: delta\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    assert html_events(frame.decode()) == [(7, "delta", "a\nb\nc\nd")]
    assert html_events(sse_frame(1, "delta", "\n").decode()) == [(1, "delta", "\n")]

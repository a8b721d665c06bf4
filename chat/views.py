"""The chat UI: the page (a conversation, or a new one), sending a message (an HTMX action
that renders the user's turn and the assistant's live turn), the run's HTML stream that the
live turn follows with htmx's SSE extension, the sidebar's conversation list with search,
rename and delete, a finished run's answer rendered as safe HTML, and for superusers the debug
mode switch and the debug panel."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator
from http import HTTPStatus
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    StreamingHttpResponse,
)
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import escape
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, replace_url, trigger_client_event

from agent.events import follow_run
from agent.knowledge.answers import strip_sources_block
from agent.llm import get_llm
from agent.models import AgentRun
from agent.sse import HEARTBEAT, sse_response
from chat.debug import conversation_debug, debug_view_json
from chat.debug_layout import panel_layout
from chat.exceptions import ConversationNotFound, CursorInvalid, RunAnswerNotFound
from chat.forms import ChatSendForm
from chat.markdown import render_markdown
from chat.models import Conversation, Message
from chat.selectors import (
    active_run_for,
    answer_sources,
    conversation_get_for,
    conversation_list_for,
    conversation_steps,
    display_messages,
    run_answer_for,
)
from chat.services import conversation_delete, conversation_rename
from chat.turns import chat_turn_start
from devassist.api import http_status
from devassist.exceptions import DomainError
from devassist.htmx import HtmxHttpRequest
from devassist.storable import MAX_INT

logger = structlog.get_logger(__name__)


def _own_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> Conversation:
    try:
        return conversation_get_for(user=request.user, conversation_id=conversation_id)
    except ConversationNotFound as exc:
        raise Http404(exc.message) from exc


ROUTE_LABELS = {"agent": "Agent", "rag": "RAG", "chat": "Chat"}

#: A program's result flags a step card names when they are set, in this order.
PROGRAM_FLAGS = (
    ("timed_out", "timed out"),
    ("oom_killed", "out of memory"),
    ("cancelled", "cancelled"),
    ("truncated", "output truncated"),
)


def _observation_data(raw: Any) -> Any:
    """A step's observation as data: the tool's structured result, as the ``step`` event
    carries it; from an event that carries the text the model was sent instead
    (``"Observation: " + JSON``, as events were stored before), the JSON in it; other text as
    it is."""
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw.removeprefix("Observation: "))
    except ValueError:
        return raw


def step_view(step: dict[str, Any]) -> dict[str, Any]:
    """A ``step`` event as its card (``chat/_step.html``) shows it. The observation becomes
    one of: ``program`` (a program's stdout, stderr, exit code, the flags set, a safety
    warning), ``blocked`` (code the safety check refused, with its reason), ``results`` (a
    search's passages, or ``results_message`` when there are none), or ``observation_text``
    (any other result, JSON indented). The card escapes every value."""
    observation = _observation_data(step.get("observation"))
    args = step.get("tool_args")
    view: dict[str, Any] = {
        "label": step.get("tool_name") or "format",
        "latency_ms": step.get("latency_ms"),
        "thought": step.get("thought") or "",
        "error": step.get("error") or "",
        "args_json": json.dumps(args, ensure_ascii=False, indent=2) if args is not None else "",
    }
    if isinstance(observation, dict) and ("stdout" in observation or "exit_code" in observation):
        view["program"] = {
            "stdout": str(observation.get("stdout") or ""),
            "stderr": str(observation.get("stderr") or ""),
            "exit_code": observation.get("exit_code"),
            "flags": [label for key, label in PROGRAM_FLAGS if observation.get(key)],
            "safety": str(observation.get("safety") or ""),
        }
    elif isinstance(observation, dict) and observation.get("blocked"):
        view["blocked"] = str(observation.get("safety") or "")
    elif isinstance(observation, dict) and isinstance(observation.get("results"), list):
        view["results"] = [r for r in observation["results"] if isinstance(r, dict)]
        view["results_message"] = str(observation.get("message") or "")
    elif isinstance(observation, str):
        view["observation_text"] = observation
    elif observation is not None:
        view["observation_text"] = json.dumps(observation, ensure_ascii=False, indent=2)
    return view


def answer_view(
    *, content: str, mode: str, model: str, sources: list[dict[str, Any]]
) -> dict[str, Any]:
    if sources:
        # The sources are listed under the answer; the answer's own list would repeat them.
        content = strip_sources_block(content)
    return {
        "html": render_markdown(content),
        "mode": mode,
        "route_label": ROUTE_LABELS.get(mode, mode),
        "model": model,
        "sources": sources,
    }


def live_view(run: AgentRun) -> dict[str, Any]:
    """A run still going as its live turn (``chat/_live_turn.html``) shows it: route, model,
    and the stream it follows."""
    return {
        "run_id": run.id,
        "conversation_id": run.conversation_id,
        "mode": run.mode,
        "route_label": ROUTE_LABELS.get(run.mode, run.mode),
        "model": run.model,
    }


@require_GET
def chat_page(request: HtmxHttpRequest, conversation_id: uuid.UUID | None = None) -> HttpResponse:
    """The chat: a conversation's turns (steps collapsed, answers rendered), or an empty new
    chat; a run still going is shown as its live turn, which follows the run's stream from its
    first event."""
    conversation = _own_conversation(request, conversation_id) if conversation_id else None
    turns: list[dict[str, Any]] = []
    active = None
    if conversation is not None:
        messages = display_messages(conversation=conversation)
        steps = conversation_steps(conversation=conversation)
        for message in messages:
            turn: dict[str, Any] = {"message": message}
            run_steps = steps.get(message.run_id, []) if message.run_id else []
            if message.role == "assistant":
                turn["answer"] = answer_view(
                    content=message.content,
                    mode=message.mode,
                    model=message.model,
                    sources=message.sources,
                )
                turn["steps"] = [step_view(s) for s in run_steps]
            elif message.run_status in {"failed", "cancelled"}:
                turn["steps"] = [step_view(s) for s in run_steps]
            turns.append(turn)
        active = active_run_for(conversation=conversation)
    page = conversation_list_for(user=request.user)
    return render(
        request,
        "chat/page.html",
        {
            "conversation": conversation,
            "turns": turns,
            "live": live_view(active) if active else None,
            "conversations": page.conversations,
            "next_cursor": page.next_cursor,
            "query": "",
            "current_id": str(conversation.id) if conversation else "",
            "model": get_llm().model,
            "debug_mode": debug_mode_on(request),
            "debug_next": request.get_full_path(),
        },
    )


@require_POST
async def send_message(request: HtmxHttpRequest) -> HttpResponse:
    """Send the composer's message (``ChatSendForm``) as a chat turn (``chat_turn_start``).

    Answers HTMX with the user's turn and the assistant's live turn, to append to the
    messages; a new conversation's URL replaces the page's, and the sidebar is told
    (``conversations-changed``) once they are in. A refused message (empty, too long, an
    unknown conversation) is the user's turn and a failed one, with the refusal's status.
    Without HTMX it goes to the conversation's page."""
    form = ChatSendForm(request.POST)
    text = request.POST.get("message", "")
    if not form.is_valid():
        # A missing message is refused as chat_turn_start refuses an empty one; the other
        # fields only go wrong when the form is forged.
        error = (
            "The message is empty."
            if "message" in form.errors
            else f"The form's {', '.join(form.errors)} is not valid."
        )
        return _send_refused(request, text=text, error=error)
    use_agent, use_rag = form.route_flags()
    conversation_id: uuid.UUID | None = form.cleaned_data["conversation_id"]
    try:
        turn = await chat_turn_start(
            user=await request.auser(),
            message=form.cleaned_data["message"],
            conversation_id=conversation_id,
            use_agent=use_agent,
            use_rag=use_rag,
            request_id=getattr(request, "request_id", ""),
        )
    except DomainError as exc:
        return _send_refused(request, text=text, error=exc.message, status=http_status(exc))
    run = turn.run
    if not request.htmx:
        return redirect("chat:conversation", run.conversation_id)
    response = render(
        request,
        "chat/_turn_sent.html",
        {"text": text, "live": live_view(run), "new_chat": conversation_id is None},
    )
    if conversation_id is None:
        response = replace_url(response, reverse("chat:conversation", args=[run.conversation_id]))
    return trigger_client_event(response, "conversations-changed", after="swap")


def _send_refused(
    request: HtmxHttpRequest, *, text: str, error: str, status: int = HTTPStatus.BAD_REQUEST
) -> HttpResponse:
    context = {"text": text, "error": error, "new_chat": not request.POST.get("conversation_id")}
    return render(request, "chat/_turn_refused.html", context, status=status)


# --- the run's HTML stream ------------------------------------------------------------------

#: Where SSE ends a line: a ``data:`` line holds none of these.
_SSE_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@require_GET
async def run_stream(request: HtmxHttpRequest, run_id: uuid.UUID) -> StreamingHttpResponse:
    """The stream of one of the user's runs as the chat page shows it (404 for anyone else's
    run, as for a missing one): the run's events after ``Last-Event-ID`` (or ``?after_seq=``;
    the header wins, so the browser's reconnects replay nothing twice), each rendered on the
    server as a named SSE event for htmx's SSE extension (``html_event``), with heartbeat
    comments while the run is quiet. A finished run's stream answers at once and ends with
    ``done``."""
    user = await request.auser()
    try:
        await sync_to_async(run_answer_for)(user=user, run_id=run_id)
    except RunAnswerNotFound as exc:
        raise Http404(exc.message) from exc
    return sse_response(_html_frames(user=user, run_id=run_id, after_seq=_after_seq(request)))


def _after_seq(request: HttpRequest) -> int:
    """The seq the client has: ``Last-Event-ID``, else ``?after_seq=``, else 0."""
    for value in (request.headers.get("Last-Event-ID", ""), request.GET.get("after_seq", "")):
        if value.isascii() and value.isdigit():
            digits = value.lstrip("0") or "0"
            # Past 19 digits it is past every seq (and int() refuses 4,300 of them).
            return MAX_INT if len(digits) > 19 else min(int(digits), MAX_INT)
    return 0


async def _html_frames(*, user: Any, run_id: uuid.UUID, after_seq: int) -> AsyncIterator[bytes]:
    async for item in follow_run(run_id, after_seq=after_seq):
        if item is None:
            yield HEARTBEAT
            continue
        seq, event = item
        rendered = await html_event(user=user, run_id=run_id, event=event)
        if rendered is not None:
            yield sse_frame(seq, *rendered)


async def html_event(
    *, user: Any, run_id: uuid.UUID, event: dict[str, Any]
) -> tuple[str, str] | None:
    """A run event as ``(SSE event name, HTML)`` for the live turn, None for one the page does
    not show (``meta``: the live turn is rendered from the run; extensions). ``step`` is its
    card (``chat/_step.html``), ``delta`` the answer's text escaped, ``run-error`` (the
    ``error`` event, renamed because EventSource dispatches its own connection errors as
    ``error``) the failure, ``done`` the answer rendered as the page renders a finished one
    (or the run's failure); all text in them is escaped."""
    kind = event.get("type")
    if kind == "step":
        return "step", render_to_string("chat/_step.html", {"step": step_view(event)})
    if kind == "delta":
        return "delta", escape(str(event.get("content") or ""))
    if kind == "error":
        context = {"code": event.get("code"), "message": event.get("message")}
        return "run-error", render_to_string("chat/_run_error.html", context)
    if kind == "done":
        return "done", await sync_to_async(_final_answer_html)(user=user, run_id=run_id)
    return None


def _final_answer_html(*, user: Any, run_id: uuid.UUID) -> str:
    run, answer = run_answer_for(user=user, run_id=run_id)
    return render_to_string("chat/_answer_body.html", _answer_context(run, answer))


def sse_frame(seq: int, name: str, html: str) -> bytes:
    """One named SSE event with ``id: seq``; every line of ``html`` is a ``data:`` line of its
    own (the client joins them with newlines), so no text can end the event early."""
    data = "".join(f"data: {line}\n" for line in _SSE_LINE_BREAK.split(html))
    # "replace": a lone surrogate in a model's text must not end the stream.
    return f"id: {seq}\nevent: {name}\n{data}\n".encode(errors="replace")


@require_GET
def conversation_list(request: HtmxHttpRequest) -> HttpResponse:
    """The sidebar's list (``q`` searches, ``cursor`` continues)."""
    query = request.GET.get("q", "")[:200]
    try:
        page = conversation_list_for(
            user=request.user, query=query, cursor=request.GET.get("cursor") or None
        )
    except CursorInvalid as exc:
        return HttpResponseBadRequest(exc.message)
    # The open conversation (the composer's field), whose row is marked.
    current = request.GET.get("conversation_id", "")
    return render(
        request,
        "chat/page.html#conversation_list",
        {
            "conversations": page.conversations,
            "next_cursor": page.next_cursor,
            "query": query,
            "current_id": current,
            "more": bool(request.GET.get("cursor")),
        },
    )


@require_POST
def conversation_rename_view(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """Rename to the ``HX-Prompt`` answer (or the ``title`` field); returns the row."""
    conversation = _own_conversation(request, conversation_id)
    title = (request.htmx.prompt if request.htmx else None) or request.POST.get("title", "")
    conversation = conversation_rename(conversation=conversation, title=title)
    return render(request, "chat/_conversation_row.html", {"c": conversation})


@require_POST
def conversation_delete_view(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """Delete; the row disappears, or the page goes to a new chat when it was the open one."""
    conversation = _own_conversation(request, conversation_id)
    conversation_delete(conversation=conversation)
    if request.POST.get("current") == str(conversation_id):
        return HttpResponseClientRedirect("/")
    return HttpResponse("")


@require_GET
def run_answer(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """A run's answer as the chat shows it once the run is over (route, model, sources, the
    rendered Markdown), or its error."""
    try:
        run, answer = run_answer_for(user=request.user, run_id=run_id)
    except RunAnswerNotFound as exc:
        raise Http404(exc.message) from exc
    return render(request, "chat/_answer_body.html", _answer_context(run, answer))


def _answer_context(run: AgentRun, answer: Message | None) -> dict[str, Any]:
    context: dict[str, Any] = {"run": run}
    if answer is not None:
        context["answer"] = answer_view(
            content=answer.content,
            mode=run.mode,
            model=run.model,
            sources=answer_sources(answer),
        )
    return context


#: The session key of a superuser's debug mode (a bool; absent means off).
DEBUG_MODE_SESSION_KEY = "chat_debug_mode"

#: The filter buttons of the debug panel, in order, with the ``DebugView.counts`` key of each.
DEBUG_FILTERS = (
    ("all", "All"),
    ("user", "User"),
    ("model", "Model"),
    ("tool", "Tool"),
    ("error", "Error"),
    ("system", "System"),
)


def debug_mode_on(request: HtmxHttpRequest) -> bool:
    """Whether the debug panel is offered: the user is a superuser now and switched debug mode
    on in this session (a user who stops being a superuser loses it at once)."""
    return bool(request.user.is_superuser and request.session.get(DEBUG_MODE_SESSION_KEY))


@require_POST
def debug_mode_switch(request: HtmxHttpRequest) -> HttpResponse:
    """Switch this session's debug mode on (``on=1``) or off (anything else); superusers only
    (403). Answers HTMX with the chat header's debug controls and, when switched off, an empty
    debug panel swapped out of band (an open panel closes); a form posted without JavaScript
    goes back to ``next`` (a local URL) or home."""
    if not request.user.is_superuser:
        return HttpResponse("Only superusers have a debug mode.", status=HTTPStatus.FORBIDDEN)
    on = request.POST.get("on") == "1"
    request.session[DEBUG_MODE_SESSION_KEY] = on
    logger.info("debug_mode_switched", user_id=request.user.pk, on=on)
    next_url = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        next_url, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        next_url = reverse("home")
    if not request.htmx:
        return redirect(next_url)
    return render(request, "chat/_debug_mode.html", {"debug_mode": on, "debug_next": next_url})


def _debug_panel_refused(status: int, message: str) -> HttpResponse:
    # The panel polls and refreshes itself: the event tells an open one to close.
    response = HttpResponse(message, status=status, content_type="text/plain; charset=utf-8")
    return trigger_client_event(response, "debug-panel-closed", {"status": status})


@require_GET
def debug_panel(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """The debug panel of one of the user's conversations (what the chat header's entry loads,
    and what the panel reloads to refresh, every 2 s while a run is live). 403 unless the user
    is a superuser with debug mode on; 404 for a conversation that is not theirs, the same as
    for a missing one. Refusals carry the ``debug-panel-closed`` client event."""
    if not request.user.is_superuser:
        return _debug_panel_refused(HTTPStatus.FORBIDDEN, "Only superusers can debug.")
    if not debug_mode_on(request):
        return _debug_panel_refused(HTTPStatus.FORBIDDEN, "Debug mode is off.")
    try:
        view = conversation_debug(user=request.user, conversation_id=conversation_id)
    except DomainError as exc:
        status = http_status(exc)
        message = "Not found." if status == HTTPStatus.NOT_FOUND else exc.message
        return _debug_panel_refused(status, message)
    return render(
        request,
        "chat/_debug_panel.html",
        {
            "view": view,
            "layout": panel_layout(view=view),
            "view_json": debug_view_json(view),
            "filters": [(name, label, view.counts.get(name, 0)) for name, label in DEBUG_FILTERS],
            "panel_url": reverse("chat:debug_panel", args=[conversation_id]),
        },
    )

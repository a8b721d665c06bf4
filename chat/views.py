"""The chat UI: the page (a conversation, or a new one), the sidebar's conversation list with
search, rename and delete, a finished run's answer rendered as safe HTML, and for superusers the
debug mode switch and the debug panel."""

from __future__ import annotations

import json
import uuid
from http import HTTPStatus
from typing import Any

import structlog
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect, trigger_client_event

from agent.events import step_events
from agent.knowledge.answers import strip_sources_block
from agent.llm import get_llm
from chat.debug import conversation_debug, debug_view_json
from chat.debug_layout import panel_layout
from chat.markdown import render_markdown
from chat.models import Conversation
from chat.selectors import (
    ConversationNotFound,
    CursorInvalid,
    RunAnswerNotFound,
    active_run_for,
    conversation_get_for,
    conversation_list_for,
    display_messages,
    run_answer_for,
)
from chat.services import conversation_delete, conversation_rename
from devassist.errors import ApiError
from devassist.htmx import HtmxHttpRequest

logger = structlog.get_logger(__name__)


def _own_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> Conversation:
    try:
        return conversation_get_for(user=request.user, conversation_id=conversation_id)
    except ConversationNotFound as exc:
        raise Http404(exc.message) from exc


ROUTE_LABELS = {"agent": "Agent", "rag": "RAG", "chat": "Chat"}


def step_view(step: dict[str, Any]) -> dict[str, Any]:
    """A ``step`` event as its card shows it: the observation split into stdout, stderr, exit
    code and truncation when it is a program's result."""
    raw = str(step.get("observation") or "")
    result: Any = None
    try:
        result = json.loads(raw.removeprefix("Observation: "))
    except ValueError:
        result = None
    program = isinstance(result, dict) and ("stdout" in result or "exit_code" in result)
    return {
        **step,
        "args_json": json.dumps(step.get("tool_args"), ensure_ascii=False, indent=2)
        if step.get("tool_args") is not None
        else "",
        "program": program,
        "stdout": result.get("stdout", "") if program else "",
        "stderr": result.get("stderr", "") if program else "",
        "exit_code": result.get("exit_code") if program else None,
        "truncated": bool(result.get("truncated")) if program else False,
        "label": step.get("tool_name") or "format",
    }


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


@require_GET
def chat_page(request: HtmxHttpRequest, conversation_id: uuid.UUID | None = None) -> HttpResponse:
    """The chat: a conversation's turns (steps collapsed, answers rendered), or an empty new
    chat; a run still going is re-attached to by the page's script."""
    conversation = _own_conversation(request, conversation_id) if conversation_id else None
    turns: list[dict[str, Any]] = []
    active = None
    if conversation is not None:
        messages = display_messages(conversation=conversation)
        steps = step_events([m.run_id for m in messages if m.run_id])
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
            "active_run": active,
            "conversations": page.conversations,
            "next_cursor": page.next_cursor,
            "query": "",
            "current_id": str(conversation.id) if conversation else "",
            "model": get_llm().model,
            "debug_mode": debug_mode_on(request),
            "debug_next": request.get_full_path(),
        },
    )


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
    current = request.GET.get("current", "")
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
    context: dict[str, Any] = {"run": run}
    if answer is not None:
        context["answer"] = answer_view(
            content=answer.content,
            mode=run.mode,
            model=run.model,
            sources=(answer.metadata or {}).get("sources", []),
        )
    return render(request, "chat/_answer_body.html", context)


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
    except ApiError as exc:
        message = "Not found." if exc.status == HTTPStatus.NOT_FOUND else exc.message
        return _debug_panel_refused(exc.status, message)
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

"""The chat UI: the page (a conversation, or a new one), the sidebar's conversation list with
search, rename and delete, and a finished run's answer rendered as safe HTML."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from agent.events import step_events
from agent.knowledge.answers import strip_sources_block
from agent.llm import get_llm
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
from devassist.htmx import HtmxHttpRequest


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

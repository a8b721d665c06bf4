"""The chat UI: the page (a conversation, or a new one), sending a message (an HTMX action
that renders the user's turn and the assistant's live turn), the run's HTML stream that the
live turn follows with htmx's SSE extension, the sidebar's conversation list with search,
rename and delete, a finished run's answer rendered as safe HTML, and for superusers the debug
mode switch and the debug panel."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from http import HTTPStatus
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
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
from django.utils.safestring import mark_safe
from django.utils.translation import gettext, gettext_noop, pgettext_lazy
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import (
    HttpResponseClientRedirect,
    replace_url,
    reswap,
    retarget,
    trigger_client_event,
)

from agent.events import follow_run
from agent.knowledge.answers import listed_sources, strip_sources_block
from agent.knowledge.selectors import models_document_url
from agent.llm import get_llm
from agent.models import AgentRun, RunStatus
from agent.selectors import run_outcomes, run_steps
from agent.sse import HEARTBEAT, sse_response
from chat.debug import conversation_debug, debug_view_json
from chat.debug_layout import panel_layout
from chat.exceptions import (
    ChatInputInvalid,
    ConversationNotFound,
    CursorInvalid,
    FeedbackInvalid,
    MessageNotFound,
    RunAnswerNotFound,
    TitleInvalid,
)
from chat.forms import BranchForm, ChatSendForm, EditForm, FeedbackForm, RenameForm
from chat.models import Conversation, MessageRole
from chat.refusals import refusal_text
from chat.selectors import (
    DisplayMessage,
    active_run_for,
    answer_display_for,
    attachment_list,
    conversation_get_for,
    conversation_list_for,
    conversation_steps,
    display_messages,
    message_get_for,
    run_answer_for,
)
from chat.services import (
    answer_feedback_give,
    conversation_branch_choose,
    conversation_delete,
    conversation_rename,
    conversation_restore,
)
from chat.turns import chat_turn_edit, chat_turn_regenerate, chat_turn_start
from chat.uploads import uploaded_files
from devassist.api import http_status
from devassist.exceptions import DomainError
from devassist.htmx import HtmxHttpRequest, local_next
from devassist.markdown import highlight_code, render_markdown
from devassist.storable import MAX_INT
from traces.artifact_cards import artifact_cards
from traces.models import StepStatus, StepType
from traces.outcomes import step_outcome

logger = structlog.get_logger(__name__)


def _own_conversation(request: HttpRequest, conversation_id: uuid.UUID) -> Conversation:
    try:
        return conversation_get_for(user=request.user, conversation_id=conversation_id)
    except ConversationNotFound as exc:
        raise Http404(exc.message) from exc


#: The route badge of each run mode (the mode stays English: it is data, and the API's).
ROUTE_LABELS = {
    "agent": pgettext_lazy("route", "Agent"),
    "rag": pgettext_lazy("route", "RAG"),
    "chat": pgettext_lazy("route", "Chat"),
}

#: A program's result flags a step card names when they are set, in this order.
PROGRAM_FLAGS = (
    ("timed_out", pgettext_lazy("program flag", "timed out")),
    ("oom_killed", pgettext_lazy("program flag", "out of memory")),
    ("cancelled", pgettext_lazy("program flag", "cancelled")),
    ("truncated", pgettext_lazy("program flag", "output truncated")),
)

#: The tool name on the card of a reply that called no tool (it was out of format).
NO_TOOL_LABEL = pgettext_lazy("step card", "format")


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


def _step_outcome(step: dict[str, Any], observation: Any) -> dict[str, Any]:
    """A ``step`` event's outcome (``traces.outcomes``): the one it carries; for an event
    stored before events carried one, the same rule on its observation, with the status it
    implied (failed when it has an error)."""
    if isinstance(step.get("outcome"), dict):
        return step["outcome"]
    error = str(step.get("error") or "")
    status = StepStatus.FAILED if error else StepStatus.COMPLETED
    return step_outcome(StepType.RESULT, status, error, {"result": observation}).as_dict()


def step_view(step: dict[str, Any], *, trace_id: uuid.UUID | None = None) -> dict[str, Any]:
    """A ``step`` event (of the run whose trace is ``trace_id``) as its card
    (``chat/_step.html``) shows it. The observation becomes one of: ``program`` (a program's
    stdout, stderr, exit code, the flags set, a safety warning, and the files it wrote as
    ``artifacts``: ``chat.artifact_cards``), ``blocked`` (code the safety check refused, with
    its reason), ``results`` (a search's passages, or ``results_message`` when there are
    none), or ``observation_text`` (any other result, JSON indented); ``outcome`` is the state
    its summary line shows. The card escapes every value; the arguments are highlighted by
    Pygments (``args_code``, ``args_json``), which escapes them. A table's preview reads the
    start of its file: call it off the event loop."""
    observation = _observation_data(step.get("observation"))
    view: dict[str, Any] = {
        "label": step.get("tool_name") or NO_TOOL_LABEL,
        "latency_ms": step.get("latency_ms"),
        "thought": step.get("thought") or "",
        "error": step.get("error") or "",
        **_args_view(step.get("tool_name"), step.get("tool_args")),
        "outcome": _step_outcome(step, observation),
    }
    if isinstance(observation, dict) and ("stdout" in observation or "exit_code" in observation):
        view["program"] = {
            "stdout": str(observation.get("stdout") or ""),
            "stderr": str(observation.get("stderr") or ""),
            "exit_code": observation.get("exit_code"),
            "flags": [label for key, label in PROGRAM_FLAGS if observation.get(key)],
            "safety": str(observation.get("safety") or ""),
            "artifacts": artifact_cards(trace_id, observation.get("artifacts") or []),
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


def running_step_view(started: dict[str, Any]) -> dict[str, Any]:
    """A ``step_started`` event as its running card (``chat/_step.html`` with ``running``): the
    tool, its arguments, when it started (epoch ms, for the elapsed time) and ``live_id``, the
    prefix of the ids of the card's live output (``<live_id>-stdout``, ``<live_id>-stderr``)
    that ``output`` events append to."""
    args = started.get("tool_args")
    return {
        "running": True,
        "label": started.get("tool_name") or NO_TOOL_LABEL,
        "started_at_ms": started.get("started_at_ms"),
        **_args_view(started.get("tool_name"), args),
        "live_id": live_output_id(started.get("step_id")),
    }


def live_output_id(step_id: Any) -> str:
    """The prefix of the ids of an action step's live output in its running card."""
    return f"live-{step_id}"


def step_card_id(run_id: uuid.UUID, step_index: Any) -> str:
    """The id of the card of a run's ``step_index``-th step: its running card, then the
    finished card that replaces it."""
    return f"step-{run_id}-{step_index}"


def _args_view(tool: Any, args: Any) -> dict[str, str]:
    """A tool call's arguments as highlighted HTML: ``execute_code``'s ``code`` as Python
    (``args_code``), the others as indented JSON (``args_json``); empty strings for none."""
    code = args.get("code") if tool == "execute_code" and isinstance(args, dict) else None
    if isinstance(code, str):
        args = {key: value for key, value in args.items() if key != "code"} or None
    view = {"args_code": "", "args_json": ""}
    if isinstance(code, str):
        view["args_code"] = mark_safe(highlight_code(code, "python"))  # noqa: S308
    if args is not None:
        text = json.dumps(args, ensure_ascii=False, indent=2)
        view["args_json"] = mark_safe(highlight_code(text, "json"))  # noqa: S308
    return view


def answer_view(
    *, content: str, mode: str, model: str, sources: list[dict[str, Any]]
) -> dict[str, Any]:
    """An answer as ``chat/_answer_body.html`` shows it: its Markdown rendered, and the
    sources its own ``Sources:`` list names, listed under it (each with the ``url`` of its
    document page when the list links it) instead of that list."""
    if sources:
        listed = listed_sources(content)
        sources = [{**s, "url": listed[s["number"]]} for s in sources if s.get("number") in listed]
        content = strip_sources_block(content)
    return {
        "html": render_markdown(content) if content.strip() else "",
        "mode": mode,
        "route_label": ROUTE_LABELS.get(mode, mode),
        "model": model,
        "sources": sources,
    }


def versions_view(message: DisplayMessage, conversation_id: uuid.UUID) -> dict[str, Any] | None:
    """A turn's version switcher (``chat/_versions.html``): which of how many, and the turns
    before and after it; None for a turn with one version."""
    versions = message.versions
    if len(versions) < 2:
        return None
    index = message.version - 1
    return {
        "index": index + 1,
        "count": len(versions),
        "prev": versions[index - 1] if index > 0 else None,
        "next": versions[index + 1] if index + 1 < len(versions) else None,
        "conversation_id": conversation_id,
    }


def answer_turn_view(
    message: DisplayMessage,
    conversation_id: uuid.UUID,
    cards: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """An answer turn as the chat shows it (``chat/_answer.html``): ``answer_view``, its
    run's state (``stopped``, ``failed``, with the error), its Markdown source (Copy), its
    versions and its feedback, and the images the run's programs made (from its step
    ``cards``), shown under it."""
    return {
        "images": [
            artifact
            for card in cards
            for artifact in (card.get("program") or {}).get("artifacts", [])
            if artifact["kind"] == "image"
        ],
        **answer_view(
            content=message.content,
            mode=message.mode,
            model=message.model,
            sources=message.sources,
        ),
        "message_id": message.id,
        "run_id": message.run_id,
        "status": message.run_status,
        "stopped": message.run_status == RunStatus.CANCELLED,
        "failed": message.run_status == RunStatus.FAILED,
        "error": message.error,
        "source": message.content,
        "versions": versions_view(message, conversation_id),
        "feedback": message.feedback,
    }


def user_turn_view(message: DisplayMessage, conversation_id: uuid.UUID) -> dict[str, Any]:
    """A user message as the chat shows it (``chat/_user.html``), with its versions and its
    files."""
    return {
        "message_id": message.id,
        "text": message.content,
        "versions": versions_view(message, conversation_id),
        "attachments": message.attachments,
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


def messages_context(conversation: Conversation | None) -> dict[str, Any]:
    """What ``chat/page.html#messages`` shows of a conversation: the turns of the branch it
    shows (steps collapsed, answers rendered, each with its actions), and a run still going
    as its live turn, which follows the run's stream from its first event. A user message
    whose run failed before answers were always stored shows that failure after it."""
    turns: list[dict[str, Any]] = []
    if conversation is None:
        return {"turns": turns, "live": None}
    steps = conversation_steps(conversation=conversation)

    def cards(message: DisplayMessage) -> list[dict[str, Any]]:
        run_steps = steps.get(message.run_id, []) if message.run_id else []
        return [step_view(s, trace_id=message.trace_id) for s in run_steps]

    for message in display_messages(conversation=conversation):
        if message.role == MessageRole.ASSISTANT:
            answer_cards = cards(message)
            turns.append(
                {
                    "message": message,
                    "answer": answer_turn_view(message, conversation.id, answer_cards),
                    "steps": answer_cards,
                }
            )
            continue
        turn: dict[str, Any] = {
            "message": message,
            "user_turn": user_turn_view(message, conversation.id),
        }
        if message.run_status in {"failed", "cancelled"} and not message.answered:
            turn["steps"] = cards(message)
        turns.append(turn)
    active = active_run_for(conversation=conversation)
    return {"turns": turns, "live": live_view(active) if active else None}


@require_GET
def chat_page(request: HtmxHttpRequest, conversation_id: uuid.UUID | None = None) -> HttpResponse:
    """The chat: a conversation's branch (``messages_context``), or an empty new chat. Without
    a model (the offline provider) a notice says so, and how to add one. ``?deleted=<id>``
    (where deleting the open conversation leads) offers to undo that delete."""
    conversation = _own_conversation(request, conversation_id) if conversation_id else None
    page = conversation_list_for(user=request.user)
    llm = get_llm()
    return render(
        request,
        "chat/page.html",
        {
            "conversation": conversation,
            **messages_context(conversation),
            "conversations": page.conversations,
            "next_cursor": page.next_cursor,
            "query": "",
            "current_id": str(conversation.id) if conversation else "",
            "model": llm.model,
            "offline": not llm.writes_free_text,
            "models_url": None if llm.writes_free_text else models_document_url(),
            "debug_mode": debug_mode_on(request),
            "debug_next": request.get_full_path(),
            "deleted": _undoable(request, request.GET.get("deleted", "")),
            "undo_s": settings.CHAT_UNDO_DELETE_S,
        },
    )


def _undoable(request: HtmxHttpRequest, value: str) -> Conversation | None:
    """The user's conversation ``value`` names if it is deleted and may still be restored."""
    try:
        conversation_id = uuid.UUID(value)
    except ValueError:
        return None
    return (
        Conversation.objects.restorable_by(request.user)
        .filter(pk=conversation_id)
        .only("id", "title")
        .first()
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
            gettext("The message is empty.")
            if "message" in form.errors
            else gettext("The form's %(fields)s is not valid.") % {"fields": ", ".join(form.errors)}
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
            files=await sync_to_async(uploaded_files)(request.FILES.getlist("files")),
            request_id=getattr(request, "request_id", ""),
        )
    except DomainError as exc:
        return _send_refused(request, text=text, error=refusal_text(exc), status=http_status(exc))
    run = turn.run
    if not request.htmx:
        return redirect("chat:conversation", run.conversation_id)
    asked = turn.asked
    response = render(
        request,
        "chat/_turn_sent.html",
        {
            "text": text,
            "user_turn": {
                "message_id": asked.id,
                "text": text,
                "attachments": await sync_to_async(attachment_list)(asked),
            }
            if asked
            else None,
            "live": live_view(run),
            "new_chat": conversation_id is None,
        },
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
        run, _ = await sync_to_async(run_answer_for)(user=user, run_id=run_id)
    except RunAnswerNotFound as exc:
        raise Http404(exc.message) from exc
    frames = _html_frames(
        user=user, run_id=run_id, trace_id=run.trace_id, after_seq=_after_seq(request)
    )
    return sse_response(frames)


def _after_seq(request: HttpRequest) -> int:
    """The seq the client has: ``Last-Event-ID``, else ``?after_seq=``, else 0."""
    for value in (request.headers.get("Last-Event-ID", ""), request.GET.get("after_seq", "")):
        if value.isascii() and value.isdigit():
            digits = value.lstrip("0") or "0"
            # Past 19 digits it is past every seq (and int() refuses 4,300 of them).
            return MAX_INT if len(digits) > 19 else min(int(digits), MAX_INT)
    return 0


async def _html_frames(
    *, user: Any, run_id: uuid.UUID, trace_id: uuid.UUID | None, after_seq: int
) -> AsyncIterator[bytes]:
    async for item in follow_run(run_id, after_seq=after_seq):
        if item is None:
            yield HEARTBEAT
            continue
        seq, event = item
        rendered = await html_event(user=user, run_id=run_id, trace_id=trace_id, event=event)
        if rendered is not None:
            yield sse_frame(seq, *rendered)


async def html_event(
    *, user: Any, run_id: uuid.UUID, trace_id: uuid.UUID | None, event: dict[str, Any]
) -> tuple[str, str] | None:
    """A run event as ``(SSE event name, HTML)`` for the live turn, None for one the page does
    not show (``meta``: the live turn is rendered from the run). ``step_started`` is the tool
    call's running card (``chat/_step.html``, ``running``), ``output`` the text it printed,
    appended to that card's stdout or stderr out of band; ``step`` is the finished card
    (``chat/_step.html``), which replaces the running card out of band when the step had one
    (a tool call; a reply out of format has none and is appended); ``delta`` the answer's
    text escaped, ``run-error`` (the ``error`` event, renamed because EventSource dispatches
    its own connection errors as ``error``) the failure, ``done`` the answer rendered as the
    page renders a finished one (or the run's failure); all text in them is escaped."""
    kind = event.get("type")
    context: dict[str, Any]
    if kind == "step_started":
        context = {
            "step": running_step_view(event),
            "card_id": step_card_id(run_id, event.get("step_index")),
        }
        return "step_started", render_to_string("chat/_step.html", context)
    if kind == "output":
        stream = "stderr" if event.get("stream") == "stderr" else "stdout"
        target = f"{live_output_id(event.get('step_id'))}-{stream}"
        context = {"target": target, "text": str(event.get("text") or "")}
        return "output", render_to_string("chat/_step_output.html", context).strip()
    if kind == "step":
        context = {
            "step": await sync_to_async(step_view)(event, trace_id=trace_id),
            "card_id": step_card_id(run_id, event.get("step_index")),
            "replaces_running": event.get("tool_name") is not None,
        }
        return "step", render_to_string("chat/_step.html", context)
    if kind == "delta":
        return "delta", escape(str(event.get("content") or ""))
    if kind == "error":
        context = {"code": event.get("code"), "message": event.get("message")}
        return "run-error", render_to_string("chat/_run_error.html", context)
    if kind == "done":
        return "done", await sync_to_async(_final_answer_html)(user=user, run_id=run_id)
    return None


def _final_answer_html(*, user: Any, run_id: uuid.UUID) -> str:
    """The live turn's end: its answer body, and its header (the run's state) and actions
    swapped in out of band."""
    run, answer = answer_display_for(user=user, run_id=run_id)
    return render_to_string("chat/_answer_done.html", _answer_context(run, answer))


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


@require_GET
def conversation_rename_dialog(
    request: HtmxHttpRequest, conversation_id: uuid.UUID
) -> HttpResponse:
    """The rename dialog of one of the user's conversations (``chat/_rename_dialog.html``)."""
    conversation = _own_conversation(request, conversation_id)
    return render(request, "chat/_rename_dialog.html", {"c": conversation})


@require_POST
def conversation_rename_view(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """Rename to the ``title`` field; answers with the row (out of band, and the dialog
    closed), or the dialog again with the error for a blank title (400)."""
    conversation = _own_conversation(request, conversation_id)
    form = RenameForm(request.POST)
    title = form.cleaned_data["title"] if form.is_valid() else ""
    try:
        conversation = conversation_rename(conversation=conversation, title=title)
    except TitleInvalid as exc:
        return render(
            request,
            "chat/_rename_dialog.html",
            {"c": conversation, "error": refusal_text(exc)},
            status=HTTPStatus.BAD_REQUEST,
        )
    if not request.htmx:
        return redirect("chat:conversation", conversation.id)
    # The row stays marked when it is the open conversation's.
    page = request.htmx.current_url_abs_path or ""
    shown = page.startswith(reverse("chat:conversation", args=[conversation.id]))
    return render(
        request,
        "chat/_renamed.html",
        {"c": conversation, "current_id": str(conversation.id) if shown else ""},
    )


@require_POST
def conversation_delete_view(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """Delete (``conversation_delete``: undoable for ``CHAT_UNDO_DELETE_S``): the row goes,
    and a toast offers to undo; the open conversation's page goes to a new chat that offers
    it (``?deleted=``)."""
    conversation = _own_conversation(request, conversation_id)
    conversation_delete(conversation=conversation)
    if request.POST.get("current") == str(conversation_id):
        return HttpResponseClientRedirect(f"{reverse('home')}?deleted={conversation_id}")
    return render(
        request,
        "chat/_deleted.html",
        {"deleted": conversation, "undo_s": settings.CHAT_UNDO_DELETE_S},
    )


@require_POST
def conversation_restore_view(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """Undo a delete (``conversation_restore``; 404 once the delay has passed): the toast
    goes and the sidebar refreshes; from the new chat a delete led to, back to the
    conversation."""
    try:
        conversation = conversation_restore(user=request.user, conversation_id=conversation_id)
    except ConversationNotFound as exc:
        raise Http404(exc.message) from exc
    if request.POST.get("reopen") == "1":
        return HttpResponseClientRedirect(reverse("chat:conversation", args=[conversation.id]))
    return trigger_client_event(HttpResponse(""), "conversations-changed")


async def _branch_action(
    request: HtmxHttpRequest, start: Callable[[Any], Awaitable[Conversation]]
) -> HttpResponse:
    """Run ``start`` (an action that changes the branch a conversation shows: regenerate,
    edit, choose a version; it returns the conversation) for the signed-in user, and answer
    with the conversation's messages as they now stand (``chat/page.html#messages``), its run
    included as a live turn. A refusal (a run still going, a message not theirs) is a toast
    with the refusal's status."""
    user = await request.auser()
    try:
        conversation = await start(user)
    except DomainError as exc:
        return _toast_refusal(request, exc)
    context = await sync_to_async(messages_context)(conversation)
    response = render(request, "chat/page.html#messages", context)
    return trigger_client_event(response, "conversations-changed", after="swap")


def _toast_refusal(request: HtmxHttpRequest, exc: DomainError) -> HttpResponse:
    """``exc`` as a toast in the reader's language (``chat.refusals``), with its status."""
    response = render(
        request, "chat/_toast.html", {"message": refusal_text(exc)}, status=http_status(exc)
    )
    return reswap(retarget(response, "#toasts"), "beforeend")


@require_POST
async def regenerate_view(request: HtmxHttpRequest, message_id: uuid.UUID) -> HttpResponse:
    """Regenerate an answer (or answer a user message again): ``chat_turn_regenerate``."""

    async def start(user: Any) -> Conversation:
        turn = await chat_turn_regenerate(
            user=user, message_id=message_id, request_id=getattr(request, "request_id", "")
        )
        assert turn.run.conversation_id is not None
        return await Conversation.objects.aget(pk=turn.run.conversation_id)

    return await _branch_action(request, start)


@require_POST
async def edit_view(request: HtmxHttpRequest, message_id: uuid.UUID) -> HttpResponse:
    """Send an edited version of a user message (``EditForm``): ``chat_turn_edit``."""
    form = EditForm(request.POST)

    async def start(user: Any) -> Conversation:
        if not form.is_valid():
            raise ChatInputInvalid(gettext_noop("The message is empty."))
        use_agent, use_rag = form.route_flags()
        turn = await chat_turn_edit(
            user=user,
            message_id=message_id,
            message=form.cleaned_data["message"],
            use_agent=use_agent,
            use_rag=use_rag,
            request_id=getattr(request, "request_id", ""),
        )
        assert turn.run.conversation_id is not None
        return await Conversation.objects.aget(pk=turn.run.conversation_id)

    return await _branch_action(request, start)


@require_POST
async def branch_view(request: HtmxHttpRequest, conversation_id: uuid.UUID) -> HttpResponse:
    """Show another version of a turn (``BranchForm``): ``conversation_branch_choose``."""
    form = BranchForm(request.POST)

    def choose(user: Any) -> Conversation:
        conversation = conversation_get_for(user=user, conversation_id=conversation_id)
        if not form.is_valid():
            raise MessageNotFound("No such version.")
        conversation_branch_choose(
            conversation=conversation, message_id=form.cleaned_data["message_id"]
        )
        return conversation

    return await _branch_action(request, sync_to_async(choose))


@require_POST
def feedback_view(request: HtmxHttpRequest, message_id: uuid.UUID) -> HttpResponse:
    """Rate an answer (``FeedbackForm``: up or down, an optional comment):
    ``answer_feedback_give``; answers with the answer's feedback controls."""
    form = FeedbackForm(request.POST)
    try:
        answer = message_get_for(user=request.user, message_id=message_id)
        if not form.is_valid():
            raise FeedbackInvalid(gettext_noop("The rating must be up or down, the comment short."))
        given = answer_feedback_give(
            user=request.user,
            answer=answer,
            rating=form.cleaned_data["rating"],
            comment=form.cleaned_data["comment"],
        )
    except DomainError as exc:
        return _toast_refusal(request, exc)
    view = {"message_id": answer.id, "feedback": given}
    return render(request, "chat/_feedback.html", {"answer": view, "commenting": True})


@require_GET
def run_answer(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """A run's answer as the chat shows it once the run is over (route, model, sources, the
    rendered Markdown, the run's state and error), or that it is still working."""
    try:
        run, answer = answer_display_for(user=request.user, run_id=run_id)
    except RunAnswerNotFound as exc:
        raise Http404(exc.message) from exc
    return render(request, "chat/_answer_body.html", _answer_context(run, answer))


def _answer_context(run: AgentRun, answer: DisplayMessage | None) -> dict[str, Any]:
    """``chat/_answer_body.html``'s context: the run, and its answer turn
    (``answer_turn_view``) once it is stored; without one (a run still going, or one that
    failed before answers were always stored) the run's error."""
    context: dict[str, Any] = {"run": run}
    if answer is not None and run.conversation_id is not None:
        cards = [step_view(s, trace_id=run.trace_id) for s in run_steps([run])[run.id]]
        context["answer"] = answer_turn_view(answer, run.conversation_id, cards)
    else:
        context["error"] = run_outcomes([run], answers=False)[run.id].error
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
    next_url = local_next(request)
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

"""The ReAct loop: pure orchestration of an injected model, tool registry and recorder.

Each iteration: one model call (streamed; an answer after ``Action: final:`` streams out as it
comes), the reply parsed tolerantly, then either the final answer or one tool call whose result
goes back to the model as an ``Observation``. Whatever goes wrong becomes an observation the
model can act on; only the model endpoint failing, a cancellation or the iteration cap end the
run early.
"""

from __future__ import annotations

import difflib
import json
import re
import time
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Protocol

from agent.exceptions import AgentMaxIterations, ToolFailed, ToolInputInvalid, ToolResultInvalid
from agent.llm.base import ChatMessage, LLMProvider, LLMResponse
from agent.parser import FORMAT_REMINDER, OBSERVATION_STOP_SEQUENCES, ParsedReply, parse_reply
from agent.prompt import ToolSpec, final_answer_prompt, observation_message, system_prompt
from agent.tools.registry import ToolContext, ToolRegistry


@dataclass(frozen=True)
class LoopConfig:
    max_iterations: int = 10
    max_parse_errors: int = 3
    tool_retries: int = 2
    observation_limit: int = 8000
    repeat_warning: int = 3


@dataclass
class Iteration:
    """What one iteration did, as the recorder and the ``step`` event need it."""

    index: int
    started_at: float  # wall clock, epoch seconds (shown to people)
    started: float  # monotonic
    response: LLMResponse | None = None
    parsed: ParsedReply | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    #: The tool's structured result, or the error payload the model was shown instead.
    result: Any = None
    #: The text the model was sent (``result`` with any note, cut to the limit).
    observation: str = ""
    observation_truncated: bool = False
    error: str | None = None


class Recorder(Protocol):
    """Where the loop reports what happens, as it happens (the trace and the SSE stream)."""

    async def model_replied(self, iteration: Iteration) -> None: ...

    async def tool_started(self, iteration: Iteration) -> None: ...

    async def iteration_finished(self, iteration: Iteration) -> None: ...

    async def answer_delta(self, text: str) -> None: ...

    async def answered(self, answer: str, *, streamed: bool) -> None: ...


_FINAL_MARKER = re.compile(r"(?im)^[ \t]*(?:action[ \t]*:[ \t]*final|final[ \t]+answer)[ \t]*:")
_TOOL_MARKER = re.compile(r"(?im)^[ \t]*action[ \t]*:[ \t]*tool[ \t]*:")


async def run_react(
    *,
    task: str,
    history: Sequence[ChatMessage] = (),
    llm: LLMProvider,
    tools: ToolRegistry,
    recorder: Recorder,
    context: ToolContext,
    config: LoopConfig | None = None,
) -> str:
    """Run the loop on ``task``; returns the final answer. Raises ``AgentMaxIterations`` and
    the model's ``LLMUnavailable`` / ``LLMTimeout``; cancelling the awaiting task stops the
    model call or the tool in progress."""
    config = config or LoopConfig()
    messages: list[ChatMessage] = [
        {"role": "system", "content": system_prompt([ToolSpec(**spec) for spec in tools.specs()])},
        *history,
        {"role": "user", "content": task},
    ]
    parse_errors = 0
    recent_calls: list[str] = []
    ran = 0
    for index in range(1, config.max_iterations + 1):
        ran = index
        iteration = Iteration(index=index, started_at=time.time(), started=time.monotonic())
        response, streamed = await _call_model(llm, messages, recorder)
        iteration.response = response
        parsed = parse_reply(response.content, tool_names=tools.names())
        iteration.parsed = parsed
        await recorder.model_replied(iteration)
        messages.append({"role": "assistant", "content": response.content})
        if parsed.final is not None and parsed.action is None:
            await recorder.answered(parsed.final, streamed=streamed)
            return parsed.final
        if parsed.action is None:
            parse_errors += 1
            iteration.error = parsed.error or "The reply has no Action."
            payload: Any = {"error": iteration.error, "format": FORMAT_REMINDER}
            iteration.result = payload
            iteration.observation, iteration.observation_truncated = observation_message(
                payload, limit=config.observation_limit
            )
            await recorder.iteration_finished(iteration)
            messages.append({"role": "user", "content": iteration.observation})
            if parse_errors >= config.max_parse_errors:
                break
            continue
        parse_errors = 0
        call = parsed.action
        iteration.tool_name, iteration.tool_args = call.name, call.args
        await recorder.tool_started(iteration)
        payload = await _run_tool(tools, call.name, call.args, context, config)
        iteration.result = payload
        if isinstance(payload, dict) and set(payload) == {"error", "suggestion"}:
            iteration.error = payload["error"]
        signature = call.name + json.dumps(call.args, sort_keys=True, ensure_ascii=False)
        recent_calls = [*recent_calls[-(config.repeat_warning - 1) :], signature]
        note = None
        if len(recent_calls) == config.repeat_warning and len(set(recent_calls)) == 1:
            note = (
                f"You called {call.name} with the same arguments {config.repeat_warning} times "
                "in a row; use the results you have or try something different."
            )
        if parsed.ignored_actions:
            extra = (
                f"Only the first action ran; {parsed.ignored_actions} more action(s) in the "
                "reply were ignored. Send one action per reply."
            )
            note = f"{note} {extra}" if note else extra
        if note:
            payload = {"result": payload, "note": note}
        iteration.observation, iteration.observation_truncated = observation_message(
            payload, limit=config.observation_limit
        )
        await recorder.iteration_finished(iteration)
        messages.append({"role": "user", "content": iteration.observation})
    # Out of iterations (or of patience with the format): one "answer now" call.
    messages.append({"role": "user", "content": final_answer_prompt()})
    response, streamed = await _call_model(llm, messages, recorder)
    parsed = parse_reply(response.content, tool_names=())
    iteration = Iteration(index=ran + 1, started_at=time.time(), started=time.monotonic())
    iteration.response, iteration.parsed = response, parsed
    await recorder.model_replied(iteration)
    if parsed.final is not None and parsed.action is None:
        await recorder.answered(parsed.final, streamed=streamed)
        return parsed.final
    unreadable = parse_errors >= config.max_parse_errors
    reason = (
        f"the last {parse_errors} replies in a row were not in the ReAct format, the most the "
        "agent accepts"
        if unreadable
        else f"the limit of {config.max_iterations} iterations was reached"
    )
    raise AgentMaxIterations(
        f"No final answer after {ran} iteration{'s' if ran != 1 else ''}: {reason}.",
        details={
            "iterations": ran,
            "max_iterations": config.max_iterations,
            "stopped_by": "format_errors" if unreadable else "max_iterations",
            "max_format_errors": config.max_parse_errors,
        },
    )


async def _call_model(
    llm: LLMProvider, messages: Sequence[ChatMessage], recorder: Recorder
) -> tuple[LLMResponse, bool]:
    """Stream one model call. Text after ``Action: final:`` goes out as answer deltas while it
    arrives, unless a tool action came first. Returns (response, whether deltas went out)."""
    text = ""
    sent: int | None = None  # how much of the text went out as deltas, once the answer began
    response: LLMResponse | None = None
    # Closed on the way out, so a cancellation while a delta is recorded closes the HTTP stream.
    async with aclosing(llm.stream(messages, stop=OBSERVATION_STOP_SEQUENCES)) as stream:
        async for chunk in stream:
            if chunk.response is not None:
                response = chunk.response
                break
            text += chunk.delta
            if sent is None:
                marker = _FINAL_MARKER.search(text)
                if marker is None or _TOOL_MARKER.search(text, 0, marker.start()):
                    continue
                rest = text[marker.end() :]
                if not rest.strip():
                    continue
                sent = len(text) - len(rest.lstrip())
            if len(text) > sent:
                await recorder.answer_delta(text[sent:])
                sent = len(text)
    if response is None:
        response = LLMResponse(content=text, model=getattr(llm, "model", ""))
    return response, sent is not None


async def _run_tool(
    tools: ToolRegistry,
    name: str,
    args: dict[str, Any],
    context: ToolContext,
    config: LoopConfig,
) -> Any:
    """The tool's result, or an error payload the model can act on."""
    if name not in tools:
        close = difflib.get_close_matches(name, tools.names(), n=1)
        suggestion = close[0] if close else None
        return {
            "error": f"There is no tool named {name!r}. Valid tools: {', '.join(tools.names())}.",
            "suggestion": f"Did you mean {suggestion!r}?" if suggestion else "Use a valid tool.",
        }
    attempts = 0
    while True:
        try:
            return await tools.call(name, args, context)
        except ToolInputInvalid as exc:
            return {
                "error": f"Invalid arguments at {exc.details.get('path', '$')}: "
                f"{exc.details.get('reason', exc.message)}",
                "suggestion": "Fix the arguments to match the tool's JSON schema.",
            }
        except ToolResultInvalid as exc:
            return {"error": exc.message, "suggestion": "Try other arguments or another tool."}
        except ToolFailed as exc:
            attempts += 1
            # Domain errors (code too large, no sandbox engine) fail the same way again.
            deterministic = "code" in exc.details or "hint" in exc.details
            if deterministic or attempts > config.tool_retries:
                tried = f" after {attempts} attempts" if attempts > 1 else ""
                return {
                    "error": f"{name} failed{tried}: {exc.message}",
                    "suggestion": "Try different arguments, another tool, or answer with what "
                    "you know.",
                }

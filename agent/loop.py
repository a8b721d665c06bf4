"""The ReAct loop: pure orchestration of an injected model, tool registry and recorder.

Each iteration: one model call (streamed; a final answer streams out as it is written), the
reply read by the run's protocol (``agent.protocols``: the ReAct text protocol or native tool
calling), then either the final answer or the tool calls it asks for, each result going back to
the model. Whatever goes wrong becomes an observation the model can act on; only the model
endpoint failing, a cancellation or the caps (iterations, replies out of format in a row) end
the run early, and at a cap one last "answer now" call still gets its chance.
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Collection, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, Protocol

from agent.exceptions import (
    AgentFormatErrors,
    AgentMaxIterations,
    ToolFailed,
    ToolInputInvalid,
    ToolResultInvalid,
)
from agent.llm.base import ChatMessage, LLMProvider, LLMResponse, ToolDefinition
from agent.prompt import ToolSpec
from agent.protocols import AgentProtocol, Call, ReactProtocol, Reply
from agent.tools.registry import ToolContext, ToolRegistry

#: Above this many characters, a reply being written is re-read for its answer at most every
#: ``_REREAD_S`` (and at each flush), not at every piece: reading is linear in its length, so
#: re-reading at every piece is quadratic. Measured (text protocol, pieces of about 4
#: characters): one read of a 64 KB reply takes 1.7 ms, and reading at every piece would cost
#: about 14 s of CPU over that reply (246 s over 256 KB), on the worker that serves the run;
#: below 64 KB it stays under a second.
_REREAD_ALWAYS_CHARS = 65_536
_REREAD_S = 0.025


@dataclass(frozen=True)
class LoopConfig:
    max_iterations: int = 10
    #: Replies in a row that are neither a tool call nor an answer before the loop gives up.
    max_format_errors: int = 3
    tool_retries: int = 2
    observation_limit: int = 8000
    repeat_warning: int = 3


@dataclass
class Iteration:
    """What one iteration did, as the recorder and the ``step`` event need it. A reply that
    asks for several tool calls gives one ``Iteration`` per call, sharing ``index``,
    ``response`` and ``reply``."""

    index: int
    started_at: float  # wall clock, epoch seconds (shown to people)
    started: float  # monotonic
    response: LLMResponse | None = None
    reply: Reply | None = None
    tool_name: str | None = None
    tool_args: dict[str, Any] | None = None
    #: Native tool calling's id of the call.
    call_id: str | None = None
    #: The tool's structured result, or the error payload the model was shown instead.
    result: Any = None
    #: The text the model was sent (what the tool shows of ``result``, ``Tool.observe``,
    #: with any note, cut to the limit).
    observation: str = ""
    observation_truncated: bool = False
    error: str | None = None


class Recorder(Protocol):
    """Where the loop reports what happens, as it happens (the trace and the SSE stream)."""

    def model_calling(self, name: str, messages: Sequence[ChatMessage]) -> None:
        """The model is about to be sent ``messages``, for the step ``name``: a call that
        never returns (it fails, the run is stopped) is recorded as that step all the same."""
        ...

    async def model_replied(self, iteration: Iteration) -> None: ...

    async def tool_started(self, iteration: Iteration) -> None: ...

    async def iteration_finished(self, iteration: Iteration) -> None: ...

    async def answer_delta(self, text: str) -> None:
        """Answer text as it is written; an empty ``text`` says a flush is due: what is
        queued goes out now."""
        ...

    async def answered(self, answer: str, *, streamed: bool) -> None: ...


async def run_react(
    *,
    task: str,
    history: Sequence[ChatMessage] = (),
    llm: LLMProvider,
    tools: ToolRegistry,
    recorder: Recorder,
    context: ToolContext,
    config: LoopConfig | None = None,
    protocol: AgentProtocol | None = None,
) -> str:
    """Run the loop on ``task`` with ``protocol`` (default: the ReAct text protocol); returns
    the final answer. Raises ``AgentMaxIterations`` (out of iterations),
    ``AgentFormatErrors`` (out of readable replies) and the model's ``LLMUnavailable`` /
    ``LLMTimeout``; cancelling the awaiting task stops the model call or the tool in
    progress."""
    config = config or LoopConfig()
    if protocol is None:
        protocol = ReactProtocol()
    specs = [ToolSpec(**spec) for spec in tools.specs()]
    definitions = protocol.tool_definitions(specs)
    tool_names = tools.names()
    messages: list[ChatMessage] = [
        {"role": "system", "content": protocol.system_prompt(specs)},
        *history,
        {"role": "user", "content": task},
    ]
    format_errors = 0
    recent_calls: list[str] = []
    ran = 0
    for index in range(1, config.max_iterations + 1):
        ran = index
        iteration = Iteration(index=index, started_at=time.time(), started=time.monotonic())
        recorder.model_calling(f"iteration {index}", messages)
        response, streamed = await _call_model(
            llm, messages, recorder, protocol, definitions, tool_names
        )
        reply = protocol.read(response, tool_names=tool_names)
        iteration.response, iteration.reply = response, reply
        await recorder.model_replied(iteration)
        messages.append(protocol.assistant_message(response))
        if reply.final is not None:
            await _answer(recorder, reply.final, streamed)
            return reply.final
        if not reply.calls:
            format_errors += 1
            iteration.error = reply.error or "The reply has no Action."
            payload: Any = {"error": iteration.error, "format": protocol.format_hint}
            iteration.result = payload
            iteration.observation, iteration.observation_truncated = protocol.observation_text(
                payload, limit=config.observation_limit
            )
            await recorder.iteration_finished(iteration)
            messages.append(protocol.correction(iteration.observation))
            if format_errors >= config.max_format_errors:
                break
            continue
        format_errors = 0
        for position, call in enumerate(reply.calls):
            step = replace(
                iteration, tool_name=call.name, tool_args=call.args, call_id=call.call_id
            )
            await recorder.tool_started(step)
            payload = await _result_of(tools, call, context, config)
            shown = payload
            if isinstance(payload, dict) and set(payload) == {"error", "suggestion"}:
                step.error = payload["error"]
            else:
                shown = tools.observed(call.name, payload)
            signature = call.name + (call.raw if call.args is None else _canonical(call.args))
            recent_calls = [*recent_calls[-(config.repeat_warning - 1) :], signature]
            notes = []
            if len(recent_calls) == config.repeat_warning and len(set(recent_calls)) == 1:
                notes.append(
                    f"You called {call.name} with the same arguments {config.repeat_warning} "
                    "times in a row; use the results you have or try something different."
                )
            if reply.ignored_calls and position == len(reply.calls) - 1:
                notes.append(
                    f"Only the first action ran; {reply.ignored_calls} more action(s) in the "
                    "reply were ignored. Send one action per reply."
                )
            step.result = payload
            if notes:
                shown = {"result": shown, "note": " ".join(notes)}
            step.observation, step.observation_truncated = protocol.observation_text(
                shown, limit=config.observation_limit
            )
            await recorder.iteration_finished(step)
            messages.append(protocol.result_message(call, step.observation))
    # Out of iterations (or of patience with the format): one "answer now" call.
    messages.append(protocol.answer_now())
    iteration = Iteration(index=ran + 1, started_at=time.time(), started=time.monotonic())
    recorder.model_calling(f"iteration {ran + 1}", messages)
    response, streamed = await _call_model(llm, messages, recorder, protocol, definitions, ())
    reply = protocol.read(response, tool_names=())
    iteration.response, iteration.reply = response, reply
    await recorder.model_replied(iteration)
    if reply.final is not None:
        await _answer(recorder, reply.final, streamed)
        return reply.final
    details = {
        "iterations": ran,
        "max_iterations": config.max_iterations,
        "max_format_errors": config.max_format_errors,
    }
    runs = f"{ran} iteration{'s' if ran != 1 else ''}"
    if format_errors >= config.max_format_errors:
        raise AgentFormatErrors(
            f"No final answer after {runs}: the last {format_errors} replies in a row were "
            f"neither a tool call nor an answer ({config.max_format_errors} is the most the "
            "agent accepts), and neither was the reply to the last request for an answer.",
            details={**details, "stopped_by": "format_errors", "format_errors": format_errors},
        )
    raise AgentMaxIterations(
        f"No final answer after {runs}: the limit of {config.max_iterations} iterations was "
        "reached, and the reply to the last request for an answer was none.",
        details={**details, "stopped_by": "max_iterations"},
    )


def _canonical(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True, ensure_ascii=False, default=str)


async def _answer(recorder: Recorder, final: str, streamed: str) -> None:
    """Send what of ``final`` has not gone out yet (``streamed`` did), then the answer."""
    if streamed and final.startswith(streamed):
        rest = final[len(streamed) :]
        if rest:
            await recorder.answer_delta(rest)
        await recorder.answered(final, streamed=True)
    else:
        await recorder.answered(final, streamed=False)


async def _call_model(
    llm: LLMProvider,
    messages: Sequence[ChatMessage],
    recorder: Recorder,
    protocol: AgentProtocol,
    definitions: Sequence[ToolDefinition] | None,
    tool_names: Collection[str],
) -> tuple[LLMResponse, str]:
    """Stream one model call. The reply's answer goes out as deltas while it is written, as
    far as ``protocol.answer_so_far`` says it is certain (never text the reply will turn out
    not to be: a tool call, a reply out of format); a flush chunk sends on what is
    queued. Returns (response, the answer text that went out)."""
    text = ""
    sent = ""
    calling_tools = False
    reread = 0.0
    response: LLMResponse | None = None
    # Closed on the way out, so a cancellation while a delta is recorded closes the HTTP stream.
    stream = llm.stream(messages, stop=protocol.stop or None, tools=definitions)
    async with aclosing(stream) as chunks:
        async for chunk in chunks:
            if chunk.response is not None:
                response = chunk.response
                break
            calling_tools = calling_tools or chunk.calling_tools
            text += chunk.delta
            flush = not chunk.delta
            if calling_tools:
                continue
            if flush or len(text) <= _REREAD_ALWAYS_CHARS or time.monotonic() >= reread:
                reread = time.monotonic() + _REREAD_S
                answer = protocol.answer_so_far(text, tool_names=tool_names) or ""
                if len(answer) > len(sent) and answer.startswith(sent):
                    await recorder.answer_delta(answer[len(sent) :])
                    sent = answer
            if flush and sent:
                await recorder.answer_delta("")
    if response is None:
        response = LLMResponse(content=text, model=getattr(llm, "model", ""))
    return response, sent


async def _result_of(
    tools: ToolRegistry, call: Call, context: ToolContext, config: LoopConfig
) -> Any:
    """The tool's result, or an error payload (``{"error", "suggestion"}``) the model can act
    on."""
    name = call.name
    if name not in tools:
        close = difflib.get_close_matches(name, tools.names(), n=1)
        suggestion = close[0] if close else None
        return {
            "error": f"There is no tool named {name!r}. Valid tools: {', '.join(tools.names())}.",
            "suggestion": f"Did you mean {suggestion!r}?" if suggestion else "Use a valid tool.",
        }
    if call.args is None:
        return {
            "error": call.error or "The arguments could not be read.",
            "suggestion": "Send the arguments as one JSON object matching the tool's schema.",
        }
    attempts = 0
    while True:
        try:
            return await tools.call(name, call.args, context)
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

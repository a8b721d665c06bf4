"""The two ways the agent and the model talk (``AGENT_PROTOCOL``, docs/react-protocol.md).

- ``react`` (the default): the ReAct text protocol. The tools are described in the system
  prompt; the model replies ``Thought: … / Action: tool:<name> / args: {…}`` or
  ``Action: final: <answer>``, parsed tolerantly by ``agent.parser``; a tool's result comes
  back as a user message ``Observation: <JSON>``. Works with any model that follows
  instructions, including servers with no function calling.
- ``tools``: native tool calling. The tools go as the request's OpenAI ``tools``; the model
  answers with ``tool_calls`` (several in one reply run in order), each answered by a
  ``role: tool`` message carrying its ``tool_call_id``; a reply without tool calls is the
  final answer. For models trained for function calling (GPT-4o, Qwen, Llama 3, Mistral...).

Both give the loop the same ``Reply`` and the same steps, events and trace shapes. Pure
functions over plain data: nothing here calls a model or a tool.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar, Protocol

from django.conf import settings

from agent.llm.base import ChatMessage, LLMResponse, ToolDefinition
from agent.parser import (
    FORMAT_REMINDER,
    OBSERVATION_STOP_SEQUENCES,
    parse_reply,
    streamable_answer,
)
from agent.prompt import (
    ToolSpec,
    final_answer_prompt,
    observation_json,
    observation_message,
    system_prompt,
    tools_final_answer_prompt,
    tools_system_prompt,
)


@dataclass(frozen=True)
class Call:
    """One tool call of a reply. ``args`` is None when the arguments could not be read, and
    ``error`` then says why (sent back to the model as the call's result); ``raw`` is the call
    as the model wrote it; ``call_id`` is native tool calling's id (None in ``react``)."""

    name: str
    args: dict[str, Any] | None
    raw: str
    call_id: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class Reply:
    """What one model reply asks for: tool ``calls`` (run in order), a ``final`` answer, or,
    when it is neither, the format ``error`` to send back. ``ignored_calls`` counts the
    actions of a ``react`` reply after the one that runs."""

    thought: str
    calls: tuple[Call, ...] = ()
    final: str | None = None
    error: str | None = None
    ignored_calls: int = 0


class AgentProtocol(Protocol):
    """How the loop talks to the model: the prompt, the request's tools and stop sequences,
    how a reply is read, and the messages that carry results and corrections back."""

    name: str
    #: Sent as ``stop`` on every model call.
    stop: tuple[str, ...]
    #: What a reply that is neither a call nor an answer is reminded of.
    format_hint: str

    def system_prompt(self, tools: Sequence[ToolSpec]) -> str: ...

    def tool_definitions(self, tools: Sequence[ToolSpec]) -> list[ToolDefinition] | None: ...

    def read(self, response: LLMResponse, *, tool_names: Collection[str]) -> Reply: ...

    def answer_so_far(self, text: str, *, tool_names: Collection[str]) -> str | None:
        """The final answer in ``text`` (a reply still being written) as far as it is
        certain, or None: what may stream. Each value is a prefix of the next and of the
        ``final`` that ``read`` finds in the whole reply."""
        ...

    def assistant_message(self, response: LLMResponse) -> ChatMessage: ...

    def result_message(self, call: Call, result: str) -> ChatMessage:
        """The message carrying ``result`` (``observation_text``'s) back for ``call``."""
        ...

    def observation_text(self, payload: Any, *, limit: int) -> tuple[str, bool]:
        """The text the model is sent for a tool's result or an error (at most about
        ``limit`` characters), and whether it was cut."""
        ...

    def correction(self, observation: str) -> ChatMessage:
        """The message sending back why a reply could not be used."""
        ...

    def answer_now(self) -> ChatMessage:
        """The last request of a run that is out of iterations."""
        ...


class ReactProtocol:
    """The ReAct text protocol (``agent.parser``, ``agent.prompt``)."""

    name: str = "react"
    stop: tuple[str, ...] = OBSERVATION_STOP_SEQUENCES
    format_hint: str = FORMAT_REMINDER

    def system_prompt(self, tools: Sequence[ToolSpec]) -> str:
        return system_prompt(tools)

    def tool_definitions(self, tools: Sequence[ToolSpec]) -> list[ToolDefinition] | None:
        return None

    def read(self, response: LLMResponse, *, tool_names: Collection[str]) -> Reply:
        parsed = parse_reply(response.content, tool_names=tool_names)
        if parsed.action is None:
            return Reply(
                thought=parsed.thought,
                final=parsed.final,
                error=None if parsed.final is not None else parsed.error,
                ignored_calls=parsed.ignored_actions,
            )
        call = Call(name=parsed.action.name, args=parsed.action.args, raw=parsed.action.raw)
        return Reply(thought=parsed.thought, calls=(call,), ignored_calls=parsed.ignored_actions)

    def answer_so_far(self, text: str, *, tool_names: Collection[str]) -> str | None:
        return streamable_answer(text, tool_names=tool_names)

    def assistant_message(self, response: LLMResponse) -> ChatMessage:
        return {"role": "assistant", "content": response.content}

    def result_message(self, call: Call, result: str) -> ChatMessage:
        return {"role": "user", "content": result}

    def observation_text(self, payload: Any, *, limit: int) -> tuple[str, bool]:
        return observation_message(payload, limit=limit)

    def correction(self, observation: str) -> ChatMessage:
        return {"role": "user", "content": observation}

    def answer_now(self) -> ChatMessage:
        return {"role": "user", "content": final_answer_prompt()}


#: Native tool calling: how much of a reply's first paragraph is held back before it streams.
ANSWER_LEAD_CHARS = 200


class ToolsProtocol:
    """Native tool calling (OpenAI ``tools`` / ``tool_calls``)."""

    name: str = "tools"
    stop: tuple[str, ...] = ()
    format_hint: str = "Answer the user in plain text, or call one of the tools."
    #: Arguments longer than this are not echoed back in an error.
    _ECHO_LIMIT: ClassVar[int] = 200

    def system_prompt(self, tools: Sequence[ToolSpec]) -> str:
        return tools_system_prompt(tools)

    def tool_definitions(self, tools: Sequence[ToolSpec]) -> list[ToolDefinition] | None:
        return [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": dict(tool.parameters),
                },
            }
            for tool in tools
        ] or None

    def read(self, response: LLMResponse, *, tool_names: Collection[str]) -> Reply:
        text = response.content.strip()
        if response.tool_calls:
            calls = tuple(
                self._call(request.id, request.name, request.arguments)
                for request in response.tool_calls
            )
            return Reply(thought=text, calls=calls)
        if not text:
            return Reply(thought="", error="The reply is empty: it has no text and no tool call.")
        return Reply(thought="", final=text)

    def _call(self, call_id: str, name: str, arguments: str) -> Call:
        """One requested call, its arguments decoded (an empty text is ``{}``)."""
        if not arguments.strip():
            return Call(name=name, args={}, raw=arguments, call_id=call_id)
        try:
            args = json.loads(arguments)
        except ValueError as exc:
            shown = arguments if len(arguments) <= self._ECHO_LIMIT else "…" + arguments[-80:]
            error = (
                f"The arguments of {name} are not valid JSON ({exc}): `{shown}`. Send one "
                "JSON object matching the tool's parameters."
            )
            return Call(name=name, args=None, raw=arguments, call_id=call_id, error=error)
        if not isinstance(args, dict):
            error = f"The arguments of {name} must be one JSON object, not {type(args).__name__}."
            return Call(name=name, args=None, raw=arguments, call_id=call_id, error=error)
        return Call(name=name, args=args, raw=arguments, call_id=call_id)

    def answer_so_far(self, text: str, *, tool_names: Collection[str]) -> str | None:
        """Only the end of the reply tells whether tool calls follow its text, and models
        often write a sentence before calling a tool ("Let me check the docs."). So the text
        streams once it is more than such a sentence: past its first paragraph or
        ``ANSWER_LEAD_CHARS``. The provider stops the stream's text at the first tool call
        (``LLMChunk.calling_tools``); a longer text before one stays its call's thought."""
        answer = text.strip()
        if "\n\n" not in answer and len(answer) <= ANSWER_LEAD_CHARS:
            return None
        # Trailing space may still be followed by more text: it goes out with that text.
        return answer

    def assistant_message(self, response: LLMResponse) -> ChatMessage:
        message: ChatMessage = {"role": "assistant", "content": response.content}
        if response.tool_calls:
            message["tool_calls"] = [call.as_message() for call in response.tool_calls]
        return message

    def result_message(self, call: Call, result: str) -> ChatMessage:
        return {"role": "tool", "tool_call_id": call.call_id or "", "content": result}

    def observation_text(self, payload: Any, *, limit: int) -> tuple[str, bool]:
        return observation_json(payload, limit=limit)

    def correction(self, observation: str) -> ChatMessage:
        return {"role": "user", "content": observation}

    def answer_now(self) -> ChatMessage:
        return {"role": "user", "content": tools_final_answer_prompt()}


#: The protocols by the name ``AGENT_PROTOCOL`` takes.
PROTOCOLS: dict[str, type[ReactProtocol] | type[ToolsProtocol]] = {
    ReactProtocol.name: ReactProtocol,
    ToolsProtocol.name: ToolsProtocol,
}


@lru_cache(maxsize=4)
def protocol_named(name: str) -> AgentProtocol:
    """The protocol called ``name`` (``react`` or ``tools``). Raises ``ValueError`` for any
    other name."""
    try:
        return PROTOCOLS[name]()
    except KeyError:
        raise ValueError(
            f"Unknown agent protocol {name!r}; choose one of {', '.join(PROTOCOLS)}."
        ) from None


def configured_protocol() -> AgentProtocol:
    """The protocol ``settings.AGENT_PROTOCOL`` names."""
    return protocol_named(settings.AGENT_PROTOCOL)

"""A model call's messages as agents record them (OpenAI's, the GenAI conventions',
OpenLLMetry's, OpenInference's, the Vercel AI SDK's and LangChain's shapes): objects with a
string ``role`` whose text is a string ``content``, or parts of type ``text`` in ``content``,
``parts`` or ``contents``; LangChain's own serialisations of messages count as messages too.
What the trace page shows of a conversation (``conversation``), and what a trace recorded over
OTLP is named after (``asked_in``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Where a kind of part keeps what it says: (the keys of a tool's name, or of an answer; the
#: keys of the arguments, or of the call's id).
_Spec = tuple[Any, Any]

#: The keys of a message that hold its text, in the shapes the conventions give it: a string
#: (``content``), or a list of parts whose text ones are ``{"type": "text", "text" | "content"}``
#: (the GenAI conventions' ``parts``, the Vercel AI SDK's and Anthropic's ``content``), each
#: under ``message_content`` in OpenInference's ``contents`` (LlamaIndex's messages).
MESSAGE_BODIES = ("content", "parts", "contents")


def conversation(value: Any) -> list[dict[str, Any]] | None:
    """``value`` as a list of messages with a ``role`` when it is a conversation: a non-empty
    list of messages (objects with a string ``role``, or LangChain's serialisations, read as
    such), or a list of one such list (the batch of one prompt LangChain records); None for
    anything else."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    if not isinstance(value, list) or not value:
        return None
    messages = [_as_message(item) for item in value]
    found = [message for message in messages if message is not None]
    return found if len(found) == len(messages) else None


#: Where a model's response holds its answers, each with why it ended: OpenAI's chat
#: completion (``choices``, each's ``message``), Google's Gemini response (``candidates``, each's
#: ``content``).
_RESPONSE_ANSWERS = (("choices", "message"), ("candidates", "content"))


def answered_in(value: Any) -> tuple[str, list[dict[str, Any]]] | None:
    """(the key, the messages) of the answers a model's whole response holds, as
    instrumentations record one (``_RESPONSE_ANSWERS``; Google ADK's ``LlmResponse``, whose one
    answer is its ``content``), each message with its ``finish_reason``; None for anything
    else."""
    if not isinstance(value, dict):
        return None
    for key, inner in _RESPONSE_ANSWERS:
        if isinstance(value.get(key), list) and value[key]:
            found = _answers(value[key], inner)
            return (key, found) if found is not None else None
    if isinstance(value.get("content"), dict):
        found = _answers([value], "content")
        return ("content", found) if found is not None else None
    return None


def _answers(items: list[Any], inner: str) -> list[dict[str, Any]] | None:
    """The message under ``inner`` of each of ``items`` (a response's choices), with its
    ``finish_reason``; None when one is not a message."""
    found = []
    for item in items:
        message = item.get(inner) if isinstance(item, dict) else None
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return None
        reason = item.get("finish_reason")
        found.append({**message, "finish_reason": reason} if reason else message)
    return found


def split_message(message: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the text of ``message``, its parts joined by blank lines; what else it holds besides
    its role: tool calls, parts that are not text)."""
    texts: list[str] = []
    rest = {key: item for key, item in message.items() if key not in ("role", *MESSAGE_BODIES)}
    for key in MESSAGE_BODIES:
        body = message.get(key)
        if isinstance(body, str):
            texts.append(body)
            continue
        for part in body if isinstance(body, list) else [] if body is None else [body]:
            if isinstance(part, dict) and isinstance(part.get("message_content"), dict):
                part = part["message_content"]
            text = part.get("text", part.get("content")) if isinstance(part, dict) else None
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(text, str):
                texts.append(text)
            elif (keyed := _keyed(part)) is not None and keyed[0] == "text":
                texts.append(keyed[1])
            else:
                rest.setdefault(key, []).append(part)
    return "\n\n".join(texts), rest


#: The parts of a message that call a tool, by their ``type``: the keys of the tool's name
#: and of its arguments (the GenAI conventions' ``tool_call``, which LangChain's tool calls
#: are typed too, the Vercel AI SDK's ``tool-call``, Anthropic's ``tool_use``).
CALL_PARTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tool_call": ("name", ("arguments", "args")),
    "tool-call": ("toolName", ("input", "args")),
    "tool_use": ("name", ("input",)),
}
#: The parts of a message that answer a tool call, by their ``type``: the keys of the answer
#: and of the call's id (the GenAI conventions' ``tool_call_response``, whose answer Pydantic
#: AI calls ``result``, the Vercel AI SDK's ``tool-result``, Anthropic's ``tool_result``).
ANSWER_PARTS: dict[str, tuple[tuple[str, ...], str]] = {
    "tool_call_response": (("response", "result"), "id"),
    "tool-result": (("output", "result"), "toolCallId"),
    "tool_result": (("content",), "tool_use_id"),
}


#: Parts told by their one key instead of a ``type`` (Amazon Bedrock's Converse blocks, as
#: Strands Agents records them; Google's ``Part``, as Google's ADK does, its other fields
#: null; Haystack's ``ChatMessage`` content): the text, the calls of a tool (the keys of the
#: tool's name and of its arguments) and the answers to one (the keys of the answer and of the
#: call's id).
KEYED_CALLS: dict[str, tuple[str, tuple[str, ...]]] = {
    "toolUse": ("name", ("input",)),
    "function_call": ("name", ("args",)),
    "functionCall": ("name", ("args",)),
    "tool_call": ("tool_name", ("arguments",)),
}
KEYED_ANSWERS: dict[str, tuple[tuple[str, ...], str]] = {
    "toolResult": (("content",), "toolUseId"),
    "function_response": (("response",), "id"),
    "functionResponse": (("response",), "id"),
    "tool_call_result": (("result",), "id"),
}


def _keyed(part: Any) -> tuple[str, Any] | None:
    """(the key, its value) of a part told by its one key (``KEYED_CALLS``,
    ``KEYED_ANSWERS``, a ``text``): a part without a ``type`` whose other fields are null;
    None for any other."""
    if not isinstance(part, dict) or "type" in part:
        return None
    given = [(key, value) for key, value in part.items() if value is not None]
    if len(given) != 1:
        return None
    key, value = given[0]
    if key == "text":
        return (key, value) if isinstance(value, str) else None
    return (key, value) if key in KEYED_CALLS or key in KEYED_ANSWERS else None


def tool_call(call: Any) -> tuple[str, Any] | None:
    """(the tool's name, the arguments) of an item of a message's ``tool_calls``: OpenAI's
    (``function`` with its ``name`` and ``arguments``), LangChain's (``name`` and ``args``),
    or a part of ``CALL_PARTS``; None for anything else."""
    if not isinstance(call, dict):
        return None
    if call.get("type") in CALL_PARTS:
        return part_call(call)
    called = call.get("function", call)
    if not isinstance(called, dict) or not isinstance(name := called.get("name"), str):
        return None
    return name, called.get("arguments", called.get("args", ""))


def part_call(part: Any) -> tuple[str, Any] | None:
    """(the tool's name, the arguments) of a part of a message that calls a tool
    (``CALL_PARTS``, ``KEYED_CALLS``); None for any other part."""
    found = _part_fields(part, CALL_PARTS, KEYED_CALLS)
    if found is None:
        return None
    fields, (name_key, argument_keys) = found
    if not isinstance(name := fields.get(name_key), str):
        return None
    return name, next((fields[key] for key in argument_keys if key in fields), "")


def part_answer(part: Any) -> tuple[Any, str] | None:
    """(the answer, the id of the call it answers or "") of a part of a message that answers
    a tool call (``ANSWER_PARTS``, ``KEYED_ANSWERS``); None for any other part."""
    found = _part_fields(part, ANSWER_PARTS, KEYED_ANSWERS)
    if found is None:
        return None
    fields, (answer_keys, id_key) = found
    answer = next((fields[key] for key in answer_keys if key in fields), None)
    call_id = fields.get(id_key)
    return answer, call_id if isinstance(call_id, str) else ""


def _part_fields(
    part: Any, typed: Mapping[str, _Spec], keyed: Mapping[str, _Spec]
) -> tuple[dict[str, Any], _Spec] | None:
    """The fields of ``part`` and where its kind keeps what it says, for a part of a kind
    that ``typed`` names by its ``type`` or ``keyed`` by its one key (whose value holds the
    fields); None for any other part."""
    found = _keyed(part)
    if found is not None and found[0] in keyed:
        fields, spec = found[1], keyed[found[0]]
    elif isinstance(part, dict) and isinstance(kind := part.get("type"), str) and kind in typed:
        fields, spec = part, typed[kind]
    else:
        return None
    return (fields, spec) if isinstance(fields, dict) else None


def last_user_text(value: Any) -> str:
    """The text of the last user message that has one in ``value``, a conversation
    (``conversation``; "" for anything else): what a model call was asked."""
    for message in reversed(conversation(value) or []):
        if message["role"] == "user" and (text := split_message(message)[0].strip()):
            return text
    return ""


#: LangChain's message types, by the role they are (their ``…Chunk`` types alike).
_LANGCHAIN_ROLES = {
    "human": "user",
    "HumanMessage": "user",
    "ai": "assistant",
    "AIMessage": "assistant",
    "system": "system",
    "SystemMessage": "system",
    "tool": "tool",
    "ToolMessage": "tool",
    # Not "function": OpenAI's tools are {"type": "function", ...}.
    "FunctionMessage": "function",
}
#: LangChain's types of a message that carries its own role.
_LANGCHAIN_OWN_ROLE = ("chat", "ChatMessage")
#: What a LangChain message holds besides its text that a reader of the conversation wants:
#: the tools it calls, the call a tool's answer is to, and the tool's (or speaker's) name.
_LANGCHAIN_KEPT = ("tool_calls", "tool_call_id", "name")


def _as_message(item: Any) -> dict[str, Any] | None:
    """``item`` as a message with a ``role``: itself when it has one, LangChain's
    ``{"type", "data"}`` and ``{"lc", "id", "kwargs"}`` shapes as one (its content, and what of
    ``_LANGCHAIN_KEPT`` it has; a ``ChatMessage`` with its own role); None for anything else."""
    if not isinstance(item, dict):
        return None
    if isinstance(item.get("role"), str):
        return item
    kind, fields = item.get("type"), item.get("data")
    if item.get("lc") is not None and isinstance(item.get("id"), list) and item["id"]:
        kind, fields = item["id"][-1], item.get("kwargs")
    if not isinstance(kind, str):
        return None
    kind = kind.removesuffix("Chunk")
    body = fields if isinstance(fields, dict) else item
    role = body.get("role") if kind in _LANGCHAIN_OWN_ROLE else _LANGCHAIN_ROLES.get(kind)
    if not isinstance(role, str):
        return None
    message = {"role": role, "content": body.get("content")}
    message |= {key: body[key] for key in _LANGCHAIN_KEPT if body.get(key)}
    return message


#: The keys under which agents' structured inputs hold what they were asked (smolagents' and
#: AutoGen's ``task``, DSPy's ``question``, Haystack's ``query``, the OpenAI Responses API's
#: ``input``), looked for from the top down (``asked_in``).
QUESTION_KEYS = ("task", "question", "query", "input", "prompt", "user_input")

#: What an instrumentation records in place of a message it was told to keep out: Google
#: ADK's, whose records carry it as every message's content unless
#: ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT`` is on (its default). Nothing asked.
WITHHELD_CONTENT = frozenset({"<elided>"})

#: How far ``asked_in`` looks into a structured input: levels, and objects and lists in all.
_SEARCH_DEPTH = 4
_SEARCH_NODES = 200


def asked_in(value: Any) -> str:
    """What ``value``, an agent's or a model call's recorded input, asks, in the shapes the
    instrumentations record it; "" when it is none of them. The objects and lists of
    ``value`` are looked at level by level from the top (at most ``_SEARCH_DEPTH`` levels and
    ``_SEARCH_NODES`` of them), and the first that asks something gives it:

    - a list of messages: the last user message's text (``last_user_text``);
    - an object with ``messages`` (a chat request, the Vercel AI SDK's prompt, a LangGraph
      state): the same of them;
    - an object with a non-empty string under one of ``QUESTION_KEYS``: that string;
    - OpenLLMetry's ``{"args": [...], "kwargs": {...}}`` of a call with one argument, a
      string: that string.

    A text that stands for content kept out (``WITHHELD_CONTENT``) asks nothing."""
    level = [value]
    seen = 0
    for _ in range(_SEARCH_DEPTH):
        below: list[Any] = []
        for node in level:
            seen += 1
            if seen > _SEARCH_NODES:
                return ""
            if (text := _asks(node)) and text not in WITHHELD_CONTENT:
                return text
            if isinstance(node, dict):
                below += [item for item in node.values() if isinstance(item, dict | list)]
            elif isinstance(node, list):
                below += [item for item in node if isinstance(item, dict | list)]
        level = below
    return ""


def _asks(node: Any) -> str:
    """What ``node`` itself asks (``asked_in``'s shapes), without looking below it."""
    if isinstance(node, list):
        return last_user_text(node)
    if not isinstance(node, dict):
        return ""
    if text := last_user_text(node.get("messages")):
        return text
    for key in QUESTION_KEYS:
        given = node.get(key)
        if isinstance(given, str) and given.strip():
            return given.strip()
    args, kwargs = node.get("args"), node.get("kwargs")
    if set(node) == {"args", "kwargs"} and isinstance(args, list) and isinstance(kwargs, dict):
        given = [*args, *kwargs.values()]
        if len(given) == 1 and isinstance(given[0], str):
            return given[0].strip()
    return ""

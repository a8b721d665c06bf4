"""A model call's messages as agents record them (OpenAI's, the GenAI conventions',
OpenLLMetry's and the Vercel AI SDK's shapes): objects with a string ``role`` whose text is
a string ``content``, or parts of type ``text`` in ``content`` or ``parts``. What the trace
page shows of a conversation, and what a trace recorded over OTLP is named after
(``asked_in``)."""

from __future__ import annotations

from typing import Any

#: The keys of a message that hold its text, in the shapes the conventions give it: a string
#: (``content``), or a list of parts whose text ones are ``{"type": "text", "text" | "content"}``
#: (the GenAI conventions' ``parts``, the Vercel AI SDK's and Anthropic's ``content``).
MESSAGE_BODIES = ("content", "parts")


def is_conversation(value: Any) -> bool:
    """Whether ``value`` is a list of messages: a non-empty list of objects that each have a
    string ``role``."""
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(item, dict) and isinstance(item.get("role"), str) for item in value)
    )


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
            text = part.get("text", part.get("content")) if isinstance(part, dict) else None
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(text, str):
                texts.append(text)
            else:
                rest.setdefault(key, []).append(part)
    return "\n\n".join(texts), rest


def last_user_text(value: Any) -> str:
    """The text of the last user message that has one in ``value``, a list of messages ("" for
    anything else): what a model call was asked."""
    if not is_conversation(value):
        return ""
    for message in reversed(value):
        if message["role"] == "user" and (text := split_message(message)[0].strip()):
            return text
    return ""


def asked_in(value: Any) -> str:
    """What ``value``, an agent's or a model call's recorded input, asks, in the shapes the
    instrumentations record it; "" when it is none of them:

    - a list of messages: the last user message's text (``last_user_text``);
    - an object with ``messages`` (a chat request, the Vercel AI SDK's prompt): the same of
      them, else its ``prompt`` text (the AI SDK's);
    - OpenLLMetry's ``{"args": [...], "kwargs": {...}}`` of a call with one argument, a
      string: that string."""
    if isinstance(value, list):
        return last_user_text(value)
    if not isinstance(value, dict):
        return ""
    if text := last_user_text(value.get("messages")):
        return text
    prompt = value.get("prompt")
    if isinstance(prompt, str) and prompt.strip():
        return prompt.strip()
    args, kwargs = value.get("args"), value.get("kwargs")
    if set(value) == {"args", "kwargs"} and isinstance(args, list) and isinstance(kwargs, dict):
        given = [*args, *kwargs.values()]
        if len(given) == 1 and isinstance(given[0], str):
            return given[0].strip()
    return ""

"""Parse a model's ReAct reply into a thought and exactly one thing to do.

The protocol (``docs/react-protocol.md``)::

    Thought: <reasoning>
    Action: tool:<name>
    args: <one JSON object>

or::

    Thought: <reasoning>
    Action: final: <answer>

``parse_reply`` tolerates the ways real models bend this format (keyword case and spacing,
arguments on the action line, over several lines or in a code fence, trailing commas, single
quotes, Python literals, arguments encoded twice, a hallucinated ``Observation:``), but it
never guesses: arguments it cannot read give an ``error`` meant to be sent back to the model,
never ``{}``. Only the model's own reply is parsed here, never tool output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

#: What a tool name looks like; ``system_prompt`` rejects tools whose names do not match.
TOOL_NAME_PATTERN: Final = r"[A-Za-z_][A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]+)*"

#: One line the loop appends to every parse error it sends back to the model.
FORMAT_REMINDER: Final = (
    'Reply with "Thought: <reasoning>" and then exactly one action: either '
    '"Action: tool:<name>" followed by a line "args: <one JSON object>", or '
    '"Action: final: <answer>". Never write Observation lines yourself.'
)

#: Sent as ``stop`` on every model call (OpenAI accepts at most four), so a model that goes on
#: to invent a tool result is cut off; ``parse_reply`` cuts the variants these miss.
OBSERVATION_STOP_SEQUENCES: Final = (
    "\nObservation:",
    "\nobservation:",
    "\nOBSERVATION:",
    "\nObservation :",
)


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model wrote it. ``raw`` runs from ``Action`` to the end of the args."""

    name: str
    args: dict[str, Any]
    raw: str


@dataclass(frozen=True)
class ParsedReply:
    """One parsed reply. Exactly one of ``action``, ``final`` and ``error`` is set.

    ``error`` is a short message for the model (the loop appends ``FORMAT_REMINDER``).
    ``ignored_actions`` counts the actions after the one chosen; ``truncated_at_observation``
    is true when a hallucinated ``Observation:`` line and everything after it was cut.
    ``raw`` is the reply exactly as received.
    """

    thought: str
    action: ToolCall | None
    final: str | None
    error: str | None
    ignored_actions: int
    truncated_at_observation: bool
    raw: str


_OBSERVATION_RE = re.compile(r"^[ \t]*observation[ \t]*:", re.IGNORECASE | re.MULTILINE)
_THOUGHT_RE = re.compile(r"[ \t]*thought[ \t]*:[ \t]*", re.IGNORECASE)
_ACTION_RE = re.compile(r"[ \t]*action[ \t]*:[ \t]*", re.IGNORECASE)
_FINAL_ANSWER_RE = re.compile(r"[ \t]*final[ \t_]*answer[ \t]*:[ \t]*", re.IGNORECASE)
_ARGS_RE = re.compile(r"[ \t]*(?:args|arguments|action[ \t_]*input)[ \t]*:[ \t]*", re.IGNORECASE)
_FINAL_VALUE_RE = re.compile(r"final(?:[ \t_]*answer)?\b[ \t]*:?[ \t]*", re.IGNORECASE)
_TOOL_PREFIX_RE = re.compile(r"tool[ \t]*:[ \t]*", re.IGNORECASE)
_TOOL_NAME_RE = re.compile(TOOL_NAME_PATTERN)
_FENCE_OPEN_RE = re.compile(r"```[ \t]*[\w+\-.]*")
_FENCE_CLOSE_RE = re.compile(r"[ \t]*\n?[ \t]*```")
_JSON_STRING_RE = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_INLINE_ACTION_RE = re.compile(r"action[ \t]*:[ \t]*(?:tool|final)\b", re.IGNORECASE)
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}

_ARGS_HINT = "args must be one JSON object"
_NOT_CLOSED = (
    "args is not valid JSON: the object is never closed (a '}' or a closing quote is missing); "
    f"{_ARGS_HINT}."
)


_Kind = Literal["thought", "action", "final_answer"]
_KEYWORDS: Final[tuple[tuple[_Kind, re.Pattern[str]], ...]] = (
    ("thought", _THOUGHT_RE),
    ("action", _ACTION_RE),
    ("final_answer", _FINAL_ANSWER_RE),
)


@dataclass(frozen=True)
class _Mark:
    """A keyword line outside code fences. Offsets index the normalised reply."""

    kind: _Kind
    line: int
    start: int
    value: int
    value_line: int


class _NonFiniteError(ValueError):
    pass


def parse_reply(text: str, *, tool_names: Collection[str] = ()) -> ParsedReply:
    """Parse one model reply; never raises.

    ``tool_names`` only enables the bare form ``Action: <name>`` for those names; names after
    ``tool:`` are not checked here (the loop reports unknown tools).
    """
    body = text.replace("\r\n", "\n").replace("\r", "\n")
    cut = _OBSERVATION_RE.search(body)
    if cut is not None:
        body = body[: cut.start()]
    truncated = cut is not None

    def reply(
        thought: str = "",
        *,
        action: ToolCall | None = None,
        final: str | None = None,
        error: str | None = None,
        ignored: int = 0,
    ) -> ParsedReply:
        return ParsedReply(
            thought=thought,
            action=action,
            final=final,
            error=error,
            ignored_actions=ignored,
            truncated_at_observation=truncated,
            raw=text,
        )

    if not body.strip():
        if truncated:
            return reply(
                error="The reply starts with an Observation line; observations come from "
                "tools only, never write them yourself."
            )
        return reply(error="The reply is empty.")

    lines = body.split("\n")
    starts = _line_starts(lines)
    marks = _scan(body, lines, starts)
    actions = [mark for mark in marks if mark.kind != "thought"]
    if not actions:
        thought = _thought(body, lines, marks, end_line=len(lines))
        if _INLINE_ACTION_RE.search(body):
            return reply(thought, error='"Action:" must start its own line.')
        return reply(thought, error="The reply has no Action line.")

    # The first action decides, so that an answer can stream as it is written
    # (``streamable_answer``): a later action line only ends the answer.
    chosen = actions[0]
    thought = _thought(body, lines, marks, end_line=actions[0].line)
    ignored = len(actions) - 1

    if _is_final(body, chosen):
        later = [mark for mark in actions if mark.line > chosen.value_line]
        end = starts[later[0].line] if later else len(body)
        value = _FINAL_VALUE_RE.match(body, chosen.value)
        begin = value.end() if chosen.kind == "action" and value else chosen.value
        answer = body[begin:end].strip()
        if not answer:
            return reply(thought, error="The final answer is empty.", ignored=ignored)
        return reply(thought, final=answer, ignored=ignored)

    call, error = _tool_call(body, lines, starts, marks, chosen, tool_names)
    return reply(thought, action=call, error=error, ignored=ignored)


def streamable_answer(text: str, *, tool_names: Collection[str] = ()) -> str | None:
    """The final answer of a reply still being written, as far as it is certain: what
    ``parse_reply`` gives as ``final`` for the reply so far, leaving out a last, unfinished
    line that could still become a keyword line (``Action:``, ``Final Answer:``,
    ``Observation:``...), which would end or cut the answer. None while the reply is not (or
    not yet) a final answer.

    This is the one rule for both questions, "is this reply a final answer" and "may its
    text go out while it is written": each answer returned is a prefix of the next one and of
    ``parse_reply(whole_reply).final``, so text that goes out is never taken back.
    """
    settled = text
    last_line = text.rfind("\n") + 1
    if _could_become_keyword(text[last_line:]):
        settled = text[:last_line]
    reply = parse_reply(settled, tool_names=tool_names)
    return reply.final if reply.action is None else None


#: The keywords a line can start with, lower case, without spaces or underscores.
_KEYWORD_FORMS = ("thought:", "action:", "finalanswer:", "observation:")


def _could_become_keyword(line: str) -> bool:
    """Whether an unfinished line may still turn out to start with a keyword."""
    squeezed = re.sub(r"[ \t_]", "", line).lower()
    if not squeezed:
        return bool(line)  # indentation only: anything may follow
    if any(form.startswith(squeezed) for form in _KEYWORD_FORMS):
        return True
    # "Action: final ans" may still become "Action: final answer: ..."
    return squeezed.startswith("action:") and "finalanswer:".startswith(squeezed[7:])


def _line_starts(lines: list[str]) -> list[int]:
    starts = []
    offset = 0
    for line in lines:
        starts.append(offset)
        offset += len(line) + 1
    return starts


def _scan(body: str, lines: list[str], starts: list[int]) -> list[_Mark]:
    """Keyword lines outside code fences; an empty ``Action:`` takes the next non-blank line."""
    found: list[tuple[int, _Kind, re.Match[str]]] = []
    in_fence = False
    for index, line in enumerate(lines):
        if not in_fence:
            for kind, pattern in _KEYWORDS:
                match = pattern.match(body, starts[index], starts[index] + len(line))
                if match:
                    found.append((index, kind, match))
                    break
        if line.count("```") % 2:
            in_fence = not in_fence

    marks = []
    keyword_lines = {index for index, _, _ in found}
    for index, kind, match in found:
        value, value_line = match.end(), index
        if kind == "action" and not lines[index][match.end() - starts[index] :].strip():
            for following in range(index + 1, len(lines)):
                if following in keyword_lines:
                    break
                if lines[following].strip():
                    indent = len(lines[following]) - len(lines[following].lstrip())
                    value, value_line = starts[following] + indent, following
                    break
        indent = len(lines[index]) - len(lines[index].lstrip())
        marks.append(_Mark(kind, index, starts[index] + indent, value, value_line))
    return marks


def _is_final(body: str, mark: _Mark) -> bool:
    return mark.kind == "final_answer" or bool(_FINAL_VALUE_RE.match(body, mark.value))


def _line_end(body: str, pos: int) -> int:
    end = body.find("\n", pos)
    return len(body) if end == -1 else end


def _thought(body: str, lines: list[str], marks: list[_Mark], *, end_line: int) -> str:
    """The text from the first ``Thought:`` (or the start) up to ``end_line``, without keywords."""
    thoughts = {
        mark.line: mark for mark in marks if mark.kind == "thought" and mark.line < end_line
    }
    if not thoughts:
        return "\n".join(lines[:end_line]).strip()
    first = min(thoughts)
    parts = []
    for index in range(first, end_line):
        mark = thoughts.get(index)
        parts.append(body[mark.value : _line_end(body, mark.value)] if mark else lines[index])
    return "\n".join(parts).strip()


def _tool_call(
    body: str,
    lines: list[str],
    starts: list[int],
    marks: list[_Mark],
    mark: _Mark,
    tool_names: Collection[str],
) -> tuple[ToolCall | None, str | None]:
    line_end = _line_end(body, mark.value)
    prefix = _TOOL_PREFIX_RE.match(body, mark.value, line_end)
    if prefix:
        name_match = _TOOL_NAME_RE.match(body, prefix.end(), line_end)
        if name_match is None or _ARGS_RE.match(body, name_match.start(), line_end):
            rest = body[prefix.end() : line_end].strip()
            if not rest or rest.startswith("{") or _ARGS_RE.match(rest):
                return None, 'The tool name after "tool:" is empty.'
            return None, f'The tool name after "tool:" is not valid: `{_snippet(rest)}`.'
    else:
        value = body[mark.value : line_end].strip()
        if not value:
            return None, "The Action line is empty."
        name_match = _TOOL_NAME_RE.match(body, mark.value, line_end)
        if name_match is None or name_match.group() not in tool_names:
            return None, (
                f'Action must be "tool:<name>" or "final: <answer>", got `{_snippet(value)}`.'
            )
    name = name_match.group()

    rest = body[name_match.end() : line_end]
    remainder = rest.lstrip(" \t,;:.")
    payload = name_match.end() + len(rest) - len(remainder)
    if not remainder.strip():
        stop = min(
            (other.line for other in marks if other.line > mark.value_line), default=len(lines)
        )
        nonblank = next(
            (index for index in range(mark.value_line + 1, stop) if lines[index].strip()), None
        )
        if nonblank is None:
            return ToolCall(name=name, args={}, raw=body[mark.start : line_end].strip()), None
        args_line = _ARGS_RE.match(body, starts[nonblank])
        stripped = lines[nonblank].lstrip()
        if args_line:
            payload = args_line.end()
        elif stripped.startswith(("{", "[", '"', "```")):
            payload = starts[nonblank] + len(lines[nonblank]) - len(stripped)
        else:
            return None, (
                'Text follows the Action line but there is no "args:" line; write '
                '"args: {...}" with one JSON object on the next line.'
            )
    else:
        args_inline = _ARGS_RE.match(body, payload, line_end)
        if args_inline:
            payload = args_inline.end()
        elif not remainder.startswith(("{", "[", '"', "```")):
            return None, (
                f'Unexpected text after the tool name "{name}": `{_snippet(remainder)}`; '
                'put the arguments on an "args:" line as one JSON object.'
            )

    args, error, end = _parse_args(body, payload)
    if args is None:
        return None, error
    return ToolCall(name=name, args=args, raw=body[mark.start : end].strip()), None


def _parse_args(body: str, pos: int) -> tuple[dict[str, Any] | None, str | None, int]:
    """Read one JSON object starting at ``pos`` (after ``args:``); text after it is ignored."""
    pos = _skip_space(body, pos)
    fence = _FENCE_OPEN_RE.match(body, pos)
    if fence:
        pos = _skip_space(body, fence.end())
    if pos >= len(body) or body.startswith("```", pos):
        return None, f"The args line is empty; {_ARGS_HINT}, e.g. args: {{}}.", pos

    first = body[pos]
    value: Any
    if first == "{":
        value, error, end = _read_object(body, pos)
        if error:
            return None, error, pos
    elif first == '"':
        string = _JSON_STRING_RE.match(body, pos)
        if string is None:
            return None, f"args is not valid JSON: a string is never closed; {_ARGS_HINT}.", pos
        end = string.end()
        inner, error = _decode(string.group())
        if error or not isinstance(inner, str) or not inner.strip().startswith("{"):
            return None, f"args is a JSON string, not an object; {_ARGS_HINT}.", pos
        value, error = _decode(inner.strip())
        if error:
            return None, error, pos
    elif first == "[":
        return None, f"{_ARGS_HINT}, not an array.", pos
    else:
        got = _snippet(body[pos : _line_end(body, pos)])
        return None, f'{_ARGS_HINT} starting with "{{", got `{got}`.', pos

    if not isinstance(value, dict):
        return None, f"{_ARGS_HINT}, not {type(value).__name__}.", pos
    if fence:
        closing = _FENCE_CLOSE_RE.match(body, end)
        if closing:
            end = closing.end()
    return value, None, end


def _skip_space(body: str, pos: int) -> int:
    while pos < len(body) and body[pos].isspace():
        pos += 1
    return pos


def _read_object(body: str, pos: int) -> tuple[Any, str | None, int]:
    """Decode the object at ``pos``; returns (value, error, end).

    Its extent is found skipping strings in either quote (Python-style args may use single
    quotes), then, if that fails, in double quotes only (an apostrophe in JSON text); the first
    extent that decodes wins, otherwise the first extent's error is reported.
    """
    error = None
    for quotes in ("\"'", '"'):
        end = _object_end(body, pos, quotes)
        if end is None:
            continue
        value, fault = _decode(body[pos:end])
        if fault is None:
            return value, None, end
        error = error or fault
    return None, error or _NOT_CLOSED, pos


def _object_end(body: str, pos: int, quotes: str) -> int | None:
    """The offset just past the brace closing the one at ``pos``, skipping ``quotes`` strings."""
    depth = 0
    quote = ""
    index = pos
    while index < len(body):
        char = body[index]
        if quote:
            if char == "\\":
                index += 1
            elif char == quote:
                quote = ""
        elif char in quotes:
            quote = char
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return None


def _decode(candidate: str) -> tuple[Any, str | None]:
    """``json.loads``, then the same after ``_repair``; the error names the original fault."""
    try:
        return _loads(candidate), None
    except _NonFiniteError:
        return None, "args contains NaN or Infinity, which JSON does not allow."
    except json.JSONDecodeError as exc:
        fault = exc
    try:
        return _loads(_repair(candidate)), None
    except ValueError:
        return None, (
            f"args is not valid JSON ({fault.msg} at line {fault.lineno} column {fault.colno}); "
            f"{_ARGS_HINT}."
        )


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def _reject_constant(name: str) -> Any:
    raise _NonFiniteError(name)


def _repair(text: str) -> str:
    """Rewrite single-quoted strings, ``True``/``False``/``None`` and trailing commas as JSON.

    Every rewrite is one JSON has no other reading for, so a repaired text that parses means
    what the model wrote; anything else still fails to parse.
    """
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "\"'":
            index = _copy_string(text, index, out)
        elif char == ",":
            following = _skip_space(text, index + 1)
            if following >= len(text) or text[following] not in "}]":
                out.append(char)
            index += 1
        elif char.isalpha() or char == "_":
            word_end = index
            while word_end < len(text) and (text[word_end].isalnum() or text[word_end] == "_"):
                word_end += 1
            word = text[index:word_end]
            out.append(_PYTHON_LITERALS.get(word, word))
            index = word_end
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _copy_string(text: str, index: int, out: list[str]) -> int:
    """Copy the string literal at ``index`` as a double-quoted JSON string; returns its end."""
    quote = text[index]
    out.append('"')
    index += 1
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            escaped = text[index + 1]
            out.append("'" if escaped == "'" else text[index : index + 2])
            index += 2
            continue
        index += 1
        if char == quote:
            out.append('"')
            break
        out.append('\\"' if char == '"' else char)
    return index


def _snippet(text: str, limit: int = 40) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"

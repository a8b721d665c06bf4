"""The offline provider: deterministic, network-free, and speaking the agent's ReAct protocol.

It is what DevAssist answers with when no model is configured (``LLM_BASE_URL`` unset). It
cannot understand anything, but it keeps the product usable and testable end to end:

- a task with code to run (a fenced block, or the text after ``run:`` / ``execute:`` /
  ``执行：``) gets ``Action: tool:execute_code`` with the code;
- small talk ("hello", "thanks", "你好": ``agent.knowledge.answers.is_small_talk``) gets the
  no-model answer;
- otherwise, when the run may use ``search_docs`` and the default collection holds documents,
  ``Action: tool:search_docs`` with the task as the query;
- once an ``Observation:`` follows the task, it answers from it (the program's output, the
  safety report; for search results an extractive answer quoting the passages that match
  with numbered citations and a ``Sources:`` list, or, when none does, the no-model answer
  saying that nothing matched);
- anything else gets the no-model answer (``agent.knowledge.answers.no_model_answer``): that
  no model is configured, what still works, how to add one.

Answers are in Chinese when the task is written in Chinese. A reply is worked out in a worker
thread: it may read the knowledge store (whether there are documents, which pages to link).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings

from agent.knowledge.answers import extractive_answer, is_small_talk, no_model_answer
from agent.knowledge.blocks import fenced
from agent.llm.base import (
    ChatMessage,
    LLMChunk,
    LLMResponse,
    ToolCallRequest,
    ToolDefinition,
)
from agent.parser import parse_reply
from agent.prompt import ToolSpec, final_answer_prompt, system_prompt, tools_final_answer_prompt

logger = structlog.get_logger(__name__)

OBSERVATION_PREFIX = "Observation:"
#: The model name runs record for this provider.
OFFLINE_MODEL = "offline"
EXEC_TIMEOUT_S = 10
#: Longest piece of tool output quoted in an answer.
MAX_QUOTE_CHARS = 4000

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)```|```([^`\n]+)```", re.DOTALL)
_PYTHON_FENCES = {"", "python", "py", "python3", "py3"}
# How the system prompt lists a tool the run may call (agent.prompt.system_prompt).
_SEARCH_TOOL_LINE = re.compile(r"^- search_docs:", re.MULTILINE)
_MARKER = re.compile(r"(?:执行\s*[:：]|(?<![\w-])(?:execute|run)\s*:)", re.IGNORECASE)
# Word-sized stream pieces: a run of non-space text, or one CJK character, with its trailing
# space; leading whitespace on its own.
_PIECES = re.compile(
    r"[^\s\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]+\s*|[\u3000-\u9fff\uac00-\ud7af\uff00-\uffef]\s*|\s+"
)


class OfflineProvider:
    """``LLMProvider`` without a model. Accepts (and ignores) the shared LLM ``OPTIONS``."""

    model = OFFLINE_MODEL
    writes_free_text = False

    def __init__(self, *, model: str = OFFLINE_MODEL, **unused: Any) -> None:
        # The options are those of a real provider; none of them applies here, and the model
        # name runs are recorded with stays "offline" whatever LLM_MODEL says.
        del model, unused

    def describe(self) -> dict[str, Any]:
        return {"provider": "offline", "model": self.model}

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> LLMResponse:
        """The reply (see the module docstring), cut at the first stop sequence. With
        ``tools`` (native tool calling) the same decisions come as ``tool_calls``."""
        started = time.monotonic()
        if tools:
            messages = _as_text_protocol(messages, tools)
        content = _cut_at_stop(await _reply(messages), stop)
        calls: tuple[ToolCallRequest, ...] = ()
        if tools:
            content, calls = _as_tool_calls(content)
        return LLMResponse(
            content=content,
            model=self.model,
            finish_reason="tool_calls" if calls else "stop",
            latency_ms=int((time.monotonic() - started) * 1000),
            tool_calls=calls,
        )

    async def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        stop: Sequence[str] | None = None,
        tools: Sequence[ToolDefinition] | None = None,
    ) -> AsyncGenerator[LLMChunk, None]:
        """``complete()``'s content in word-sized deltas, then the response. Each piece gives
        the event loop a turn, so a cancelled consumer stops between pieces."""
        response = await self.complete(messages, stop=stop, tools=tools)
        calling = bool(response.tool_calls)
        for piece in _PIECES.findall(response.content):
            await asyncio.sleep(0)
            yield LLMChunk(delta=piece, calling_tools=calling)
        yield LLMChunk(response=response, calling_tools=calling)


def _as_text_protocol(
    messages: Sequence[ChatMessage], tools: Sequence[ToolDefinition]
) -> list[ChatMessage]:
    """A native tool calling conversation as the text protocol has it: the tools described
    in the system message, tool results as ``Observation:`` messages."""
    specs = [
        ToolSpec(
            name=str(tool["function"]["name"]),
            description=str(tool["function"].get("description", "")),
            parameters=tool["function"].get("parameters") or {},
        )
        for tool in tools
    ]
    converted: list[ChatMessage] = [{"role": "system", "content": system_prompt(specs)}]
    for message in messages:
        if message["role"] == "system":
            continue
        if message["content"] == tools_final_answer_prompt():
            converted.append({"role": "user", "content": final_answer_prompt()})
        elif message["role"] == "tool":
            converted.append(
                {"role": "user", "content": f"{OBSERVATION_PREFIX} {message['content']}"}
            )
        else:
            converted.append({"role": message["role"], "content": message["content"]})
    return converted


def _as_tool_calls(reply: str) -> tuple[str, tuple[ToolCallRequest, ...]]:
    """A text protocol reply as native tool calling's: (content, tool calls)."""
    parsed = parse_reply(reply)
    if parsed.action is None:
        return parsed.final or "", ()
    arguments = json.dumps(parsed.action.args, ensure_ascii=False)
    return parsed.thought, (
        ToolCallRequest(id="call_1", name=parsed.action.name, arguments=arguments),
    )


def reply_for(messages: Sequence[ChatMessage], *, documents: bool = False) -> str:
    """The offline model's reply to a conversation, in the ReAct text protocol. ``documents``
    says whether ``search_docs`` may be called and has something to search. Reads the
    knowledge store for the links of a final answer: call it off the event loop."""
    task, observation = _task_and_observation(messages)
    chinese = bool(_CJK.search(task))
    if observation is not None:
        thought, answer = _answer_from(observation, question=task, chinese=chinese)
        return f"Thought: {thought}\nAction: final: {answer}"
    code = extract_code(task)
    if code:
        args = json.dumps({"code": code, "timeout_s": EXEC_TIMEOUT_S}, ensure_ascii=False)
        return (
            "Thought: I will run the code with execute_code.\n"
            f"Action: tool:execute_code\nargs: {args}"
        )
    if documents and task.strip() and not is_small_talk(task):
        args = json.dumps({"query": " ".join(task.split())}, ensure_ascii=False)
        return (
            "Thought: I will look this up in the documentation with search_docs.\n"
            f"Action: tool:search_docs\nargs: {args}"
        )
    answer = no_model_answer(chinese=chinese)
    return f"Thought: No language model is configured.\nAction: final: {answer}"


def extract_code(text: str) -> str | None:
    """The code a message asks to run: the first Python (or untagged) fenced block, else what
    follows ``执行：`` / ``execute:`` / ``run:`` (the fence inside it, if any). None if there
    is none."""
    fenced = _fenced_code(text)
    if fenced:
        return fenced
    marker = _MARKER.search(text)
    if marker is None:
        return None
    rest = text[marker.end() :].strip()
    return (_fenced_code(rest) or rest) or None


def _fenced_code(text: str) -> str | None:
    for match in _FENCE.finditer(text):
        if match.group(3) is not None:
            code = match.group(3)
        elif match.group(1).strip().lower() in _PYTHON_FENCES:
            code = match.group(2)
        else:
            continue
        if code.strip():
            return code.strip("\n").rstrip()
    return None


def _task_and_observation(messages: Sequence[ChatMessage]) -> tuple[str, Any | None]:
    """The latest user message that is not an observation, and the last observation after it
    (its JSON decoded; the raw text when it is not JSON). The loop's "answer now" request is no
    new task: the observations before it still count."""
    task = ""
    observation: Any | None = None
    answer_now = final_answer_prompt()
    for message in messages:
        if message["role"] != "user":
            continue
        content = message["content"]
        if content == answer_now:
            continue
        if content.lstrip().startswith(OBSERVATION_PREFIX):
            raw = content.lstrip()[len(OBSERVATION_PREFIX) :].strip()
            try:
                observation = json.loads(raw)
            except ValueError:
                observation = raw
        else:
            task, observation = content, None
    return task, observation


async def _reply(messages: Sequence[ChatMessage]) -> str:
    """``reply_for`` in a worker thread (it may read the knowledge store)."""
    return await sync_to_async(_reply_now, thread_sensitive=False)(messages)


def _reply_now(messages: Sequence[ChatMessage]) -> str:
    """``reply_for``, with ``documents`` looked up only when the reply depends on them (a new
    task without code that is not small talk, in a run that offers ``search_docs``)."""
    task, observation = _task_and_observation(messages)
    offers_search = any(
        m["role"] == "system" and _SEARCH_TOOL_LINE.search(m["content"]) for m in messages
    )
    documents = False
    if (
        offers_search
        and observation is None
        and task.strip()
        and not extract_code(task)
        and not is_small_talk(task)
    ):
        # Imported here: chromadb takes seconds to import, and most runs never get this far.
        from agent.knowledge.store import collection_has_chunks

        documents = collection_has_chunks(settings.KNOWLEDGE_DEFAULT_COLLECTION)
    return reply_for(messages, documents=documents)


def _answer_from(observation: Any, *, question: str, chinese: bool) -> tuple[str, str]:
    """A thought and a final answer that report ``observation``."""
    if isinstance(observation, dict):
        report = _blocked_report(observation)
        if report is not None:
            return "The code was not run.", _t(
                chinese,
                f"安全检查拦截了这段代码，没有运行：\n{fenced(report)}",
                f"The safety check blocked the code, so it did not run:\n{fenced(report)}",
            )
        if {"stdout", "stderr", "exit_code"} & observation.keys():
            return "The code ran.", _execution_answer(observation, chinese=chinese)
        results = observation.get("results")
        if isinstance(results, list):
            message = observation.get("message")
            if not results and "collections" in observation and isinstance(message, str):
                # An unknown collection: the message names those that exist.
                return "The search found nothing.", message
            if not results:
                collection = observation.get("collection")
                return "The search found nothing.", no_model_answer(
                    chinese=chinese,
                    nothing_matched=True,
                    collection=collection if isinstance(collection, str) else None,
                )
            collection = observation.get("collection")
            if isinstance(collection, str):
                # The observation names its collection once; the quotes link into it.
                results = [
                    {"collection": collection, **r} if isinstance(r, dict) else r for r in results
                ]
            return "I have the search results.", extractive_answer(
                question=question, results=results, chinese=chinese, model_configured=False
            )
        error = observation.get("error")
        if error:
            text = _error_text(error)
            return "The tool failed.", _t(
                chinese, f"工具调用失败：{text}", f"The tool failed: {text}"
            )
    if isinstance(observation, str):
        text = _clip(observation)
        return "I have the tool's result.", _t(
            chinese, f"工具返回：\n{fenced(text)}", f"The tool returned:\n{fenced(text)}"
        )
    text = _clip(json.dumps(observation, ensure_ascii=False, indent=2))
    return "I have the tool's result.", _t(
        chinese,
        f"工具返回：\n{fenced(text, 'json')}",
        f"The tool returned:\n{fenced(text, 'json')}",
    )


def _blocked_report(observation: dict[str, Any]) -> str | None:
    """The safety report's text when the observation says the code was blocked."""
    safety = observation.get("safety")
    safety_blocked = isinstance(safety, dict) and safety.get("blocked") is True
    if observation.get("blocked") is not True and not safety_blocked:
        error = observation.get("error")
        if not (isinstance(error, dict) and error.get("code") == "sandbox_code_blocked"):
            return None
    for source in (safety, observation.get("report"), observation.get("error")):
        if isinstance(source, dict):
            source = source.get("text") or source.get("message")
        if isinstance(source, str) and source.strip():
            return _clip(source.strip())
    return "Safety check BLOCKED."


def _execution_answer(result: dict[str, Any], *, chinese: bool) -> str:
    stdout = str(result.get("stdout") or "")
    stderr = str(result.get("stderr") or "")
    exit_code = result.get("exit_code")
    parts: list[str] = []
    if result.get("timed_out"):
        parts.append(_t(chinese, "代码运行超时（timed out），已被终止。", "The code timed out."))
    if result.get("cancelled"):
        parts.append(_t(chinese, "运行已被取消。", "The run was cancelled."))
    if stdout:
        parts.append(_t(chinese, "代码输出：", "The code printed:") + "\n" + fenced(_clip(stdout)))
    elif not result.get("timed_out"):
        parts.append(_t(chinese, "代码运行完毕，没有输出。", "The code ran and printed nothing."))
    if stderr:
        parts.append("stderr:\n" + fenced(_clip(stderr)))
    if isinstance(exit_code, int) and exit_code != 0:
        parts.append(_t(chinese, f"退出码：{exit_code}。", f"It exited with code {exit_code}."))
    if result.get("truncated"):
        parts.append(_t(chinese, "（输出过长，已截断。）", "(The output was truncated.)"))
    return "\n\n".join(parts)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or json.dumps(error, ensure_ascii=False))
    return str(error)


def _clip(text: str, limit: int = MAX_QUOTE_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... ({len(text) - limit} more characters)"


def _t(chinese: bool, zh: str, en: str) -> str:
    return zh if chinese else en


def _cut_at_stop(content: str, stop: Sequence[str] | None) -> str:
    if isinstance(stop, str):
        stop = [stop]
    hits = [i for s in (stop or ()) if s and (i := content.find(s)) >= 0]
    return content[: min(hits)] if hits else content

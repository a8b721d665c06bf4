"""Which engine answers a chat message: the agent, RAG over the documentation, or plain chat.

Explicit flags win (``use_agent`` before ``use_rag``). Otherwise a keyword heuristic decides:
requests to write, run, execute, implement or verify something, or to work step by step, go to
the agent; questions go to RAG when the collection holds documents; everything else is chat.
English keywords match as whole words ("prune" is not "run"); Chinese ones as substrings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agent.models import RunMode

__all__ = ["Route", "choose_route", "looks_like_question", "looks_like_task"]

_AGENT_ZH = (
    "写一个",
    "写个",
    "帮我写",
    "帮我实现",
    "实现一个",
    "运行",
    "执行",
    "验证",
    "测试一下",
    "一步一步",
    "逐步",
    "计算一下",
    "先搜索",
    "查一下然后",
)
_AGENT_EN = re.compile(
    r"\b(?:write\s+(?:a|an|me|some|the)|implement|run|execute|verify|step[\s-]+by[\s-]+step"
    r"|compute|calculate|search\b[^.?!\n]{0,80}?\bthen)\b",
    re.IGNORECASE,
)
_QUESTION_ZH = (
    "？",
    "怎么",
    "如何",
    "为什么",
    "为何",
    "什么",
    "哪里",
    "哪个",
    "报错",
    "错误",
    "吗",
)
_QUESTION_EN = re.compile(
    r"\?|\b(?:how|why|what|where|which|when|who|does|can|should|is\s+there|traceback"
    r"|exception|error|fails?|failing)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Route:
    """The engine (``RunMode`` value) and why it was chosen (``explicit``, ``files`` or
    ``heuristic``)."""

    mode: str
    reason: str

    @property
    def agent(self) -> bool:
        return self.mode == RunMode.AGENT

    @property
    def rag(self) -> bool:
        return self.mode == RunMode.RAG


def looks_like_task(message: str) -> bool:
    """Whether ``message`` asks for something to be written, run, executed or verified."""
    return any(word in message for word in _AGENT_ZH) or bool(_AGENT_EN.search(message))


def looks_like_question(message: str) -> bool:
    """Whether ``message`` is a question (or reports an error) the documentation may answer."""
    return any(word in message for word in _QUESTION_ZH) or bool(_QUESTION_EN.search(message))


def choose_route(
    *,
    message: str,
    use_agent: bool | None = None,
    use_rag: bool | None = None,
    documents_exist: bool,
    has_files: bool = False,
) -> Route:
    """The route of ``message``: ``use_agent`` true → agent; ``use_rag`` true → RAG (even
    without documents: the answer then says nothing was found); with files attached and no
    flag set → agent (only the agent's code reads files); otherwise the heuristic, where a
    flag set to false rules its route out."""
    if use_agent:
        return Route(RunMode.AGENT, "explicit")
    if use_rag:
        return Route(RunMode.RAG, "explicit")
    if has_files and use_agent is None and use_rag is None:
        return Route(RunMode.AGENT, "files")
    if use_agent is None and looks_like_task(message):
        return Route(RunMode.AGENT, "heuristic")
    if use_rag is None and documents_exist and looks_like_question(message):
        return Route(RunMode.RAG, "heuristic")
    return Route(RunMode.CHAT, "heuristic")

"""The language model behind the agent: ``get_llm()`` returns the configured provider.

``settings.LLM`` follows Django's backend idiom, ``{"BACKEND": "dotted.path", "OPTIONS": {...}}``;
the provider is built once per process. Only this package talks to a model (and imports
``openai``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, cast

from django.conf import settings
from django.utils.module_loading import import_string

from agent.llm.base import ChatMessage, LLMChunk, LLMProvider, LLMResponse, Role, Usage

__all__ = [
    "ChatMessage",
    "LLMChunk",
    "LLMProvider",
    "LLMResponse",
    "Role",
    "Usage",
    "get_llm",
]


@lru_cache(maxsize=1)
def get_llm() -> LLMProvider:
    """The provider ``settings.LLM`` names, built with its ``OPTIONS`` (cached; tests that
    change the setting call ``get_llm.cache_clear()``)."""
    config: dict[str, Any] = settings.LLM
    backend = import_string(config["BACKEND"])
    return cast(LLMProvider, backend(**config.get("OPTIONS", {})))

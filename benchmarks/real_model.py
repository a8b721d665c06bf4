"""Benchmark: what DevAssist adds to a real model's streamed answer. The time to the first piece
of text and the tokens per second through DevAssist (``POST /chat?stream=true``), against the
same request sent straight to the model server, interleaved in one run.

Run from the repository root (the model server's virtualenv comes from ``make model-venv``;
``DEVASSIST_MODEL_PYTHON`` names another)::

    .venv/bin/python benchmarks/real_model.py [--rounds 20] [--max-tokens 200]

Set-up, all on 127.0.0.1: the real model server as the tests start it (``tests/model_server.py``:
SmolLM2-135M-Instruct under llama-cpp-python's server, one thread, seed 0), and DevAssist under
daphne on PostgreSQL with the in-memory channel layer, its ``LLM_BASE_URL`` the model server
itself (no proxy), temperature 0, ``--max-tokens``, no retries.

Each round sends the same prompt both ways, one after the other, the order alternating from
round to round; ``--warmup`` rounds go first, not counted:

- **direct**: ``POST /v1/chat/completions`` to the model server with what DevAssist's plain
  chat sends (its system prompt and the message, temperature 0, ``max_tokens``, ``stream`` with
  ``stream_options.include_usage``);
- **through**: ``POST /chat?stream=true`` with the message, ``use_agent`` and ``use_rag`` false
  (a new conversation each time, so the model sees the same two messages).

The model's prompt cache (llama.cpp keeps the previous prompt's evaluation and reuses its common
prefix) serves both ways alike, since the prompt is the same.

Figures:

- **TTFT**, time to first text: from sending the request to the first piece of the answer's
  text (direct: the first chunk with content; through: the first ``delta`` event);
- **DevAssist's CPU per answer**: the daphne process's CPU time (user + system) over each answer
  through it; on a machine with few cores it is taken from the model;
- **to meta** (through only): from sending the request to DevAssist's first event, ``meta`` (the
  request handled, the conversation, run and trace stored); the rest of its TTFT is the run
  starting, the model's own TTFT and the way of the first delta to the client;
- **tokens/s**: the answer's tokens over the time from sending the request to its last piece of
  text (the rate at which the whole answer reaches a reader). The tokens are counted in the
  direct answer, one per streamed chunk (as llama-cpp-python streams); the answer through
  DevAssist must be the same text (the rounds where it is not are counted and left out of the
  tokens/s figures). Also shown: **first to last**, over the time from the first piece of text to
  the last; DevAssist's first delta may hold several tokens, which shortens that time and flatters
  it.

Targets (issue 15): DevAssist adds under 50 ms to the p50 TTFT; tokens/s through DevAssist
within 5% of direct (p50s of tokens/s). The exit code is 0 whatever the verdicts. PostgreSQL
comes from ``BENCH_DATABASE_URL`` (default
``postgres://postgres@127.0.0.1:5432/devassist_real_model_bench``), created and migrated when
missing. The run takes about a minute and a half on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.chat_stream import server_cpu_s  # noqa: E402 - after the path above
from benchmarks.common import percentile, verdict  # noqa: E402
from benchmarks.trace_tree import (  # noqa: E402
    configure_environment,
    ensure_database,
    machine_load,
)
from tests.model_server import model_server, model_server_missing  # noqa: E402
from tests.servers import daphne_server  # noqa: E402

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_real_model_bench"
BENCH_USERNAME = "real-model-benchmark"
PROMPT = "Write a long story about a robot who learns to paint, in ten paragraphs."
TARGET_TTFT_ADDED_P50_MS = 50.0
TARGET_RATE_RATIO = 0.95


@dataclass
class Answer:
    """One streamed answer as the client saw it: when its pieces of text arrived
    (``time.perf_counter()``), from when the request was sent."""

    sent: float
    text: str = ""
    pieces: list[float] = field(default_factory=list)
    #: Through DevAssist: when its ``meta`` event arrived.
    meta: float = float("nan")

    @property
    def ttft_ms(self) -> float:
        return (self.pieces[0] - self.sent) * 1000

    @property
    def to_meta_ms(self) -> float:
        return (self.meta - self.sent) * 1000

    def tokens_per_s(self, tokens: int) -> float:
        return tokens / (self.pieces[-1] - self.sent)

    def first_to_last_per_s(self, tokens: int) -> float:
        return (tokens - 1) / (self.pieces[-1] - self.pieces[0])


@dataclass
class Figures:
    direct: list[Answer] = field(default_factory=list)
    through: list[Answer] = field(default_factory=list)
    #: The direct answer's token count, per round.
    tokens: list[int] = field(default_factory=list)
    #: Rounds whose two answers differ (left out of the rates).
    mismatched: int = 0
    #: The DevAssist server's CPU time (user + system) per answer through it.
    server_cpu_ms: list[float] = field(default_factory=list)


async def sse_data(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON of each ``data:`` line of a streamed response, as it arrives."""
    async for line in response.aiter_lines():
        if line.startswith("data:") and line[5:].strip() != "[DONE]":
            yield json.loads(line[5:])


async def direct(client: Any, model_base_url: str, model: str, max_tokens: int) -> Answer:
    """The prompt sent straight to the model server, as DevAssist's plain chat sends it."""
    from agent.modes import CHAT_SYSTEM_PROMPT

    body = {
        "model": model,
        "messages": [
            {"role": "system", "content": CHAT_SYSTEM_PROMPT},
            {"role": "user", "content": PROMPT},
        ],
        "temperature": 0.0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    answer = Answer(sent=time.perf_counter())
    async with client.stream("POST", f"{model_base_url}/chat/completions", json=body) as response:
        response.raise_for_status()
        async for event in sse_data(response):
            for choice in event.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    answer.pieces.append(time.perf_counter())
                    answer.text += piece
    return answer


async def through(client: Any, devassist_url: str) -> Answer:
    """The prompt as a plain chat turn through DevAssist; fails unless the run completes."""
    body = {"message": PROMPT, "use_agent": False, "use_rag": False}
    answer = Answer(sent=time.perf_counter())
    async with client.stream("POST", f"{devassist_url}/chat?stream=true", json=body) as response:
        response.raise_for_status()
        async for event in sse_data(response):
            if event["type"] == "meta":
                answer.meta = time.perf_counter()
            elif event["type"] == "delta" and event["content"]:
                answer.pieces.append(time.perf_counter())
                answer.text += event["content"]
            elif event["type"] == "done":
                if event["status"] != "completed":
                    raise RuntimeError(f"the run ended {event['status']}")
                break
    return answer


async def measure(
    model_base_url: str, model: str, devassist_url: str, token: str, args: argparse.Namespace
) -> Figures:
    import httpx

    figures = Figures()
    async with (
        httpx.AsyncClient(timeout=120) as model_client,
        httpx.AsyncClient(timeout=120, headers={"Authorization": f"Bearer {token}"}) as app,
    ):
        for number in range(args.warmup + args.rounds):
            if number % 2 == 0:
                theirs = await direct(model_client, model_base_url, model, args.max_tokens)
            cpu_before = server_cpu_s()
            mine = await through(app, devassist_url)
            cpu_ms = (server_cpu_s() - cpu_before) * 1000
            if number % 2:
                theirs = await direct(model_client, model_base_url, model, args.max_tokens)
            if number < args.warmup:
                continue
            figures.direct.append(theirs)
            figures.through.append(mine)
            figures.tokens.append(len(theirs.pieces))
            figures.mismatched += mine.text != theirs.text
            figures.server_cpu_ms.append(cpu_ms)
    return figures


def report(figures: Figures) -> None:
    direct_ttft = [answer.ttft_ms for answer in figures.direct]
    through_ttft = [answer.ttft_ms for answer in figures.through]
    same = [
        (d, t, n)
        for d, t, n in zip(figures.direct, figures.through, figures.tokens, strict=True)
        if d.text == t.text
    ]
    rates = {
        "direct": [d.tokens_per_s(n) for d, _, n in same],
        "through": [t.tokens_per_s(n) for _, t, n in same],
    }
    first_to_last = {
        "direct": [d.first_to_last_per_s(n) for d, _, n in same],
        "through": [t.first_to_last_per_s(n) for _, t, n in same],
    }
    deltas = statistics.median(len(answer.pieces) for answer in figures.through)
    print(
        f"\n{len(figures.direct)} rounds, {statistics.median(figures.tokens):.0f} tokens per "
        f"answer (p50) in {deltas:.0f} deltas through DevAssist, {figures.mismatched} round(s) "
        "whose answers differ"
    )
    print(f"{'':>22} {'direct':>10} {'through':>10} {'difference':>11}")
    for label, q in (("TTFT p50", 0.5), ("TTFT p95", 0.95)):
        d, t = percentile(direct_ttft, q), percentile(through_ttft, q)
        print(f"{label:>22} {d:>8.1f}ms {t:>8.1f}ms {t - d:>+9.1f}ms")
    to_meta = [answer.to_meta_ms for answer in figures.through]
    print(f"{'to meta p50 / p95':>22} {'':>10} {percentile(to_meta, 0.5):>8.1f}ms", end="")
    print(f" / {percentile(to_meta, 0.95):.1f}ms")
    for label, values in (("tokens/s p50", rates), ("first to last p50", first_to_last)):
        d, t = percentile(values["direct"], 0.5), percentile(values["through"], 0.5)
        print(f"{label:>22} {d:>10.1f} {t:>10.1f} {t / d:>10.1%}")
    print(
        f"DevAssist's CPU per answer: {percentile(figures.server_cpu_ms, 0.5):.0f} ms p50 "
        "(its daphne process, user + system)"
    )
    print("\nTargets:")
    added = percentile(through_ttft, 0.5) - percentile(direct_ttft, 0.5)
    verdict(
        f"DevAssist adds under {TARGET_TTFT_ADDED_P50_MS:.0f} ms to the TTFT p50",
        added < TARGET_TTFT_ADDED_P50_MS,
        f"{added:+.1f} ms",
    )
    ratio = percentile(rates["through"], 0.5) / percentile(rates["direct"], 0.5)
    verdict(
        f"tokens/s through DevAssist within {1 - TARGET_RATE_RATIO:.0%} of direct",
        ratio >= TARGET_RATE_RATIO and bool(same),
        f"{ratio:.1%} of direct",
    )


def prepare_token() -> str:
    from django.contrib.auth.models import User

    from devassist.models import ApiToken
    from devassist.tokens import api_token_create

    user, _ = User.objects.get_or_create(username=BENCH_USERNAME)
    user.conversations.all().delete()
    user.agent_runs.all().delete()
    ApiToken.objects.filter(user=user).delete()
    return api_token_create(user=user, name="real model benchmark")[1]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="DevAssist against a real model, and without.")
    parser.add_argument("--rounds", type=int, default=20, help="measured rounds (two answers)")
    parser.add_argument("--warmup", type=int, default=2, help="rounds first, not counted")
    parser.add_argument(
        "--max-tokens", type=int, default=200, help="the length of each answer, in tokens"
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    missing = model_server_missing()
    if missing is not None:
        raise SystemExit(missing)
    var_dir = configure_environment(
        default_database_url=DEFAULT_DATABASE_URL, var_prefix="devassist-real-model-bench-var-"
    )
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    try:
        ensure_database(os.environ["DATABASE_URL"])
        import django
        from django.core.management import call_command
        from django.db import connection

        django.setup()
        call_command("migrate", verbosity=0)
        token = prepare_token()
        connection.close()
        with model_server() as model:
            env = {
                "DATABASE_URL": os.environ["DATABASE_URL"],
                "DEVASSIST_VAR_DIR": var_dir,
                "LLM_BASE_URL": model.base_url,
                "LLM_MODEL": model.model,
                "LLM_MAX_TOKENS": str(args.max_tokens),
                "LLM_TEMPERATURE": "0",
                "LLM_MAX_RETRIES": "0",
                "SANDBOX_WARM_ON_START": "0",
                "SANDBOX_POOL_SIZE": "0",
                "LOG_LEVEL": "WARNING",
                "SECRET_KEY": "real-model-benchmark",
            }
            with daphne_server(env, timeout_s=60) as devassist_url:
                print(f"model {model.model}\nDevAssist under daphne at {devassist_url}")
                figures = asyncio.run(
                    measure(model.base_url, model.model, devassist_url, token, args)
                )
        report(figures)
        print(f"\nload average now {machine_load()} (other work on the machine skews the figures)")
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

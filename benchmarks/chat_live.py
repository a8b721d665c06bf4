"""Benchmark: a running tool's progress in the chat, as the browser shows it.

Run from the repository root::

    .venv/bin/python benchmarks/chat_live.py [--runs 8] [--lines 5]

DevAssist runs under daphne on a benchmark database (``BENCH_DATABASE_URL``, default
``postgres://postgres@127.0.0.1:5432/devassist_bench_live``, dropped and created afresh), with
the scripted model (``tests/agent/fake_openai.py``, a real HTTP server) and the real Docker
sandbox (the image must be built). Each of ``--runs`` chat turns (route Agent, a new chat each)
calls ``execute_code`` on a program that prints ``--lines`` lines 0.5 s apart, each line
carrying ``time.time()`` at its print. In the system Chromium a ``MutationObserver`` on the
messages notes, at the next animation frame after each change, when the running card appeared
and when each printed line appeared in it. Figures:

- **tool start → running card**: the card's appearance minus its ``data-started-at-ms`` (the
  action step's ``started_at``, taken as the recorder records the tool's start, before its
  ``step_started`` event is stored and sent);
- **printed line → shown**: a line's appearance minus the moment the program printed it.

The sandbox's container, the server and the browser share the machine's clock. Targets (p50):
under 150 ms and under 250 ms. The exit code is 0 whatever the verdicts.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import percentile, verdict
from benchmarks.trace_page import CHROMIUM, session_cookie
from benchmarks.trace_tree import (
    BENCH_USERNAME,
    configure_environment,
    machine_load,
    recreate_database,
)

TARGET_CARD_MS = 150.0
TARGET_LINE_MS = 250.0
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/devassist_bench_live"

#: Notes, at the animation frame after each change of the messages, each running card that
#: appeared (its id, its tool's start, now) and each complete line of a card's live stdout
#: (the epoch seconds it carries, now).
OBSERVER = """
(() => {
  const seen = { cards: [], lines: [] };
  const cards = new Set();
  const lines = new Map();
  window.liveSeen = seen;
  function look() {
    const now = Date.now();
    document.querySelectorAll(".step.running").forEach((card) => {
      if (cards.has(card.id)) return;
      cards.add(card.id);
      const started = Number(card.querySelector(".step-elapsed").dataset.startedAtMs);
      seen.cards.push({ id: card.id, started: started, shown: now });
    });
    document.querySelectorAll(".live-stdout").forEach((pre) => {
      const done = pre.textContent.split("\\n").slice(0, -1);
      for (let i = lines.get(pre.id) || 0; i < done.length; i++) {
        seen.lines.push({ printed: Number(done[i].split(" ")[2]) * 1000, shown: now });
      }
      lines.set(pre.id, done.length);
    });
  }
  new MutationObserver(() => requestAnimationFrame(look)).observe(
    document.getElementById("messages"),
    { childList: true, subtree: true, characterData: true },
  );
})();
"""


def program(lines: int) -> str:
    return (
        "import time\n"
        f"for i in range({lines}):\n"
        "    time.sleep(0.5)\n"
        "    print('line', i, repr(time.time()), flush=True)\n"
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark a running tool's chat card.")
    parser.add_argument("--runs", type=int, default=8, help="chat turns, one tool call each")
    parser.add_argument("--lines", type=int, default=5, help="lines each program prints")
    return parser.parse_args(argv)


def summary(name: str, values_ms: list[float]) -> str:
    return (
        f"{name:<32} {len(values_ms):>5} {statistics.median(values_ms):8.0f} "
        f"{percentile(values_ms, 0.95):8.0f} {max(values_ms):8.0f}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    var_dir = configure_environment(default_database_url=DEFAULT_DATABASE_URL)
    print(f"{os.cpu_count()} CPUs, load average {machine_load()}")
    try:
        recreate_database(os.environ["DATABASE_URL"])
        import django

        django.setup()
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.db import connection
        from playwright.sync_api import sync_playwright

        from tests.agent.fake_openai import FakeOpenAI
        from tests.servers import daphne_server

        call_command("migrate", verbosity=0)
        cookie = session_cookie(User.objects.create(username=BENCH_USERNAME))
        database = connection.settings_dict
        connection.close()
        call = "Thought: run it\nAction: tool:execute_code\nargs: " + json.dumps(
            {"code": program(args.lines)}
        )
        cards: list[float] = []
        lines: list[float] = []
        with FakeOpenAI() as model:
            model.script([call, "Thought: done\nAction: final: Done."] * args.runs)
            env = {
                "DATABASE_URL": (
                    f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}"
                    f"/{database['NAME']}"
                ),
                "DEVASSIST_VAR_DIR": os.environ["DEVASSIST_VAR_DIR"],
                "CHROMA_PATH": str(Path(os.environ["DEVASSIST_VAR_DIR"]) / "chroma"),
                "LLM_BASE_URL": model.base_url,
                "LLM_API_KEY": "bench",
                "LLM_MODEL": "fake-model",
                "SANDBOX_POOL_SIZE": "1",
                "DEBUG": "0",
                "LOG_LEVEL": "WARNING",
            }
            with daphne_server(env) as base_url, sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
                )
                context = browser.new_context(base_url=base_url)
                context.add_cookies([{"name": cookie[0], "value": cookie[1], "url": base_url}])
                context.set_default_timeout(60_000)
                page = context.new_page()
                for _ in range(args.runs):
                    page.goto("/")
                    page.evaluate(OBSERVER)
                    page.select_option("#route-select", "agent")
                    page.fill("#composer-input", "run the counting program")
                    page.press("#composer-input", "Enter")
                    page.locator(".turn.assistant .markdown").wait_for()
                    seen = page.evaluate("window.liveSeen")
                    cards += [c["shown"] - c["started"] for c in seen["cards"]]
                    lines += [line["shown"] - line["printed"] for line in seen["lines"]]
                browser.close()
        print(f"\n{'in Chromium':<32} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8}")
        print(summary("tool start → running card", cards))
        print(summary("printed line → shown in card", lines))
        print("\ntargets")
        card_p50, line_p50 = statistics.median(cards), statistics.median(lines)
        verdict(
            f"tool start → running card p50 < {TARGET_CARD_MS:.0f} ms",
            card_p50 < TARGET_CARD_MS,
            f"{card_p50:.0f} ms",
        )
        verdict(
            f"printed line → shown p50 < {TARGET_LINE_MS:.0f} ms",
            line_p50 < TARGET_LINE_MS,
            f"{line_p50:.0f} ms",
        )
        print(f"\nload average now {machine_load()}")
    finally:
        shutil.rmtree(var_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

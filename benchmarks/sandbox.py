"""Benchmark: how fast the sandbox runs ``print(1+1)``.

Run from the repository root (needs a Docker engine and the sandbox image)::

    .venv/bin/python benchmarks/sandbox.py [--runs 30] [--concurrency 10]

Measures, in one run and on the same image: the Docker backend with its warm pool, the backend
without a pool (a cold create + attach + start through the SDK each time), and a plain
``docker run --rm -i <image> python3 -`` through the CLI as the baseline; then the throughput
of ``--concurrency`` executions at once through the warm-pooled backend. Prints p50/p95 and the
ratios, and PASS/FAIL for the targets (warm p50 under 150 ms, at least 2x faster than the plain
``docker run``). The exit code is 0 whatever the verdicts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))  # run as a script: make the project importable

from benchmarks.common import percentile  # noqa: E402 - after the path above

CODE = "print(1+1)"
TARGET_WARM_P50_MS = 150.0
TARGET_RATIO = 2.0


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devassist.settings")
    os.environ.setdefault("DEVASSIST_VAR_DIR", tempfile.mkdtemp(prefix="devassist-bench-"))
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    import django

    django.setup()


def timed(
    fn: Callable[[], None], runs: int, *, settle: Callable[[], None] | None = None
) -> list[float]:
    samples = []
    for _ in range(runs):
        if settle is not None:
            settle()
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def row(name: str, samples: list[float]) -> tuple[str, float, float]:
    p50, p95 = statistics.median(samples), percentile(samples, 0.95)
    print(f"{name:<34} {p50:>9.1f} {p95:>9.1f} {len(samples):>6}")
    return name, p50, p95


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    setup_django()

    from sandbox.backends.docker import DockerSandbox
    from sandbox.image import sandbox_image_ref

    image = sandbox_image_ref()
    warm = DockerSandbox(image=image, pool_size=2)
    cold = DockerSandbox(image=image, pool_size=0)
    warm.start()

    def expect_two(run: Callable[[], str]) -> Callable[[], None]:
        def check() -> None:
            output = run()
            if output.strip() != "2":
                raise SystemExit(f"unexpected output: {output!r}")

        return check

    def wait_for_pool() -> None:
        deadline = time.monotonic() + 30
        while warm.idle_count() < warm.pool_size and time.monotonic() < deadline:
            time.sleep(0.01)

    warm_run = expect_two(lambda: warm.run(code=CODE, timeout_s=10).stdout)
    cold_run = expect_two(lambda: cold.run(code=CODE, timeout_s=10).stdout)
    cli_run = expect_two(
        lambda: (
            subprocess.run(
                ["docker", "run", "--rm", "-i", "--network", "none", image, "python3", "-"],
                input=CODE,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
    )

    print(f"image {image}; {args.runs} runs each; times in ms\n")
    print(f"{'measurement':<34} {'p50':>9} {'p95':>9} {'runs':>6}")
    for fn, settle in ((warm_run, wait_for_pool), (cold_run, None), (cli_run, None)):
        timed(fn, 2, settle=settle)  # warm-up: image and page caches
    # The pool refills in the background; like a chat user, each execution finds it refilled.
    warm_samples = timed(warm_run, args.runs, settle=wait_for_pool)
    cold_samples = timed(cold_run, args.runs)
    cli_samples = timed(cli_run, args.runs)
    _, warm_p50, _ = row("backend, warm pool", warm_samples)
    _, cold_p50, _ = row("backend, cold (SDK create/start)", cold_samples)
    _, cli_p50, _ = row("plain `docker run` (CLI)", cli_samples)

    wait_for_pool()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        latencies = list(pool.map(lambda _: timed(warm_run, 1)[0], range(args.concurrency)))
    wall_s = time.perf_counter() - started
    row(f"{args.concurrency} concurrent (each)", latencies)
    print(
        f"\nthroughput: {args.concurrency} executions in {wall_s:.2f} s = "
        f"{args.concurrency / wall_s:.1f}/s"
    )
    ratio = cli_p50 / warm_p50
    print(f"cold / warm: {cold_p50 / warm_p50:.1f}x   docker run / warm: {ratio:.1f}x\n")
    print(
        f"{'PASS' if warm_p50 < TARGET_WARM_P50_MS else 'FAIL'}: warm p50 {warm_p50:.1f} ms "
        f"< {TARGET_WARM_P50_MS:.0f} ms"
    )
    print(
        f"{'PASS' if ratio >= TARGET_RATIO else 'FAIL'}: warm is {ratio:.1f}x faster than "
        f"`docker run` (target {TARGET_RATIO:.0f}x)"
    )
    warm.close()
    cold.close()


if __name__ == "__main__":
    main()

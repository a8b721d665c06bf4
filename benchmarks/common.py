"""What the benchmark scripts share: timings with their percentiles, the verdict line, and the
text of a profile.

The scripts run from the repository root as ``.venv/bin/python benchmarks/<name>.py``; each puts
the repository on ``sys.path`` before importing this module.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Measurement:
    """The runs of one measurement: wall-clock ``seconds`` of each, and where taken the
    process's CPU seconds of each (``cpu``), which other work on a shared machine inflates
    less."""

    name: str
    seconds: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.seconds) * 1000

    @property
    def p95_ms(self) -> float:
        if len(self.seconds) < 2:
            return self.seconds[0] * 1000
        return statistics.quantiles(self.seconds, n=20, method="inclusive")[18] * 1000

    @property
    def cpu_p50_ms(self) -> float:
        return statistics.median(self.cpu) * 1000


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` by the nearest rank; NaN for none."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def verdict(label: str, passed: bool, figure: str) -> None:
    """Print one target's PASS/FAIL line with the figure it was judged on."""
    print(f"  {'PASS' if passed else 'FAIL'}  {label}: {figure}")


def profile_report(profiler: cProfile.Profile, sort: str, *restrictions: str | int) -> str:
    """A profile's table sorted by ``sort`` (``cumulative``, ``tottime``), cut by
    ``restrictions`` as ``pstats.Stats.print_stats`` takes them (a path pattern, a count)."""
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(sort).print_stats(*restrictions)
    return out.getvalue()

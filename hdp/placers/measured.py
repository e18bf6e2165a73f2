"""Choosing among placements by measurement: head to head, never the minimum of noisy samples.

Used by ``auto`` and by ``hsdag`` with a measured reward. The candidates (a device per tie group
each, named) run interleaved in one worker (:meth:`hdp.runtime.measure.Measurer.best_of`); the
fastest is kept only when it beats the preferred candidates beyond noise, otherwise the first
preferred candidate among those equal within noise (:func:`hdp.runtime.stats.select_best`). A
deadline bounds the whole comparison; :func:`h2h_seconds` predicts what one costs, so a caller can
leave out candidates that do not fit rather than overrun its budget.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hdp.runtime import stats


#: Rounds of a head-to-head at most: enough for a ±1-2 % interval at the noise of a loaded 2-core
#: host; beyond it a fast model's comparison would run for its whole time cap without a decision.
MAX_ROUNDS = 400


def plan(resolution: float = 0.03, max_seconds: float = 30.0) -> stats.SequentialPlan:
    """The sequential plan of a head-to-head: resolve ``resolution``, at most ``max_seconds`` of
    rounds and :data:`MAX_ROUNDS` rounds."""
    return stats.SequentialPlan(resolution=resolution, max_seconds=max(max_seconds, 1e-3), max_rounds=MAX_ROUNDS)


def h2h_seconds(compile_s: Sequence[float], run_s: Sequence[float], p: stats.SequentialPlan,
                warmup: int) -> float:
    """Predicted seconds of a head-to-head up to its plan's first look: every candidate compiled
    (``compile_s``) and warmed up, then ``min_rounds + discard`` rounds of one run each (``run_s``)."""
    return float(sum(compile_s) + (warmup + p.min_rounds + p.discard) * sum(run_s))


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


@dataclass
class Choice:
    """What :func:`choose` decided: ``winner`` indexes the named placements given; ``lines``
    say why, in words (medians, verdicts with confidence intervals, the rule that chose)."""

    winner: int
    lines: list[str] = field(default_factory=list)
    best: object = None  # hdp.runtime.measure.BestOf, when the comparison ran
    medians: dict[int, float] = field(default_factory=dict)  # index -> median seconds in the comparison
    seconds: float = 0.0

    def comparison(self, a: int, b: int) -> stats.Comparison | None:
        """Candidate ``b`` against ``a`` in the comparison (None when either did not run)."""
        if self.best is None:
            return None
        f = self.best.finalists
        if a not in f or b not in f:
            return None
        h = self.best.head
        i, j = f.index(a), f.index(b)
        if not (h.measurements[i].ok and h.measurements[j].ok):
            return None
        return h.compare(i, j)


def choose(measurer, problem, named: Sequence[tuple[str, np.ndarray]], preference: Sequence[int], *,
           p: stats.SequentialPlan, deadline: float | None) -> Choice:
    """Measure ``named`` placements (name, device per tie group) head to head and choose one;
    ``preference`` (indices, most preferred first) decides among those equal within noise. When
    nothing could be measured, the first preferred placement is kept, and the lines say so."""
    from hdp.runtime.measure import MeasureError, placed

    cands = [placed(problem.op_devices(gd), problem.devices, name) for name, gd in named]
    t0 = time.monotonic()
    try:
        best = measurer.best_of(cands, preference=list(preference), top=len(cands), plan=p, deadline=deadline)
    except MeasureError as e:
        keep = preference[0] if preference else 0
        return Choice(keep, [f"could not measure the candidates ({e}); kept {named[keep][0]}"],
                      seconds=time.monotonic() - t0)
    h = best.head
    medians = {best.finalists[i]: m.median for i, m in enumerate(h.measurements) if m.ok}
    meds = ", ".join(f"{n} {ms(m.median)}" for n, m in zip(h.names, h.measurements) if m.ok)
    # no wall time here: these lines go into the placement's info, which must not vary with the clock
    lines = [f"measured head to head, {h.rounds} interleaved rounds ({h.reason}); medians: {meds}"]
    for i, m in enumerate(h.measurements):
        if not m.ok:
            lines.append(f"  {h.names[i]}: {m.error}")
    lines += [f"  {c.text()}" for c in best.selection.comparisons]
    lines.append(f"  chosen: {best.selection.reason}")
    return Choice(best.winner, lines, best, medians, time.monotonic() - t0)

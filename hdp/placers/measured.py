"""Choosing among placements by measurement: head to head, never the minimum of noisy samples.

Used by ``auto`` and by ``hsdag`` with a measured reward. The candidates (a device per tie group
each, named) run interleaved in one worker (:meth:`hdp.runtime.measure.measurer.Measurer.best_of`); the
fastest is kept only when it beats the preferred candidates beyond noise, otherwise the first
preferred candidate among those equal within noise (:func:`hdp.runtime.measure.selection.select_best`). A
deadline bounds the whole comparison; :func:`h2h_seconds` predicts what one costs, so a caller can
leave out candidates that do not fit rather than overrun its budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from hdp.placement.simulate import Simulator
from hdp.placement.subgraphs import untangle
from hdp.runtime.measure import stats
from hdp.runtime.measure.measurement import MeasureError, placed

#: Seconds to compile one placement with HETERO, per op and per HETERO subgraph, when predicting
#: a comparison's cost before anything was measured (ResNet-50, 288 ops, on the 2-core VM at load
#: average ~6: one subgraph 0.85-1.1 s, 144 subgraphs 9.4 s).
COMPILE_PER_OP = 0.004
COMPILE_PER_SUBGRAPH = 0.06
#: Runs take as long as the simulator says times this (and the profile's whole-model scale, see
#: :func:`run_scale`), when predicting before measuring.
RUN_SLACK = 1.3


def compile_estimate(n_ops: int, subgraphs: int = 1) -> float:
    """Predicted seconds to compile a placement of ``n_ops`` ops in ``subgraphs`` HETERO subgraphs."""
    return COMPILE_PER_OP * n_ops + COMPILE_PER_SUBGRAPH * max(subgraphs, 1)


def run_scale(module, singles: Sequence[tuple[str, float]]) -> float:
    """How much slower the model ran whole in the profile than its per-op times add up to (>= 1),
    from ``(device, simulated seconds of every op on it)`` pairs: per-op profiles miss work between
    ops, so the simulator's figures are scaled by this when predicting how long measuring takes."""
    costs = getattr(module, "costs", None)
    if costs is None or not costs.measured_total:
        return 1.0
    ratios = [1.0]
    for dev, sim in singles:
        if sim > 0 and dev in costs.devices:
            total = costs.measured_total[costs.devices.index(dev)]
            if math.isfinite(total) and total > 0:
                ratios.append(total / sim)
    return max(ratios)


def first_estimate(ctx, measurer) -> float:
    """Seconds the first measured placement is expected to take before any was measured: a compile
    (:func:`compile_estimate`) and warm-up + timed runs at the best single device's simulated
    latency, scaled (:func:`run_scale`, :data:`RUN_SLACK`)."""

    p = ctx.problem
    sim = Simulator(p)
    singles = [(p.devices[j], t) for j, t in sim.singles().items()]
    run = min((t for _, t in singles), default=p.lower_bound()) * run_scale(ctx.module, singles) * RUN_SLACK
    return compile_estimate(p.n_ops) + (measurer.warmup + measurer.runs) * run


class MeasuredEvaluator:
    """``group_device -> median seconds`` through a Measurer, keeping every Measurement (its
    compile time and run times predict what a head-to-head of it will cost)."""

    def __init__(self, measurer, problem):
        self.m, self.p = measurer, problem
        self.rows: dict[bytes, object] = {}

    def __call__(self, gd: np.ndarray) -> float:
        # measured as it would be written: a placement that tangles a state cannot run under HETERO
        r = self.m.measure(self.p.op_devices(untangle(self.p, gd)[0]), self.p.devices)
        self.rows[np.ascontiguousarray(gd, np.int16).tobytes()] = r
        if not r.ok:
            raise MeasureError(r.error)
        return r.median

    def cost(self, gd: np.ndarray) -> tuple[float, float]:
        """(compile seconds, median run seconds) of a placement measured before ((0, inf) if not)."""
        r = self.rows.get(np.ascontiguousarray(gd, np.int16).tobytes())
        if r is None or not r.ok:
            return 0.0, math.inf
        return r.compile_seconds, r.median


#: Rounds of a head-to-head at most: enough for a ±1-2 % interval at the noise of a loaded 2-core
#: host; beyond it a fast model's comparison would run for its whole time cap without a decision.
MAX_ROUNDS = 400


def plan(resolution: float = 0.03, max_seconds: float = 30.0) -> stats.SequentialPlan:
    """The sequential plan of a head-to-head: resolve ``resolution``, at most ``max_seconds`` of
    rounds and :data:`MAX_ROUNDS` rounds."""
    return stats.SequentialPlan(resolution=resolution, max_seconds=max(max_seconds, 1e-3), max_rounds=MAX_ROUNDS)


def h2h_seconds(compile_s: Sequence[float], run_s: Sequence[float], p: stats.SequentialPlan,
                warmup: int) -> float:
    """Predicted seconds of a head-to-head up to its plan's first look in each of its blocks: every
    candidate compiled (``compile_s``) and warmed up, then ``min_rounds + discard`` rounds of one
    run each (``run_s``), once per block."""
    return float(p.blocks * (sum(compile_s) + (warmup + p.min_rounds + p.discard) * sum(run_s)))


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


@dataclass
class Choice:
    """What :func:`choose` decided: ``winner`` indexes the named placements given; ``lines``
    say why, in words (medians, verdicts with confidence intervals, the rule that chose)."""

    winner: int
    lines: list[str] = field(default_factory=list)
    best: object = None  # hdp.runtime.measure.measurer.BestOf, when the comparison ran
    medians: dict[int, float] = field(default_factory=dict)  # index -> median seconds in the comparison
    seconds: float = 0.0

    def comparison(self, a: int, b: int) -> stats.Comparison | None:
        """Candidate ``b`` against ``a`` in the comparison, at the family level of its report (None
        when either did not run)."""
        if self.best is None:
            return None
        f = self.best.finalists
        if a not in f or b not in f:
            return None
        h = self.best.head
        i, j = f.index(a), f.index(b)
        if not (h.measurements[i].ok and h.measurements[j].ok):
            return None
        return h.compare(i, j, family=h.family)


def choose(measurer, problem, named: Sequence[tuple[str, np.ndarray]], preference: Sequence[int], *,
           p: stats.SequentialPlan, deadline: float | None, anchored: bool = False) -> Choice:
    """Measure ``named`` placements (name, device per tie group) head to head and choose one;
    ``preference`` (indices, most preferred first) decides among those equal within noise. When
    nothing could be measured, the first preferred placement is kept, and the lines say so.
    ``anchored``: stop measuring once nothing can beat the first preferred placement by the plan's
    resolution (see :meth:`hdp.runtime.measure.measurer.Measurer.best_of`)."""

    cands = [placed(problem.op_devices(gd), problem.devices, name) for name, gd in named]
    t0 = time.monotonic()
    try:
        best = measurer.best_of(cands, preference=list(preference), top=len(cands), plan=p, deadline=deadline,
                               anchored=anchored)
    except MeasureError as e:
        keep = preference[0] if preference else 0
        return Choice(keep, [f"could not measure the candidates ({e}); kept {named[keep][0]}"],
                      seconds=time.monotonic() - t0)
    h = best.head
    medians = {best.finalists[i]: m.median for i, m in enumerate(h.measurements) if m.ok}
    meds = ", ".join(f"{n} {ms(m.median)}" for n, m in zip(h.names, h.measurements) if m.ok)
    # no wall time here: these lines go into the placement's info, which must not vary with the clock.
    # Each other candidate is compared once, with the one kept, at the level the first line states.
    blk = f" in {h.n_blocks} blocks" if h.n_blocks > 1 else ""
    load = f"; {h.load_note()}" if h.load is not None and h.loaded else ""
    lines = [f"measured head to head, {h.rounds} interleaved rounds{blk} ({h.reason}); latency medians: {meds}; "
             f"{h.ci_note()}{load}"]
    for i, m in enumerate(h.measurements):
        if not m.ok:
            lines.append(f"  {h.names[i]}: {m.error}")
    lines += [f"  {c.b} vs {c.a}: {c.describe(level=False)}" for c in best.selection.comparisons]
    lines.append(f"  kept {best.selection.reason}")
    return Choice(best.winner, lines, best, medians, time.monotonic() - t0)

"""``auto``'s last stage: the HSDAG policy warm-started from the kept candidate, trained on
measured (or, on a modeled target, simulated) latency, and kept only if it beats the winner
head to head (:func:`refine_measured`, :func:`train`; see :mod:`hdp.placers.auto`)."""

from __future__ import annotations

import math
import sys
import time

from hdp.learn.config import TrainConfig
from hdp.learn.graph import build_learn_graph
from hdp.placement.simulate import Simulator
from hdp.placers import measured, note_time
from hdp.placers.measured import MeasuredEvaluator, ms
from hdp.placers.options import Auto

#: Measured refinement runs only if the budget leaves time for this many placements (the warm
#: start's included) besides its final comparison.
MIN_LEARN_EVALS = 5
#: Seconds to import torch and torch_geometric for the learning stage, when not imported yet (6.2-7.7 s
#: in the partition rows of bench/results/auto-virtual-2026-11-30 at load 1-2 on the 2-core VM).
IMPORT_SECONDS = 8.0
#: The gain threshold of the learning stage's early stop is at most this (relative), however noisy.
MAX_NOISE = 0.2


def time_left(deadline: float | None) -> float:
    return math.inf if deadline is None else deadline - time.monotonic()


def train(o: Auto, ctx, win, evaluate, deadline, *, min_gain: float, reserve: float):
    """The HSDAG policy warm-started from ``win``, trained on ``evaluate`` (None: the simulator)."""
    t0 = time.monotonic()
    # lazy: imports torch (about 1.5 s), needed only when a learned method runs
    from hdp.learn.trainer import train

    note_time("auto: importing torch", time.monotonic() - t0)
    t0 = time.monotonic()
    p = ctx.problem
    if evaluate is None:
        evaluate = Simulator(p).latency
    lg = build_learn_graph(ctx.module, p)
    cfg = TrainConfig.of(o, deadline=deadline, reserve_evals=reserve, min_gain=min_gain, seed=ctx.seed,
                         progress=False, top=4)
    note_time("auto: learning setup", time.monotonic() - t0)
    t0 = time.monotonic()
    r = train(lg, evaluate, cfg, warm_start=(win.name, win.gd))
    note_time("auto: refinement", time.monotonic() - t0)
    return r


def refine_measured(o: Auto, ctx, measurer, win, st: dict | None, lines: list[str], deadline):
    """Stage 3 on a real target: (device per group, source, median) of a learned placement that
    beat the winner head to head, or None."""

    if st is None:
        lines.append("measured refinement skipped: the winner was not measured, so a gain could not be judged")
        return None
    runs = measurer.runs
    per_eval = st["compile"] + (measurer.warmup + runs) * st["median"]
    plan = measured.plan(o.resolution)
    final_cost = measured.h2h_seconds([st["compile"]] * 2, [st["median"]] * 2, plan, measurer.warmup)
    left = time_left(deadline)
    importing = 0.0 if "torch" in sys.modules else IMPORT_SECONDS  # an import cannot stop at the deadline
    need = importing + final_cost + MIN_LEARN_EVALS * per_eval
    if left < need:
        lines.append(f"measured refinement skipped: {left:.1f} s left of the budget, it needs about {need:.1f} s "
                     f"({per_eval:.1f} s per placement" + (f", {importing:g} s to import torch)" if importing else ")"))
        return None
    # the noise of one measured median: ~2 standard errors of the difference of two medians of
    # `runs` runs, from the winner's interquartile range in the comparison
    rel_iqr = (st["q3"] - st["q1"]) / st["median"]
    noise = min(max(0.01, 2.63 * rel_iqr / math.sqrt(runs)), MAX_NOISE)
    ev = MeasuredEvaluator(measurer, ctx.problem)
    r = train(o, ctx, win, ev, None if deadline is None else deadline, min_gain=noise,
               reserve=final_cost / max(per_eval, 1e-9))
    base = ev.cost(win.gd)[1]
    head = (f"measured refinement (hsdag warm-started from {win.name}, {runs} runs per placement): "
            f"{r.evaluations} distinct placements measured, stopped: {_stopped(r.stopped, o.patience, noise)}")
    key = win.gd.tobytes()
    learned = [(s, gd, lat) for s, gd, lat in r.top if gd.tobytes() != key and s in ("sample", "greedy")]
    if not learned or not math.isfinite(base) or learned[0][2] >= base * (1 - noise):
        best = (f"best learned {ms(learned[0][2])} vs {win.name} {ms(base)}, each the median of its {runs} runs in "
                f"this refinement (the host's load then, not the head-to-head's)" if learned and math.isfinite(base)
                else "nothing measured")
        lines.append(f"{head}; {best}: no gain beyond noise (±{noise * 100:.1f} %); kept {win.name}")
        return None
    src, gd, lat = learned[0]
    left = time_left(deadline)
    c, t = ev.cost(gd)
    need = measured.h2h_seconds([st["compile"], c], [st["median"], t], plan, measurer.warmup)
    if need > left:
        lines.append(f"{head}; best learned {ms(lat)} vs {win.name} {ms(base)} (medians of {runs} runs here), but no "
                     f"time left to confirm it head to "
                     f"head ({left:.1f} s left, needs {need:.1f} s); kept {win.name}")
        return None
    if deadline is not None:
        plan = measured.plan(o.resolution, max_seconds=min(plan.max_seconds, max(left - c - st["compile"], 1e-3)))
    t0 = time.monotonic()
    ch = measured.choose(measurer, ctx.problem, [(win.name, win.gd), ("learned", gd)], [0], p=plan,
                         deadline=deadline, anchored=True)
    note_time("auto: final head-to-head", time.monotonic() - t0)
    cmp_ = ch.comparison(0, 1)
    if ch.winner == 1 and cmp_ is not None:
        lines.append(f"{head}; measured refinement {ms(ch.medians[1])}, faster than {win.name} beyond noise "
                     f"head to head (below); kept it")
        lines += ch.lines
        return gd, f"learned ({src})", ch.medians[1]
    verdict = "below" if cmp_ is not None else "not measured"
    lines.append(f"{head}; best learned {ms(lat)} by its own median, head to head ({verdict}): "
                 f"no gain beyond noise; kept {win.name}")
    lines += ch.lines
    return None


def _stopped(why: str, patience: int, noise: float) -> str:
    return {"no gain": f"no further gain beyond noise (±{noise * 100:.1f} %) in the last {patience} placements "
                       f"sampled (repeats included)",
            "seconds": "the budget", "done": "all episodes"}.get(why, why)

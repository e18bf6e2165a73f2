"""``hsdag``: the learned placer (GNN + graph parsing network + policy gradient), see hdp.learn.

``--method hsdag`` or ``hsdag:simulate`` / ``hsdag:measure`` (the reward's evaluator). Options are
the fields of :class:`hdp.placers.options.Hsdag`:

=============  ==========  ===============================================================
option         default     meaning
=============  ==========  ===============================================================
reward         auto        ``simulate`` (cost-model simulator), ``measure`` (HETERO runs), or
                           ``auto``: measure when every target device is real, else simulate
measure_runs   10          timed runs per measured placement (median)
budget         120         wall-clock seconds for the whole placement (warm start, training and the
                           final head-to-head), checked inside episodes; 0 = no limit
placements     0           max placements evaluated; 0 = no limit
episodes       25          policy updates
samples        20          placements per episode
lr             1e-3        Adam learning rate
hidden         128         hidden width
warm_start     optimal     ``none``, or a placer (``optimal``, ``heft``) to evaluate and imitate first
policy         ""          checkpoint to resume (same model) or whose weights to reuse
checkpoint     ""          checkpoint path to write
report         ""          directory for curve.csv / curve.png / summary.json
algo           reinforce   ``reinforce`` or ``ppo``
entropy        0.01        entropy bonus weight (0 disables it)
reward_shape   neglog      ``neglog`` (-log latency) or ``inverse`` (1/latency)
baseline       batch       advantage baseline: ``batch`` mean or ``ema``
cost_aware     true        feed the cost table to the network (false: features only, as published)
timeout        120         seconds per measured placement before its worker is killed (--timeout)
=============  ==========  ===============================================================

Each option's bounds are declared on its field (:class:`hdp.placers.options.Hsdag`); the training
options share theirs with :class:`hdp.learn.config.TrainConfig`, which they are passed to as they are.

The network places the tie groups of the placement problem (grouped further by the coarse
stage), so every placement it samples respects the legality rules. Every single-device placement
is evaluated first as a candidate. Torch is imported only when the method runs.

The final choice: with the simulator as the reward, the best placement seen (the simulator is
deterministic). With a measured reward, the best seen is a minimum over noisy samples, which a
lucky sample wins; so the best single device, the warm start and the two best learned placements
(those whose median beat the best single device's) are measured again head to head
(:mod:`hdp.placers.measured`), and a learned placement is kept only when it beats the preferred
ones — the best single device, then the warm start — beyond noise. Training stops early enough
to leave time for that comparison within ``budget``; when even so it does not fit, the preferred
candidate is kept. Wall times are reported through :func:`hdp.placers.note_time`, never in
``info`` (same input, same bytes).
"""

from __future__ import annotations

import math
import time

import numpy as np

from hdp.base.errors import InputError
from hdp.learn.config import TrainConfig
from hdp.learn.graph import build_learn_graph
from hdp.learn.harness import problem_cost
from hdp.placers import PlaceContext, Placed, measured, note_time, place
from hdp.placers.measured import MeasuredEvaluator, first_estimate
from hdp.placers.options import HeteroAuto, Hsdag, method_from
from hdp.runtime.measure.measurer import Measurer

#: learned placements measured again, head to head, with the preferred ones
FINAL_LEARNED = 2


def _reward(o: Hsdag, ctx: PlaceContext) -> str:
    if o.reward != "auto":
        return o.reward
    return "measure" if ctx.target is not None and ctx.target.is_real else "simulate"


def _make_measurer(o: Hsdag, ctx: PlaceContext):
    """The Measurer of a measured reward (tests replace it with a fake)."""

    if ctx.target is None:
        raise InputError("hsdag reward 'measure' needs a target")
    return Measurer(ctx.module, ctx.target, runs=o.measure_runs, timeout=ctx.timeout)


def _make_evaluator(o: Hsdag, ctx: PlaceContext, reward: str):
    """(``group_device -> seconds``, the Measurer behind it or None for the simulator)."""
    if reward == "simulate":
        return problem_cost(ctx.problem), None  # the problem's objective: latency, period or makespan
    m = _make_measurer(o, ctx)
    return MeasuredEvaluator(m, ctx.problem), m


def final_choice(measurer, ev: MeasuredEvaluator, problem, r, candidates, warm, deadline: float | None,
                 warmup: int) -> tuple[np.ndarray, str, float | None, list[str]]:
    """hsdag's final placement under a measured reward: (device per group, source, its median or
    None, report lines). See the module docstring."""

    def med(gd) -> float:
        return ev.cost(gd)[1]

    singles = sorted((x for x in ((n, gd, med(gd)) for n, gd in candidates) if math.isfinite(x[2])),
                     key=lambda x: x[2])
    pref = singles[:1]
    bar = pref[0][2] if pref else math.inf
    seen = {np.asarray(gd, np.int16).tobytes() for _, gd, _ in singles}
    rivals = []
    if warm is not None and math.isfinite(med(warm[1])) and np.asarray(warm[1], np.int16).tobytes() not in seen:
        rivals.append((f"warm:{warm[0]}", np.asarray(warm[1], np.int16), med(warm[1])))
        seen.add(rivals[0][1].tobytes())
    learned = []  # distinct placements, named apart (the head-to-head needs distinct names)
    for s, gd, lat in r.top:
        if len(learned) < FINAL_LEARNED and s in ("sample", "greedy", "resumed") and gd.tobytes() not in seen:
            seen.add(gd.tobytes())
            learned.append((f"{s} {len(learned) + 1}", gd, lat))
    rivals += learned
    rivals = [x for x in rivals if x[2] < bar]
    if not pref:
        if not rivals:
            return r.best_device_of, r.best_source, r.best_latency, [
                f"kept {r.best_source}: the only placements measured"]
        pref, rivals = rivals[:1], rivals[1:]
    if not rivals:
        src, gd, lat = pref[0]
        return gd, src, lat, [f"kept {src} ({measured.ms(lat)}): no other placement's median beat it"]
    final = pref + rivals
    p = measured.plan()
    left = math.inf if deadline is None else deadline - time.monotonic()
    while len(final) > 1:
        costs = [ev.cost(x[1]) for x in final]
        if measured.h2h_seconds([c for c, _ in costs], [t for _, t in costs], p, warmup) <= left:
            break
        final.pop()
    if len(final) < 2:
        src, gd, lat = pref[0]
        return gd, src, lat, [f"kept {src}: no time left in the budget for a head-to-head with "
                              f"{', '.join(x[0] for x in rivals)} (a placement other than the best single "
                              f"device is kept only when it wins one)"]
    if deadline is not None:
        p = measured.plan(max_seconds=min(p.max_seconds, left))
    # preferred among those equal within noise: the best single device, then the warm start
    order = [i for i, x in enumerate(final) if x[0].startswith(("single:", "warm:"))]
    ch = measured.choose(measurer, problem, [(x[0], x[1]) for x in final], order or [0], p=p, deadline=deadline)
    note_time("hsdag: final head-to-head", ch.seconds)
    src, gd, _ = final[ch.winner]
    return gd, src, ch.medians.get(ch.winner), ch.lines


def hsdag(o: Hsdag, ctx: PlaceContext) -> Placed:
    """HSDAG: GNN + graph parsing + policy gradient on simulated or measured latency (hsdag[:measure])."""
    p = ctx.problem
    reward = _reward(o, ctx)
    if p.n_devices == 1:
        return Placed(p.single(0), {"message": f"target has one device ({p.devices[0]}): every op on it, no training"})
    if p.n_groups == 0:
        return Placed(np.zeros(0, np.int16), {"message": "empty graph"})
    t0 = time.monotonic()
    try:
        # lazy: imports torch (about 1.5 s), needed only when a learned method runs
        from hdp.learn.trainer import train
    except ImportError as e:
        raise InputError(f"method 'hsdag' needs torch and torch_geometric: {e}") from None
    note_time("hsdag: import torch, torch_geometric", time.monotonic() - t0)

    deadline = ctx.started + o.budget if o.budget else None
    t0 = time.monotonic()
    lg = build_learn_graph(ctx.module, p, cost_aware=o.cost_aware)
    candidates = [(f"single:{d}", p.single(j)) for j, d in enumerate(p.devices) if p.allowed[:, j].all()]
    warm = None
    if o.warm_start != "none":
        warm_opts = method_from(o.warm_start)
        if isinstance(warm_opts, Hsdag) or warm_opts.name() == "auto":
            raise InputError(f"hsdag option 'warm_start' cannot be {warm_opts.name()}")
        kind = p.objective.kind()
        if kind not in warm_opts.served(ctx.target):
            if o.warm_start != "optimal":  # asked for by name (not the default): say so rather than swap it
                raise InputError(f"hsdag option 'warm_start': {o.warm_start} cannot place for the {kind} "
                                 f"objective; give warm_start=heft")
            warm_opts = method_from("heft")  # the default (optimal) is exact for sequential costs only
        warm = (warm_opts.label(), place(warm_opts, ctx).group_device)
    evaluate, measurer = _make_evaluator(o, ctx, reward)
    ev = evaluate if measurer is not None else None
    if measurer is not None:
        measurer.loaded()  # start the worker and read the model now, so that evaluations are predictable
    n_final = (1 + (warm is not None) + FINAL_LEARNED) if measurer is not None else 0
    note_time("hsdag: graph and warm start", time.monotonic() - t0)
    cfg = TrainConfig.of(
        o, max_placements=o.placements, deadline=deadline, reserve_evals=n_final, seed=ctx.seed,
        eval_estimate=first_estimate(ctx, measurer) if measurer is not None else 0.0,
        top=len(candidates) + 2 + FINAL_LEARNED,
        report_dir=o.report or None, checkpoint=o.checkpoint or None, policy=o.policy or None)
    try:
        r = train(lg, evaluate, cfg, warm_start=warm, candidates=candidates)
        note_time("hsdag: training", r.seconds)
        if r.best_device_of is None and r.evaluations == 0 and r.stopped == "seconds":
            name, gd = warm if warm is not None else candidates[0] if candidates else ("hetero-auto", None)
            if gd is None:
                gd = place(HeteroAuto(), ctx).group_device
            return Placed(np.asarray(gd, np.int16), {
                "best_source": name, "best_latency_s": "", "reward": reward, "placements_evaluated": 0,
                "stopped": "seconds", "warm_start": warm[0] if warm else "none",
                "message": f"hsdag: the budget ({o.budget:g} s) ran out before the first placement could be "
                           f"evaluated; kept {name}, unmeasured (raise --budget)"})
        if r.best_device_of is None:
            raise InputError(f"hsdag: every placement failed to evaluate ({r.evaluations} tried, reward "
                             f"'{reward}'); check the target and the model")
        best, source, latency = r.best_device_of, r.best_source, r.best_latency
        final_lines: list[str] = []
        if measurer is not None:
            best, source, latency, final_lines = final_choice(
                measurer, ev, p, r, candidates, warm, deadline, measurer.warmup)
    finally:
        if measurer is not None:
            measurer.close()
    info = {
        "best_latency_s": "" if latency is None else f"{latency:.6g}", "best_source": source, "reward": reward,
        "placements_evaluated": r.evaluations, "samples": r.samples, "failures": r.failures,
        "episodes": r.episodes, "groups": r.groups, "stopped": r.stopped,
        "algo": o.algo, "resumed": r.resumed, "warm_start": warm[0] if warm else "none",
    }
    if measurer is not None:
        info["sampled_best"] = f"{r.best_source} {r.best_latency:.6g}"  # the minimum over noisy samples
        info["final"] = "\n".join(final_lines)
    return Placed(np.asarray(best, np.int16), info)

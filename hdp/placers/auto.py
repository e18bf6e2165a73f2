"""``auto``: the default method — the best cheap answer first, measured learning only where it can win.

Stages, all within ``budget`` seconds counted from the start of placing (the profile before it is
not counted; ``hdp compile`` states it separately):

1. **Candidates** (well under a second each, scored by the simulator): every single device that
   can run the whole model, ``optimal``, ``heft``, ``hetero-auto``, and ``optimal`` / ``heft``
   refined by greedy boundary moves (:mod:`hdp.placers.refine`); for the throughput objective also
   the best two-stage pipeline per ordered device pair (:func:`pipeline_candidates`); duplicates
   are dropped.
2. **On a real target, measured head to head** (:mod:`hdp.placers.measured`): the ``singles``
   best single devices and the ``top`` best mixed candidates by simulation (mixed ones simulated
   more than :data:`MIXED_CUT` × the best single device are left out: no simulator error seen
   makes up that much) run interleaved until none can beat the most preferred one by
   ``resolution`` (a one-sided question, answered in about a quarter of the rounds a two-sided
   ``resolution`` interval needs), or the differences are resolved to ``resolution``.
   The preference order is single devices first (by simulated latency), then mixed candidates:
   the fastest is kept only when it beats every more preferred candidate beyond noise, so the
   best single device is kept whenever the others are equal within noise. When the budget cannot
   hold even the shortest comparison, the lowest simulated latency is kept and the report says so.
3. **Measured refinement** (real targets; ``learn=yes`` anywhere): the HSDAG policy, warm-started
   from the winner by imitation, samples placements measured with ``measure_runs`` runs each,
   until the budget (less the time of a final comparison) runs out, or ``patience`` placements
   in a row bring no gain beyond noise (the noise of one measured median, from the winner's spread
   in the comparison). Its best placement is accepted only if it beats the winner head to head
   beyond noise.

Under ``--objective throughput`` on a real target, stage 2 serves instead (:func:`_served`): the
best single device, the split with the fewest subgraphs within :data:`SERVED_TIE` of the simulated
best, the simulated best, the cuts next to the best two-stage pipeline's and the next ``top`` mixed
candidates, each with the objective's requests in flight beside the first device alone, within the
budget; each is kept only if it serves faster beyond noise than the one kept before it (so the
single device stays unless a split beats it, and a split with more subgraphs must beat a simpler
one). Stage 3 does not run (the learner's reward is one request's latency).

On a modeled target the simulator is the truth and ``optimal`` is exact for its cost model: stage 2
is the lowest simulated latency (ties: the same preference order), and stage 3 runs only with
``learn=yes`` (``--method auto:yes``), accepted when the simulator says it is faster.

``info["report"]`` says what each stage contributed (simulated or measured, with confidence
intervals); wall times go to :func:`hdp.placers.note_time`, never into ``info``.

=============  =======  ===================================================================
option         default  meaning
=============  =======  ===================================================================
learn          auto     ``auto`` (learn on real targets), ``yes``, ``no``
budget         30       seconds for the whole placement; 0 = no limit
top            2        mixed candidates measured head to head
singles        2        single-device candidates measured head to head
resolution     0.05     head to head: measure until no gain this large over the preferred one is possible
measure_runs   5        timed runs per placement measured while learning
patience       8        stop learning after this many placements without a gain beyond noise
episodes       50       policy updates at most
samples        8        placements per update
hidden         64       width of the policy network
lr             1e-3     its learning rate
=============  =======  ===================================================================
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass

import numpy as np

from hdp.base.errors import InputError
from hdp.placement.memory import size_text
from hdp.placement.objective import Latency
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, Placed, measured, note_head, note_time, place
from hdp.placers import plan as plans
from hdp.placers.auto_refine import refine_measured, time_left, train
from hdp.placers.measured import RUN_SLACK, compile_estimate, ms, run_scale
from hdp.placers.options import Auto, Heft, HeteroAuto, Optimal
from hdp.placers.pipelines import neighbour_cuts, pipeline_candidates
from hdp.placers.refine import refine
from hdp.runtime.measure.measurement import MeasureError
from hdp.runtime.measure.measurer import Measurer
from hdp.runtime.serve.report import sim_vs_measured

#: Mixed candidates simulated slower than this × the best single device are not measured.
MIXED_CUT = 1.2
#: Warm-up runs of every measured placement.
WARMUP = 2
#: Ties between simulated latencies (relative).
SIM_TIE = 1e-9


@dataclass
class Cand:
    name: str
    gd: np.ndarray  # device per tie group
    sim: float  # simulated seconds
    single: bool
    also: tuple[str, ...] = ()  # other candidates that gave the same placement
    subgraphs: int = 1  # HETERO subgraphs (simulated)

    def compile_estimate(self, n_ops: int) -> float:
        return compile_estimate(n_ops, self.subgraphs)

    @property
    def label(self) -> str:
        return self.name + (f" (= {', '.join(self.also)})" if self.also else "")




def candidates(o: Auto, ctx: PlaceContext, deadline: float | None) -> list[Cand]:
    """The cheap candidates, in preference order: single devices by simulated latency, then the
    others by simulated latency (duplicates dropped, the first name kept)."""


    p = ctx.problem
    sim = Simulator(p)
    named: list[tuple[str, np.ndarray, bool]] = [
        (f"single:{d}", p.single(j), True) for j, d in enumerate(p.devices)
        if p.allowed[:, j].all() and sim.feasible(p.single(j))]
    left = time_left(deadline)
    opt = Optimal() if left == math.inf else Optimal(time_limit=max(1.0, min(60.0, 0.25 * left)))
    failed: InputError | None = None
    for label, opts in (("optimal", opt), ("heft", Heft()), ("hetero-auto", HeteroAuto())):
        sub = ctx
        if label == "optimal" and p.objective.kind() not in Optimal.serves:
            # the sequential optimum, a candidate priced like the others by the objective
            sub = dataclasses.replace(ctx, problem=p.with_objective(Latency()))
        try:
            gd = place(opts, sub).group_device
        except InputError as e:
            # Over a device's memory, or (optimal) no placement within its share of the time: not
            # a candidate. Raised only when no candidate is left at all.
            failed = failed or e
            continue
        named.append((label, gd, False))
        if label != "hetero-auto":
            better, _, _, moves = refine(p, gd)
            if moves:
                named.append((f"{label}+refine", better, False))
    if p.objective.kind() == "throughput":
        named += pipeline_candidates(p, sim)
    if not named and failed is not None:
        raise failed
    seen: dict[bytes, Cand] = {}
    for name, gd, single in named:
        key = np.asarray(gd, np.int16).tobytes()
        if key in seen:
            seen[key].also += (name,)
            continue
        nsub = sim.terms(gd)[2]
        seen[key] = Cand(name, np.asarray(gd, np.int16), sim.cost(gd), single, (), max(nsub, 1))
    return sorted(seen.values(), key=lambda c: (not c.single, c.sim))


def left_out(p) -> list[str]:
    """Why each device that is not a single-device candidate is not one: an op it does not run, or
    the memory it cannot hold (``single:GPU: needs 512 MiB, holds 200 MiB``)."""
    sim = Simulator(p)
    out = []
    for j, d in enumerate(p.devices):
        if not p.allowed[:, j].all():
            out.append(f"single:{d} (it does not run every op)")
            continue
        over = [o for o in sim.over(p.single(j)) if o[0] == d] or sim.over(p.single(j))
        if over:
            out.append(f"single:{d} ({over[0][0]} cannot hold the model: needs {size_text(over[0][1])}, "
                       f"holds {size_text(over[0][2])})")
    return out


def _simulated_best(cands: list[Cand]) -> Cand:
    """The lowest simulated latency; among ties, the first in preference order."""
    low = min(c.sim for c in cands)
    return next(c for c in cands if c.sim <= low * (1 + SIM_TIE))


def auto(o: Auto, ctx: PlaceContext) -> Placed:
    """The default placement (see the module docstring)."""
    p = ctx.problem
    if p.n_devices == 1:
        return Placed(p.single(0), {"message": f"target has one device ({p.devices[0]}): every op on it"})
    if p.n_groups == 0:
        return Placed(np.zeros(0, np.int16), {"message": "empty graph"})
    deadline = ctx.started + o.budget if o.budget else None
    real = ctx.target is not None and ctx.target.is_real
    t0 = time.monotonic()
    cands = candidates(o, ctx, deadline)
    note_time("auto: candidates", time.monotonic() - t0)
    lb = p.lower_bound()
    what = "simulated" if p.objective.kind() == "latency" else f"simulated seconds per request, {p.objective.label()}"
    missing = left_out(p)
    lines = [f"candidates ({what}): " + ", ".join(f"{c.label} {ms(c.sim)}" for c in cands)
             + (f"; lower bound {ms(lb)}" if p.objective.kind() == "latency" else "")  # it bounds latency only
             + (f"; not candidates: {'; '.join(missing)}" if missing else "")]
    info: dict = {"candidates": ",".join(c.name for c in cands)}
    if p.objective.kind() == "throughput":
        return _throughput(o, ctx, cands, lines, info, deadline, real)
    if p.objective.kind() != "latency":
        return _by_objective(ctx, cands, lines, info)
    if not real:
        return _modeled(o, ctx, cands, lines, info, deadline)
    measurer = _measurer(o, ctx)
    try:
        win, stats_ = _head_to_head(o, ctx, measurer, cands, lines, deadline)
        info["stages"] = "candidates,head-to-head" if stats_ else "candidates"
        if stats_ is not None:
            info["measured_s"] = f"{stats_['median']:.6g}"
        gd, src = win.gd, win.name
        if o.learns(ctx.target):
            learned = refine_measured(o, ctx, measurer, win, stats_, lines, deadline)
            if learned is not None:
                gd, src = learned[0], learned[1]
                info["measured_s"] = f"{learned[2]:.6g}"
            info["stages"] += ",refinement"
    finally:
        measurer.close()
    info.update(chosen=src, report="\n".join(lines))
    return Placed(gd, info)


def _measurer(o: Auto, ctx: PlaceContext):
    """The Measurer of the measured stages (tests replace it with a fake)."""

    return Measurer(ctx.module, ctx.target, runs=o.measure_runs, warmup=WARMUP, timeout=ctx.timeout)


def _throughput(o: Auto, ctx, cands: list[Cand], lines: list[str], info: dict, deadline, real: bool) -> Placed:
    """Every shape of serving plan searched (:mod:`hdp.placers.plan`); ``plans=no``: a placement as
    before, the best plan named beside it; ``plans=yes``: a plan, on a modeled target the simulator's
    (:func:`hdp.placers.plan.kept`), on a real one served with the placements (:func:`_served`)."""
    left = time_left(deadline)
    t0 = time.monotonic()
    found = plans.search(ctx, time_limit=60.0 if left == math.inf else max(2.0, min(60.0, 0.25 * left)))
    note_time("auto: plans", time.monotonic() - t0)
    lines.append(plans.summary(found))
    best, why = plans.kept(found)
    if o.plans == "no":
        placed = _served(o, ctx, cands, lines, info, deadline) if real else _by_objective(ctx, cands, lines, info)
        note = plans.better_plan(found, best, placed.group_device)
        if note:
            placed.info.update(report=placed.info["report"] + "\n" + note, best_plan=best.plan.describe(ctx.problem.devices))
        return placed
    if real:
        return _served(o, ctx, cands, lines, info, deadline, found)
    return _kept_plan(ctx, cands, found, lines, info, "a modeled target: the simulator is the measure here")


def _kept_plan(ctx, cands: list[Cand], found, lines: list[str], info: dict, where: str) -> Placed:
    """The plan :func:`hdp.placers.plan.kept` keeps on the simulator's word (``where`` says why
    that is the word here)."""
    best, why = plans.kept(found)
    if best.plan is None:
        return _by_objective(ctx, cands, lines, info)
    lines.append(plans.kept_line(found, best, why, where))
    info.update(plans.plan_info(found, best))
    info.update(Simulator(ctx.problem).report(plans.representative(best)))
    info.update(stages="candidates,plans", chosen=f"plan:{best.plan.shape}", report="\n".join(lines))
    return Placed(plans.representative(best), info)


def _by_objective(ctx, cands: list[Cand], lines: list[str], info: dict) -> Placed:
    """An objective other than latency: the lowest simulated cost. The measured stages compare
    single-request latencies, and the learner's reward is one, so neither runs; ``hdp evaluate
    --objective throughput`` measures the result."""
    win = _simulated_best(cands)
    real = ctx.target is not None and ctx.target.is_real
    lines.append(f"kept {win.label} ({ms(win.sim)} per request simulated): the lowest simulated cost per request "
                 f"under {ctx.problem.objective.label()} "
                 + ("(simulated only: `hdp evaluate` measures this objective)" if real
                    else "(a modeled target: the simulator is the measure here)"))

    info.update(Simulator(ctx.problem).report(win.gd))
    info.update(stages="candidates", chosen=win.name, report="\n".join(lines))
    return Placed(np.asarray(win.gd, np.int16), info)


#: Windows each side of one served candidate (beside the plain first device).
SERVED_WINDOWS = 8
#: Under throughput, a mixed candidate with fewer HETERO subgraphs than the simulated best and a
#: simulated period within this share of it is served first, and preferred: the simulator's
#: hand-off per subgraph does not describe placements with several stages on one device (served
#: with two requests in flight on virtual-2x1, alternating blocks of ResNet-50 and Inception-V3 came
#: 20-30 % below their simulated rate, two-stage pipelines within 4-6 %; BERT-base's optimum, four
#: subgraphs balanced to 0.1 %, served 3 % slower than the plain compile's two streams where its
#: simulation said 0.5 %).
SERVED_TIE = 0.02


def _simplest(cands: list[Cand], best: Cand) -> Cand:
    """The mixed candidate with the fewest subgraphs (then the lowest simulated cost) within
    :data:`SERVED_TIE` of ``best``'s simulated cost; ``best`` itself when none has fewer."""
    near = [c for c in cands if not c.single and c.sim <= best.sim * (1 + SERVED_TIE)]
    return min(near, key=lambda c: (c.subgraphs, c.sim), default=best) if not best.single else best


def _served(o: Auto, ctx, cands: list[Cand], lines: list[str], info: dict, deadline, found=None) -> Placed:
    """Throughput on a real target, in preference order: the best single device, the split with the
    fewest subgraphs near the simulated best (:func:`_simplest`), the simulated best, the cuts next
    to the best two-stage pipeline's and the next ``top`` mixed candidates by simulation are served
    with the objective's requests in flight, each beside the compile of the first device that runs
    the whole model (as the target configures it), windows alternating
    (:meth:`hdp.runtime.measure.measurer.Measurer.serve_beside`), until the budget runs out (the first two
    are served whatever the budget: Inception-V3 kept one device when only it fitted). The first one
    served is kept unless a later one serves faster than the one kept so far beyond noise (its
    measured period, as a multiple of that device's, has a 95 % interval whose upper end is below
    the kept one's estimate); then that one is kept, and so on down the list. The first device
    alone, served beside every candidate, stands in for the best single device when it is that
    device (its ratio is 1 by definition). Without a device that runs the whole model, or when
    nothing could be served, the simulated best (a split that could not be served is not kept over
    a single device standing in).

    With ``found`` (a plan search, ``plans=yes``), its plans of other shapes are served too, each
    written to a temporary directory and served in a process of its own beside the same device
    alone (:func:`hdp.placers.plan.serve_candidate`): the best single device with its streams and
    the whole model on several devices right after the single device, a mixed plan last; the
    result carries the plan kept (a placement kept is a plan of its own: one stage per device)."""

    p = ctx.problem
    sim = Simulator(p)
    win = _simulated_best(cands)
    simple = _simplest(cands, win)
    ref = next((d for d in range(p.n_devices) if p.allowed[:, d].all()), None)
    if ref is None:
        if found is not None:
            return _kept_plan(ctx, cands, found, lines, info, "no device runs the whole model to serve beside")
        return _by_objective(ctx, cands, lines, info)
    pipes = [c for c in cands if c.name.startswith("pipeline:")]
    singles = sorted((c for c in cands if c.single), key=lambda c: c.sim)
    # in preference order: a later candidate must serve faster than the one kept so far beyond noise
    queue = [(singles[0].name, singles[0].gd, None)] if singles else []
    queue += plans.queue(found, ("single", "replicas"))
    queue += [(simple.name, simple.gd, None), (win.name, win.gd, None)]
    if pipes:
        queue += [(n, g, None) for n, g in neighbour_cuts(p, sim, min(pipes, key=lambda c: (c.sim, c.subgraphs)).gd)]
    mixed = sorted((c for c in cands if not c.single and c is not win and c is not simple),
                   key=lambda c: (c.sim, c.subgraphs))
    queue += [(c.name, c.gd, None) for c in mixed[:o.top]]
    queue += plans.queue(found, ("mixed",))
    seen: set = set()
    served: list[tuple[str, np.ndarray, float, float, float]] = []
    plan_of: dict[str, object] = {}
    n = int(p.objective.requests)
    plain = p.devices[ref]
    stand_in = ""
    if singles and np.array_equal(singles[0].gd, p.single(ref)):
        # every candidate is served beside this very device alone: it stands in for its own HETERO
        # compile (the same graph), at a ratio of 1, and a split must serve faster than it beyond noise
        served.append((singles[0].name, np.asarray(singles[0].gd, np.int16), 1.0, 1.0, 1.0))
        seen.add(np.asarray(singles[0].gd, np.int16).tobytes())
        stand_in = f"; {singles[0].name} is that reference itself, not served apart"
    # the single device and the simplest near-best split are served whatever the budget
    def key_of(gd, f):
        return f.plan.key() if f is not None else np.asarray(gd, np.int16).tobytes()

    must = len({key_of(gd, f) for _, gd, f in queue[:2]})
    measurer = _measurer(o, ctx)
    t0 = time.monotonic()
    try:
        for name, gd, f in queue:
            key = key_of(gd, f)
            if key in seen or (len(served) >= must and time_left(deadline) <= 0):
                continue
            seen.add(key)
            if f is not None:
                got = plans.serve_candidate(ctx, f, plain, n, SERVED_WINDOWS, ctx.timeout * 4)
                if isinstance(got, str):
                    lines.append(f"served {name}: {got}")
                    continue
                served.append((name, np.asarray(gd, np.int16), *got))
                plan_of[name] = f
                continue
            placed, alone = measurer.serve_beside(p.op_devices(gd), p.devices, plain, {}, requests=n,
                                                  batches=SERVED_WINDOWS)
            if not (placed.ok and alone.ok):
                lines.append(f"served {name}: {placed.error or alone.error}")
                continue
            c = placed.period_ratio(alone, names=(plain, name))
            served.append((name, np.asarray(gd, np.int16), float(c.ratio), float(c.low), float(c.high)))
    finally:
        measurer.close()
        note_time("auto: served", time.monotonic() - t0)
    if not served:
        if found is not None:
            return _kept_plan(ctx, cands, found, lines, info, "nothing could be served")
        return _by_objective(ctx, cands, lines, info)
    lines.append(f"served with {n} requests in flight, each beside {plain} alone as the target configures it "
                 f"(seconds per request as a multiple of that device's, 95 % CI){stand_in}: "
                 + ", ".join(f"{nm} 1 (the reference)" if stand_in and k == 0 else f"{nm} {r:.3f} [{lo:.3f}, {hi:.3f}]"
                             for k, (nm, _, r, lo, hi) in enumerate(served)))
    # served in preference order: each replaces the one kept so far only when it serves faster
    # beyond noise (its whole interval below the kept one's estimate)
    best, why = served[0], []
    for x in served[1:]:
        if x[4] < best[2]:
            why.append(f"{x[0]} served faster than {best[0]} beyond noise")
            best = x
    f = (plan_of.get(best[0]) or plans.from_placement(found, best[1])) if found is not None else None
    what = f"the {f.plan.shape} plan {f.plan.describe(p.devices)}" if f is not None else best[0]
    if why:
        simulated = f.value if f is not None else sim.cost(best[1])
        lines.append(f"kept {what} ({simulated * 1e3:.3f} ms per request simulated): " + "; ".join(why))
    else:
        lines.append(f"kept {what}" + (": no other candidate served faster beyond noise" if len(served) > 1 else ""))
    info.update(sim.report(best[1]))
    if f is not None:
        info.update(plans.plan_info(found, f))
    info.update(stages="candidates,served", chosen=best[0], served_ratio=f"{best[2]:.6g}", report="\n".join(lines))
    return Placed(best[1], info)


def _modeled(o: Auto, ctx, cands: list[Cand], lines: list[str], info: dict, deadline) -> Placed:
    win = _simulated_best(cands)
    lines.append(f"kept {win.label} ({ms(win.sim)} simulated): the lowest simulated latency"
                 + (" (single devices first among equals)" if len(cands) > 1 else ""))
    gd, src = win.gd, win.name
    if o.learns(ctx.target):
        r = train(o, ctx, win, None, deadline, min_gain=0.0, reserve=0)
        lines.append(f"learning (simulated reward, hsdag warm-started from {win.name}): {r.evaluations} "
                     f"placements, stopped: {r.stopped}")
        if r.best_device_of is not None and r.best_latency < win.sim * (1 - SIM_TIE):
            gd, src = r.best_device_of, f"learned ({r.best_source})"
            lines.append(f"kept the learned placement: {ms(r.best_latency)} simulated, "
                         f"{(1 - r.best_latency / win.sim) * 100:.1f} % below {win.name}")
        else:
            lines.append(f"no simulated gain; kept {win.name}")
        info["stages"] = "candidates,learning"
    else:
        lines.append("modeled target: the simulator is the truth and optimal is exact for its cost model, "
                     "so no learning (--method auto:yes learns)")
        info["stages"] = "candidates"
    info.update(chosen=src, report="\n".join(lines))
    return Placed(np.asarray(gd, np.int16), info)


def _head_to_head(o: Auto, ctx, measurer, cands: list[Cand], lines: list[str], deadline):
    """Stage 2: (the winner, its measured statistics or None when nothing was measured)."""

    singles = [c for c in cands if c.single][:o.singles]
    bar = singles[0].sim * MIXED_CUT if singles else math.inf
    mixed = [c for c in cands if not c.single and c.sim <= bar][:o.top]
    final = singles + mixed
    if len(final) < 2:
        win = final[0] if final else _simulated_best(cands)
        lines.append(f"kept {win.name}: the only candidate worth measuring (mixed candidates simulated more "
                     f"than {MIXED_CUT:g}× the best single device are not measured)")
        return win, None

    plan = measured.plan(o.resolution)
    n_ops = ctx.problem.n_ops
    learn = o.learns(ctx.target)
    t0 = time.monotonic()
    try:
        measurer.loaded()  # start the worker and read the model first: the predictions below exclude it
    except MeasureError as e:
        win = _simulated_best(cands)
        lines.append(f"not measured: {e}; kept {win.name} by simulation ({ms(win.sim)})")
        return win, None
    note_time("auto: measuring worker start", time.monotonic() - t0)
    left = time_left(deadline)

    scale = run_scale(ctx.module, [(c.name.partition(":")[2], c.sim) for c in cands if c.single]) * RUN_SLACK
    floor = min((c.sim for c in cands if c.single), default=0.0)  # mixed placements rarely run faster than simulated

    def run_s(c: Cand) -> float:
        return max(c.sim, floor) * scale

    def predicted(cs):
        return measured.h2h_seconds([c.compile_estimate(n_ops) for c in cs], [run_s(c) for c in cs],
                                    plan, measurer.warmup)

    while len(final) > 1 and predicted(final) > left:
        final.pop()
    if len(final) < 2:
        win = _simulated_best(cands)
        lines.append(f"not measured: {left:.1f} s left of the budget, a head-to-head needs about "
                     f"{predicted(singles + mixed):.1f} s; kept {win.name} by simulation ({ms(win.sim)})")
        return win, None
    h2h_deadline = deadline
    if deadline is not None:  # leave the learning stage as much time as the comparison may take
        share = 0.5 if learn else 1.0
        h2h_deadline = min(deadline, time.monotonic() + max(predicted(final), share * left))
    names = [c.name for c in final]
    # torch is imported after this comparison, not beside it: an import running beside the measured
    # runs slowed them by half (gpt2-tiny: medians 1.82 ms against 1.24 ms without it), so the
    # medians printed were not the model's latency and the comparison's noise grew
    t0 = time.monotonic()
    ch = measured.choose(measurer, ctx.problem, [(c.name, c.gd) for c in final], list(range(len(final))),
                         p=plan, deadline=h2h_deadline, anchored=True)
    note_time("auto: head-to-head", time.monotonic() - t0)
    if ch.best is not None:
        note_head(ch.best.head)
    win = final[ch.winner]
    if ch.best is None or ch.winner not in ch.medians:
        lines += ch.lines
        return win, None
    lines.append(_summary(final, ch))
    lines += ch.lines
    lines.append(_sim_vs_measured(final, ch))
    m = ch.best.head.measurements[ch.best.finalists.index(ch.winner)]
    st = {"median": m.median, "q1": m.q1, "q3": m.q3, "compile": m.compile_seconds, "names": names}
    return win, st


def _summary(final: list[Cand], ch) -> str:
    """``optimal 11.3 ms, heft 11.5 ms (simulated) → measured: kept single:CPU 10.9 ms`` (the
    comparisons are stated once, in the head-to-head's lines that follow)."""
    w = final[ch.winner]
    sims = ", ".join(f"{c.label} {ms(c.sim)}" for c in final if not c.single)
    return (f"{sims} (simulated) → " if sims else "") + f"measured: kept {w.label} {ms(ch.medians[ch.winner])}"


def _sim_vs_measured(final: list[Cand], ch) -> str:
    """How far the simulator is from the head-to-head's medians, per candidate measured."""

    pairs = [(c.name, c.sim, ch.medians[i]) for i, c in enumerate(final) if i in ch.medians]
    return sim_vs_measured(pairs)

"""The calibration experiment: which placements to measure on a host, measured how.

The boundary model, its fit and its store are :mod:`hdp.runtime.costs.calibrate` (below the placers:
the simulator and the ``boundary`` pass read them). Designing the experiment runs placers
(``optimal`` at several boundary penalties, ``heft`` held out), so it sits above them, beside the
compile pipeline: :func:`design` picks the placements, :func:`measure_design` measures each head to
head with the reference (:func:`precision_plan`: until every ratio is known to a resolution), and
:func:`calibrate_module` does both for one profiled module. ``hdp calibrate``
(:mod:`hdp.cli.calibrate`) fits and stores the observations with
:func:`hdp.runtime.costs.calibrate.build`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from hdp.base.errors import InputError
from hdp.passes.boundary import BoundaryPass
from hdp.placement.objective import Throughput
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext
from hdp.placers.classical import heft, optimal
from hdp.placers.options import Heft, Optimal
from hdp.placers.pipelines import pipeline_candidates
from hdp.runtime.costs.calibrate import (
    Observation,
    costs_digest,
    group_common,
    placement_features,
)
from hdp.runtime.costs.grid_fit import CONVERT_GRID, HANDOFF_GRID, ExecutorObservation, PipelineObservation
from hdp.runtime.costs.stream_fit import StreamObservation, stream_efficiency
from hdp.runtime.measure import stats
from hdp.runtime.measure.measurement import placed
from hdp.runtime.measure.measurer import Measurer
from hdp.target.streams import thread_cap

# --------------------------------------------------------------------------- the design


@dataclass(frozen=True)
class Design:
    """One placement of the calibration design (a device per tie group)."""

    name: str
    group_device: np.ndarray
    heldout: bool


def _allowed_fix(problem, gd: np.ndarray) -> np.ndarray:
    """Move every group on a device it may not use to its first allowed device."""
    gd = np.asarray(gd, np.int64).copy()
    bad = ~problem.allowed[np.arange(gd.shape[0]), gd]
    if bad.any():
        gd[bad] = np.argmax(problem.allowed[bad], axis=1)
    return gd


def reference_placement(problem) -> np.ndarray:
    """The reference every placement is compared with: every group on the first device that may
    run all of them, else each group on its first allowed device."""
    for d in range(problem.n_devices):
        if problem.allowed[:, d].all():
            return problem.single(d).astype(np.int64)
    return np.argmax(problem.allowed, axis=1).astype(np.int64)


def design(module, problem, *, seed: int = 0, heldout: int = 10, fit_random: int = 4,
           blocks: Sequence[int] = (2, 3, 5, 9, 17, 33), penalties: Sequence[float] = (0.0, 1e-3, 1e-2)) -> list[Design]:
    """Placements to measure (see the module docstring); the first is the reference."""

    rng = np.random.default_rng(seed)
    k, nd = problem.n_groups, problem.n_devices
    out: list[Design] = []
    seen: set[bytes] = set()

    def add(name, gd, held=False, need_mixed=False):
        gd = _allowed_fix(problem, gd)
        if need_mixed and np.unique(gd).size < 2:
            return False
        key = gd.astype(np.int16).tobytes()
        if key in seen:
            return False
        seen.add(key)
        out.append(Design(name, gd, held))
        return True

    add("reference", reference_placement(problem))
    for d in range(nd):
        if problem.allowed[:, d].all():
            add(f"single:{problem.devices[d]}", problem.single(d))
    if k < 2 or nd < 2:
        return out
    for nb in blocks:
        if nb > k:
            continue
        cuts = np.sort(rng.choice(np.arange(1, k), nb - 1, replace=False))
        seg = np.searchsorted(cuts, np.arange(k), side="right")
        add(f"blocks:{nb}", seg % nd, need_mixed=True)
    st = problem.structure
    co = getattr(module, "coarse", None)
    cog = co.group_of.numpy().astype(np.int64)[st.m_ops[st.m_ptr[:-1]]] if co is not None else np.arange(k)
    nc = int(cog.max()) + 1

    def coarse_random(r):
        w = r.dirichlet(np.ones(nd))
        return r.choice(nd, size=nc, p=w)[cog]

    made = 0
    while made < fit_random:
        made += add(f"random:coarse:{made}", coarse_random(rng), need_mixed=True)
        if len(out) > 1000:
            break
    for j, frac in enumerate((0.05, 0.3)):  # fine-grained cuts: a few groups moved, or many
        base = reference_placement(problem)
        flip = rng.random(k) < frac
        gd = base.copy()
        gd[flip] = (base[flip] + rng.integers(1, nd, flip.sum())) % nd
        add(f"random:groups:{frac:g}", gd, need_mixed=True)
    # the placements that harvest per-op profile noise the most, both ways: they pin down how much
    # of the per-op contrast between devices is real (λ)
    full = problem.time_with_copies()
    t = np.where(problem.allowed, full, np.inf)
    add("fastest-per-group", np.argmin(t, axis=1), need_mixed=True)
    add("slowest-per-group", np.argmax(np.where(problem.allowed, full, -np.inf), axis=1), need_mixed=True)
    ctx = PlaceContext(module=module, problem=problem)
    for pen in penalties:
        add(f"optimal:penalty={pen:g}", optimal(Optimal(boundary_penalty=pen, margin=0.0), ctx).group_device,
            need_mixed=True)
    # held out: a stream of its own, so the fitted set does not change with ``heldout``
    hr = np.random.default_rng([seed, 1])
    made = int(heldout > 0 and add("heft", heft(Heft(), ctx).group_device, held=True, need_mixed=True))
    tries = 0
    while made < heldout and tries < 100 * max(heldout, 1):
        tries += 1
        made += add(f"heldout:random:coarse:{tries}", coarse_random(hr), held=True, need_mixed=True)
    return out


# --------------------------------------------------------------------------- measuring


def _load() -> float:
    try:
        return float(os.getloadavg()[0])
    except OSError:
        return math.nan


def precision_plan(resolution: float = 0.04, max_seconds: float = 240.0, min_rounds: int = 20,
                   max_rounds: int = 5000):
    """A :class:`~hdp.runtime.measure.stats.SequentialPlan` that stops when every candidate's ratio to the
    first (the reference) is known to ±``resolution / 2`` (its 95 % interval), or at the caps. A
    calibration needs precise ratios, not verdicts: the default plan stops as soon as differences
    are clear, which leaves a 30 % difference known only to ±10 %."""

    class PrecisionPlan(stats.SequentialPlan, frozen=True):
        def status(self, times, elapsed):
            times = np.asarray(times, np.float64)
            n, k = times.shape
            if n >= self.max_rounds:
                return stats.PlanStatus(True, f"round cap ({self.max_rounds} rounds)", 0)
            if elapsed >= self.max_seconds:
                return stats.PlanStatus(True, f"time cap ({self.max_seconds:g} s, {n} rounds)", 0)
            if n < self.min_rounds:
                return stats.PlanStatus(False, "", 0)
            for j in range(1, k):
                c = stats.compare(times[:, 0], times[:, j], level=self.level, margin=self.margin)
                if not (c.low > 0 and math.sqrt(c.high / c.low) - 1 <= self.resolution / 2):
                    return stats.PlanStatus(False, "", 0)
            return stats.PlanStatus(True, f"ratios known to ±{self.resolution * 50:g} % ({n} rounds)", 0)

    return PrecisionPlan(resolution=resolution, min_rounds=min_rounds, max_rounds=max_rounds, max_seconds=max_seconds)


def against_reference(measurer, problem, ref: Design, placements: Sequence[Design], plan, *, batch: int = 3,
                      execution: str = "sequential", say: Callable[[str], None] = lambda s: None):
    """Each of ``placements`` measured head to head with ``ref`` (under HETERO), ``batch`` per
    interleaved comparison, run as ``execution`` says; yields ``(placement, its measurement, the
    comparison, (low, high) or (0, 0) when unresolved, the reference's measurement, the load
    average)``. Failures are reported through ``say`` and skipped."""

    tag = "executor " if execution == "concurrent" else ""
    for i in range(0, len(placements), batch):
        chunk = placements[i:i + batch]
        cands = [placed(problem.op_devices(ref.group_device), name="reference")]
        cands += [placed(problem.op_devices(p.group_device), name=p.name, execution=execution) for p in chunk]
        load0 = _load()
        h = measurer.head_to_head(cands, plan)
        load = float(np.nanmean([load0, _load()]))
        if not h.measurements[0].ok:
            say(f"{tag}reference failed: {h.measurements[0].error}")
            continue
        for j, p in enumerate(chunk, 1):
            m = h.measurements[j]
            if not m.ok:
                say(f"{tag}{p.name}: {m.error}")
                continue
            c = h.compare(0, j)
            ci = (c.low, c.high) if math.isfinite(c.high) and c.low > 0 else (0.0, 0.0)
            yield p, m, c, ci, h.measurements[0], load


def measure_design(measurer, problem, sim, placements: Sequence[Design], *, model: str, costs: str, plan=None,
                   batch: int = 3, say: Callable[[str], None] = lambda s: None) -> list[Observation]:
    """Measure every placement but the first (the reference) head to head with the reference,
    ``batch`` placements per interleaved comparison; failures are reported through ``say`` and
    skipped."""
    plan = plan or precision_plan()
    ref = placements[0]
    common = group_common(problem)
    ref_f = placement_features(problem, sim, ref.group_device, common)
    out: list[Observation] = []
    for p, m, cmp_, (lo, hi), ref_m, load in against_reference(measurer, problem, ref, list(placements[1:]), plan,
                                                                batch=batch, say=say):
        f = placement_features(problem, sim, p.group_device, common)
        o = Observation(model=model, costs=costs, name=p.name, heldout=p.heldout,
                        mixed=bool(np.unique(p.group_device).size > 1), features=f, reference=ref_f,
                        hetero_subgraphs=int(m.submodels), ratio=float(cmp_.ratio), low=float(lo),
                        high=float(hi), rounds=int(cmp_.rounds), median=float(m.median),
                        ref_median=float(ref_m.median), load=load,
                        placement=tuple(int(x) for x in p.group_device))
        out.append(o)
        say(f"{p.name:<26} ratio {o.ratio:.3f} [{o.low:.3f}, {o.high:.3f}] over {o.rounds} rounds; "
            f"subgraphs {f.subgraphs} (HETERO {o.hetero_subgraphs}), {f.copies} copies, "
            f"{f.copy_bytes / 1e6:.2f} MB; reference {o.ref_median * 1e3:.1f} ms, load {load:.1f}")
    return out


#: The design placements the executor is measured on (names starting so), at most this many each.
EXECUTOR_FIT = ("blocks:", "random:coarse:", "optimal:")
EXECUTOR_HELD = ("heft", "heldout:random:coarse:")
EXECUTOR_MAX = (6, 4)


def executor_design(placements: Sequence[Design]) -> list[Design]:
    """The placements of a design the concurrent executor is measured on: the contiguous blocks,
    random placements of coarse groups and ``optimal``'s (fitted), heft's and held-out random ones
    (held out); not the per-group random ones, whose hundreds of sub-models say little about a
    placement anyone would run."""
    fit = [p for p in placements if not p.heldout and p.name.startswith(EXECUTOR_FIT)][:EXECUTOR_MAX[0]]
    held = [p for p in placements if p.heldout and p.name.startswith(EXECUTOR_HELD)][:EXECUTOR_MAX[1]]
    return fit + held


def measure_executor(measurer, problem, sim, placements: Sequence[Design], executor, *, model: str, costs: str,
                     plan=None, batch: int = 3, say: Callable[[str], None] = lambda s: None) -> list:
    """Measure each placement run by the concurrent executor head to head with ``placements[0]``
    (the reference, under HETERO), ``batch`` per comparison; each observation carries the
    simulator's ratio on :data:`hdp.runtime.costs.calibrate.CONVERT_GRID` with ``executor``'s (probed)
    launch, hand-over and request costs."""

    plan = plan or precision_plan()
    ref = placements[0]
    ref_t = sim.latency(ref.group_device)
    out = []
    rest = [p for p in executor_design(placements[1:]) if np.unique(p.group_device).size > 1]
    for p, _, c, (lo, hi), _, _ in against_reference(measurer, problem, ref, rest, plan, batch=batch,
                                                     execution="concurrent", say=say):
        gd = np.asarray(p.group_device, np.int64)
        pred = tuple(sim.latency_concurrent(gd, executor.launch, executor.handover, executor.request, x) / ref_t
                     for x in CONVERT_GRID)
        o = ExecutorObservation(model=model, costs=costs, name=p.name, heldout=p.heldout, ratio=float(c.ratio),
                                low=float(lo), high=float(hi), rounds=int(c.rounds),
                                subgraphs=int(sim.concurrent_subgraphs(gd)[1]), grid=CONVERT_GRID, predicted=pred)
        out.append(o)
        say(f"executor {p.name:<17} ratio {o.ratio:.3f} [{o.low:.3f}, {o.high:.3f}] over {o.rounds} rounds; "
            f"{o.subgraphs} sub-models; simulated {pred[0]:.3f} without conversions")
    return out


# --------------------------------------------------------------------------- one model


def calibrate_module(module, target, *, model: str, seed: int = 0, heldout: int = 10, fit_random: int = 4,
                     plan=None, batch: int = 3, timeout: float = 600.0,
                     say: Callable[[str], None] = lambda s: None) -> list[Observation]:
    """Measure the calibration design of one profiled module (it needs ``support`` and ``costs``;
    ``coarse`` is used for random placements when present)."""

    if module.costs is None:
        raise InputError(f"{model}: calibrating needs the profile (costs) of the model")
    real = [d for d in target.devices if d.kind == "real"]
    if len(real) != len(target.devices):
        raise InputError(f"target '{target.name}' has modeled devices; only real devices can be calibrated")
    problem = build_problem(module, target.device_names)
    sim = Simulator(problem)
    pls = design(module, problem, seed=seed, heldout=heldout, fit_random=fit_random)
    say(f"{model}: {problem.n_groups} tie groups; measuring {len(pls) - 1} placements against "
        f"'{pls[0].name}' ({sum(p.heldout for p in pls)} held out)")
    with Measurer(module, target, timeout=timeout, cache=False) as m:
        return measure_design(m, problem, sim, pls, model=model, costs=costs_digest(module.costs), plan=plan,
                              batch=batch, say=say)


def calibrate_executor(module, calibration, target, executor, *, model: str, seed: int = 0, heldout: int = 10,
                       fit_random: int = 4, plan=None, batch: int = 3, timeout: float = 600.0,
                       say: Callable[[str], None] = lambda s: None) -> list:
    """Measure placements of one profiled module run by the concurrent executor
    (:func:`measure_executor`), simulated as ``hdp compile`` will simulate them: on the costs with
    ``calibration``'s boundary model applied (the ``boundary`` pass: profile scale, device scales,
    copy costs), with ``executor``'s probed costs."""

    digest = costs_digest(module.costs)  # the profile's own, as its HETERO observations have it
    calibrated = BoundaryPass(boundary=calibration.boundary, models=calibration.models,
                              contrast=calibration.contrast).run(module)
    problem = build_problem(calibrated, target.device_names)
    sim = Simulator(problem)
    pls = design(calibrated, problem, seed=seed, heldout=heldout, fit_random=fit_random)
    with Measurer(module, target, timeout=timeout, cache=False) as m:
        return measure_executor(m, problem, sim, pls, executor, model=model, costs=digest, plan=plan, batch=batch,
                                say=say)


# --------------------------------------------------------------------------- served pipelines

#: Requests in flight of the placements ``hdp calibrate`` serves to fit the throughput hand-off.
PIPELINE_REQUESTS = 2


def pipeline_design(module, problem, *, requests: int = PIPELINE_REQUESTS) -> list[Design]:
    """Placements served to fit the throughput objective's hand-off: fitted, the best two-stage
    pipeline from the first device to the second (:func:`hdp.placers.pipelines.pipeline_candidates`),
    the throughput-optimal placement without a hand-off (HiGHS; it splits into more subgraphs) and
    contiguous blocks alternating devices in 3 and 5 parts of equal compute; held out, the other
    two-stage pipelines and 9 alternating blocks."""

    p = problem.with_objective(Throughput(requests=requests))
    sim = Simulator(p)
    out: list[Design] = []
    seen: set[bytes] = set()

    def add(name, gd, held):
        gd = _allowed_fix(p, gd)
        key = gd.astype(np.int16).tobytes()
        if np.unique(gd).size > 1 and key not in seen:
            seen.add(key)
            out.append(Design(name, gd, held))

    for j, (name, gd, _) in enumerate(pipeline_candidates(p, sim)):
        add(name, gd, j > 0)
    if p.n_groups < 2 or p.n_devices < 2:
        return out
    add("optimal:throughput", optimal(Optimal(margin=0.0, time_limit=30.0), PlaceContext(module=module, problem=p))
        .group_device, False)
    work = np.cumsum(np.where(p.allowed, p.time, np.inf).min(axis=1))  # groups are in topological order
    for nb, held in ((3, False), (5, False), (9, True)):
        if nb <= p.n_groups:
            seg = np.minimum((work / max(work[-1], 1e-300) * nb).astype(np.int64), nb - 1)
            add(f"blocks:{nb}", seg % p.n_devices, held)
    return out


def measure_pipeline(measurer, problem, placements: Sequence[Design], *, model: str, costs: str,
                     requests: int = PIPELINE_REQUESTS, batches: int = 12,
                     say: Callable[[str], None] = lambda s: None) -> list:
    """Serve each placement with ``requests`` in flight beside the plain compile of the target's
    first device, windows alternating (:meth:`hdp.runtime.measure.measurer.Measurer.serve_beside`); each
    observation carries the simulator's period ratio on :data:`hdp.runtime.costs.calibrate.HANDOFF_GRID`.
    Failures are reported through ``say`` and skipped."""

    p0 = problem.with_objective(Throughput(requests=requests))
    sims = [Simulator(problem.with_objective(Throughput(requests=requests, handoff=h))) for h in HANDOFF_GRID]
    first = p0.devices[0]
    ref_t = sims[0].terms(p0.single(0))[0] if p0.allowed[:, 0].all() else None
    out = []
    for d in placements:
        if ref_t is None:
            say(f"served pipelines: {first} cannot run the whole model; no plain reference")
            break
        placed, plain = measurer.serve_beside(problem.op_devices(d.group_device), p0.devices, first, {},
                                              requests=requests, batches=batches)
        if not (placed.ok and plain.ok):
            say(f"served {d.name}: {placed.error or plain.error}")
            continue
        c = placed.period_ratio(plain, names=(first, d.name))
        lo, hi = (c.low, c.high) if math.isfinite(c.high) and c.low > 0 else (0.0, 0.0)
        gd = np.asarray(d.group_device, np.int64)
        pred = tuple(s.period(gd) / ref_t for s in sims)
        o = PipelineObservation(model=model, costs=costs, name=d.name, heldout=d.heldout, requests=requests,
                                ratio=float(c.ratio), low=float(lo), high=float(hi), rounds=len(placed.rates),
                                subgraphs=int(sims[0].terms(gd)[2]), hetero_subgraphs=int(placed.submodels),
                                grid=HANDOFF_GRID, predicted=pred)
        out.append(o)
        ci = f"[{o.low:.3f}, {o.high:.3f}]" if o.high > 0 else "(no interval: not fitted)"
        say(f"{model}: served {d.name:<22} period ratio to {first} alone {o.ratio:.3f} {ci} over {o.rounds} windows; "
            f"{o.subgraphs} subgraphs (HETERO {o.hetero_subgraphs}); simulated {pred[0]:.3f} without a hand-off")
    return out


def calibrate_pipeline(module, calibration, target, *, model: str, timeout: float = 600.0,
                       say: Callable[[str], None] = lambda s: None) -> list:
    """Serve placements of one profiled module (:func:`pipeline_design`, :func:`measure_pipeline`),
    simulated as ``hdp compile --objective throughput`` will: on the costs with ``calibration``'s
    boundary model applied."""

    digest = costs_digest(module.costs)
    calibrated = BoundaryPass(boundary=calibration.boundary, models=calibration.models,
                              contrast=calibration.contrast).run(module)
    problem = build_problem(calibrated, target.device_names)
    pls = pipeline_design(calibrated, problem)
    with Measurer(module, target, timeout=timeout, cache=False) as m:
        return measure_pipeline(m, problem, pls, model=model, costs=digest, say=say)


#: Windows each side when a device's plain compile is served with one and with two streams.
STREAM_WINDOWS = 8


def calibrate_streams(module, target, *, model: str, requests: int = 2, timeout: float = 600.0,
                      say: Callable[[str], None] = lambda s: None) -> list[StreamObservation]:
    """Each real device's plain compile (as the target configures it) served with one stream and
    with two (``NUM_STREAMS``), ``requests`` in flight, the two served in turn in one worker
    (:data:`STREAM_WINDOWS` rounds of one window each): its stream efficiency for serving plans
    (:func:`hdp.runtime.costs.calibrate.stream_efficiency`). A CPU device the target caps at one
    thread runs one stream whatever it is asked (its efficiency is 0.5 by definition): not served."""
    out = []
    with Measurer(module, target, timeout=timeout, cache=False) as m:
        for d in target.devices:
            if d.kind != "real" or thread_cap(d) == 1:
                continue
            one, two = [], []
            for _ in range(STREAM_WINDOWS):
                for streams, rates in ((1, one), (2, two)):
                    got = m.serve(unplaced_on=d.name, unplaced_config={**dict(d.config), "NUM_STREAMS": str(streams)},
                                  requests=requests, batches=1)
                    if not got.ok:
                        say(f"{model}: streams on {d.name}: {got.error}")
                        break
                    rates.extend(got.rates)
            if len(one) < 2 or len(two) < 2:
                continue
            e = stream_efficiency(one, two)
            say(f"{model}: {d.name} one stream {np.median(one):.1f}/s, two {np.median(two):.1f}/s: efficiency {e:.3f}")
            out.append(StreamObservation(model=model, device=d.name, requests=requests, one=tuple(one), two=tuple(two),
                                         efficiency=e))
    return out

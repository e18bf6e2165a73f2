"""Placers: the methods behind ``--method``. Each maps a :class:`~hdp.placement.problem.PlacementProblem`
to a device per tie group.

A method is an option value from :mod:`hdp.placers.options` (its registry,
:data:`~hdp.placers.options.METHODS`); :func:`place` runs its implementation (the class's
``implementation``), imported on first use (nothing here imports torch or openvino).

Wall-clock times never go into a placer's ``info`` (it is part of the Module, whose bytes must be
the same for the same input): a placer reports how long its stages took with :func:`note_time`,
and whoever runs it collects them with :func:`stage_times` (``hdp compile`` prints them). In the
same way a placer that measured placements head to head hands the comparison on with
:func:`note_head` (``hdp compile`` reuses it instead of measuring the same candidates again).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import time
from dataclasses import dataclass, field

import numpy as np

from hdp.base.errors import InputError
from hdp.ir.types import Module
from hdp.placement.memory import fit_error, size_text, smallest_need
from hdp.placement.objective import Concurrent, Throughput
from hdp.placement.plan import PlanDevices
from hdp.placement.planner import plan_throughput
from hdp.placement.problem import PlacementProblem
from hdp.placement.simulate import Simulator
from hdp.placement.subgraphs import untangle
from hdp.placers.options import METHODS, PlacerOptions
from hdp.target.streams import plan_devices
from hdp.target.target import Target

_TIMES: contextvars.ContextVar[list | None] = contextvars.ContextVar("hdp_stage_times", default=None)


@contextlib.contextmanager
def stage_times():
    """Collect the ``(stage, seconds)`` rows placers note with :func:`note_time` inside the block
    (into the list this yields). Outside such a block notes are dropped."""
    rows: list[tuple[str, float]] = []
    token = _TIMES.set(rows)
    try:
        yield rows
    finally:
        _TIMES.reset(token)


_HEADS: contextvars.ContextVar[list | None] = contextvars.ContextVar("hdp_heads", default=None)


@contextlib.contextmanager
def measured_heads():
    """Collect the head-to-head comparisons (``hdp.runtime.measure.measurer.HeadToHead``) placers note with
    :func:`note_head` inside the block (into the list this yields); outside, notes are dropped."""
    heads: list = []
    token = _HEADS.set(heads)
    try:
        yield heads
    finally:
        _HEADS.reset(token)


def note_head(head) -> None:
    """Hand on a head-to-head this placer measured in this run (see :func:`measured_heads`)."""
    heads = _HEADS.get()
    if heads is not None:
        heads.append(head)


def note_time(stage: str, seconds: float) -> None:
    """Report that ``stage`` of a placement took ``seconds`` of wall clock (see :func:`stage_times`)."""
    rows = _TIMES.get()
    if rows is not None:
        rows.append((stage, float(seconds)))


@dataclass(frozen=True)
class PlaceContext:
    """What a placer may read besides its options."""

    module: Module  # its features and coarse stages (the learned placers)
    problem: PlacementProblem
    target: Target | None = None  # measured rewards, the method's stages on it (None: unknown)
    seed: int = 0
    timeout: float = 120.0  # seconds per measured placement before its worker is killed
    #: ``time.monotonic()`` when placing began: budgets count from here
    started: float = field(default_factory=time.monotonic)


@dataclass
class Placed:
    group_device: np.ndarray  # int16 per tie group of the problem
    info: dict = field(default_factory=dict)


def implementation(name: str):
    """The function that runs method ``name`` (its options class's ``implementation``)."""
    cls = METHODS.get(name)
    if cls is None:
        raise InputError(f"unknown method '{name}' (known: {', '.join(sorted(METHODS))})")
    mod, _, fn = cls.implementation.partition(":")
    return getattr(importlib.import_module(mod), fn)


def place(options: PlacerOptions, ctx: PlaceContext) -> Placed:
    """Run a method; checks its options, the stages it needs, that it serves the problem's
    objective, that the model fits the devices' memory at all, and that the result is allowed; moves
    the groups a stateful model's placement needs moved for HETERO
    (:func:`hdp.placement.subgraphs.untangle`; ``info["untangled_groups"]`` counts them); and checks
    that the result fits (a placement over a device's memory is a one-line InputError naming the
    device and bytes)."""
    options.check()
    p = ctx.problem
    kind = p.objective.kind()
    served = options.served(ctx.target)
    if kind == "energy":  # the latency problem whose latency is the joules: every latency method places for it
        return _place_energy(options, ctx, served)
    if kind not in served:
        able = [m for m in ("optimal", "heft", "auto", "cp-sat") if kind in METHODS[m].serves]
        if options.name() == "hsdag":
            able.insert(0, "hsdag:simulate")
        raise InputError(f"method '{options.label()}' cannot place for the {kind} objective (it serves "
                         f"{', '.join(sorted(served))}); use {' or '.join(able)}")
    missing = [s for s in options.stages(ctx.target) if getattr(ctx.module, s) is None]
    if missing:
        raise InputError(f"method '{options.name()}' needs {', '.join(missing)}; run "
                         f"{' and '.join({'costs': 'profile', 'coarse': 'coarsen'}.get(s, s) for s in missing)} first")
    if p.memory_binds:
        why = fit_error(p)
        if why:
            raise InputError(why)
    placed = implementation(options.name())(options, ctx)
    gd = np.asarray(placed.group_device, np.int16)
    if gd.shape != (p.n_groups,):
        raise AssertionError(f"method '{options.name()}' returned {gd.shape} devices for {p.n_groups} groups")
    if gd.size and not p.allowed[np.arange(gd.shape[0]), gd].all():
        raise AssertionError(f"method '{options.name()}' put a group on a device not allowed for it")

    if p.multi_host and gd.size and (kind != "throughput" or Simulator(p).over(gd)):
        gd = _across_hosts(ctx, gd, placed.info)
    before = gd
    # HETERO must not cut a state's subgraph (hdp.placement.subgraphs); a random placement is kept
    # as near as legal, a placement chosen for its speed as fast as legal
    gd, moved = untangle(p, gd, nearest=options.name() == "random")
    if moved:
        placed.info["untangled_groups"] = moved
        if p.has_costs:
            placed.info["untangled_from_s"] = f"{Simulator(p).latency(before):.6g}"
    if p.memory_binds and gd.size:
        over = Simulator(p).over(gd)
        if over:
            dev, need, cap = over[0]
            if dev.startswith("host "):
                raise InputError(f"{options.label()}: no placement found within the hosts' memory: it needs "
                                 f"{size_text(need)} on {dev}, over its memory of {size_text(cap)} "
                                 f"({hosts_text(p)}; the model needs at least {size_text(smallest_need(p))})")
            raise InputError(f"{options.label()}: its placement needs {size_text(need)} on {dev}, over its memory "
                             f"of {size_text(cap)} (--memory {dev}=SIZE; optimal and heft respect capacities)")
    placed.group_device = gd
    return placed


#: Seconds the plan search across hosts takes at most for a placement on several hosts.
ACROSS_HOSTS_SECONDS = 60.0


def hosts_text(p: PlacementProblem) -> str:
    """``hosts hold a 8 GiB, b 8 GiB``: what each host of a problem holds."""
    h = p.hosts
    caps = p.caps
    room = [min(float(h.capacity[i]), float(caps[h.devices_of(i)].sum())) for i in range(h.n_hosts)]
    return "hosts hold " + ", ".join(f"{n} {size_text(r)}" if np.isfinite(r) else f"{n} unlimited"
                                     for n, r in zip(h.names, room))


def _across_hosts(ctx: PlaceContext, gd: np.ndarray, info: dict) -> np.ndarray:
    """On several hosts the methods price every crossing by ``t_cost`` and hold no host's memory:
    the placement kept is the better (simulated on the hosts, fitting every device and host) of the
    method's and the placements of the plans the search across hosts finds
    (:func:`hdp.placement.planner.plan_across_hosts`; for latency with one request in flight, whose
    period is the latency; under throughput only when the method's placement overfills a host);
    ``info["hosts_plan"]`` says which."""
    p = ctx.problem
    if isinstance(p.objective, Concurrent):
        raise InputError("--execution concurrent runs one process on one host; this target has several hosts "
                         "(plan across them with the sequential latency or --objective throughput)")
    sim = Simulator(p)
    devices = plan_devices(ctx.target, p.devices) if ctx.target is not None else PlanDevices.independent(p.n_devices)
    n = p.objective.requests if isinstance(p.objective, Throughput) else 1
    search = plan_throughput(p, devices, n, time_limit=ACROSS_HOSTS_SECONDS)
    mine = sim.cost(gd) if sim.feasible(gd) else np.inf
    best, best_v, how = gd, mine, "the method's placement"
    for f in [*search.singles.values(), search.pipeline, search.contiguous, search.best]:
        if f.plan is None:
            continue
        cand = np.asarray(f.plan.representative(), np.int16)
        if not p.allowed[np.arange(cand.shape[0]), cand].all() or not sim.feasible(cand):
            continue
        v = sim.cost(cand)
        if v < best_v * (1 - 1e-9):
            best, best_v, how = cand, v, f"the plan search across hosts ({f.plan.describe(p.devices)})"
    info["hosts_plan"] = how
    return best


def _place_energy(options: PlacerOptions, ctx: PlaceContext, served) -> Placed:
    """:func:`place` under the Energy objective: the method places the problem's latency view
    (:meth:`~hdp.placement.problem.PlacementProblem.as_latency`, whose sequential latency is the
    joules of one request), which is exact wherever the method is exact for latency; ``info`` gets
    the placement's ``energy_j`` and simulated ``latency_s``. Energy is reckoned from modeled
    devices' watts, so a method that measures (on real devices) does not serve it."""
    if "latency" not in served or (ctx.target is not None and any(d.kind == "real" for d in ctx.target.devices)):
        raise InputError(f"method '{options.label()}' cannot place for the energy objective here: energy is "
                         f"simulated from modeled devices' watts (a target of modeled devices, a method that "
                         f"places for latency)")
    p = ctx.problem
    placed = place(options, PlaceContext(module=ctx.module, problem=p.as_latency(), target=ctx.target, seed=ctx.seed,
                                         timeout=ctx.timeout, started=ctx.started))
    sim = Simulator(p)
    placed.info["energy_j"] = f"{sim.energy(placed.group_device):.6g}"
    placed.info["latency_s"] = f"{sim.latency(placed.group_device):.6g}"
    return placed

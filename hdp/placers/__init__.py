"""Placers: the methods behind ``--method``. Each maps a :class:`~hdp.placement.problem.PlacementProblem`
to a device per tie group.

A method is an option value from :mod:`hdp.placers.options`; :func:`place` runs its implementation,
imported on first use from :data:`IMPLEMENTATIONS` (no registry is filled at import time, and
nothing here imports torch or openvino).

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

from hdp.errors import InputError
from hdp.placers.options import PlacerOptions

#: method name -> "module:function" taking (options, PlaceContext) and returning Placed.
IMPLEMENTATIONS = {
    "single": "hdp.placers.basic:single",
    "hetero-auto": "hdp.placers.basic:hetero_auto",
    "pipeline-parallel": "hdp.placers.basic:pipeline_parallel",
    "random": "hdp.placers.classical:random_placement",
    "heft": "hdp.placers.classical:heft",
    "optimal": "hdp.placers.classical:optimal",
    "cp-sat": "hdp.placers.cpsat:cp_sat",
    "hsdag": "hdp.placers.hsdag:hsdag",
    "auto": "hdp.placers.auto:auto",
    "placeto": "hdp.placers.learned:placeto",
    "rnn-placer": "hdp.placers.learned:rnn_placer",
}

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
    """Collect the head-to-head comparisons (``hdp.runtime.measure.HeadToHead``) placers note with
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

    module: object  # hdp.ir.types.Module (features, coarse stages for the learned placer)
    problem: object  # hdp.placement.problem.PlacementProblem
    target: object = None  # hdp.runtime.target.Target (measured rewards)
    seed: int = 0
    timeout: float = 120.0  # seconds per measured placement before its worker is killed
    #: ``time.monotonic()`` when placing began: budgets count from here
    started: float = field(default_factory=time.monotonic)


@dataclass
class Placed:
    group_device: np.ndarray  # int16 per tie group of the problem
    info: dict = field(default_factory=dict)


def implementation(name: str):
    target = IMPLEMENTATIONS.get(name)
    if target is None:
        raise InputError(f"unknown method '{name}' (known: {', '.join(sorted(IMPLEMENTATIONS))})")
    mod, _, fn = target.partition(":")
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
    if kind not in served:
        from hdp.placers.options import METHODS

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
        from hdp.placement.memory import fit_error

        why = fit_error(p)
        if why:
            raise InputError(why)
    placed = implementation(options.name())(options, ctx)
    gd = np.asarray(placed.group_device, np.int16)
    if gd.shape != (p.n_groups,):
        raise AssertionError(f"method '{options.name()}' returned {gd.shape} devices for {p.n_groups} groups")
    if gd.size and not p.allowed[np.arange(gd.shape[0]), gd].all():
        raise AssertionError(f"method '{options.name()}' put a group on a device not allowed for it")
    from hdp.placement.subgraphs import untangle

    before = gd
    # HETERO must not cut a state's subgraph (hdp.placement.subgraphs); a random placement is kept
    # as near as legal, a placement chosen for its speed as fast as legal
    gd, moved = untangle(p, gd, nearest=options.name() == "random")
    if moved:
        placed.info["untangled_groups"] = moved
        if p.has_costs:
            from hdp.placement.simulate import Simulator

            placed.info["untangled_from_s"] = f"{Simulator(p).latency(before):.6g}"
    if p.memory_binds and gd.size:
        from hdp.placement.memory import size_text
        from hdp.placement.simulate import Simulator

        over = Simulator(p).over(gd)
        if over:
            dev, need, cap = over[0]
            raise InputError(f"{options.label()}: its placement needs {size_text(need)} on {dev}, over its memory "
                             f"of {size_text(cap)} (--memory {dev}=SIZE; optimal and heft respect capacities)")
    placed.group_device = gd
    return placed

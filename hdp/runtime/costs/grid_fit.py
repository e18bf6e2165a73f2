"""One-parameter fits of the simulator on a grid, for ``hdp calibrate``.

Two costs the boundary model (:mod:`hdp.runtime.costs.calibrate`) does not hold are fitted this way: the
concurrent executor's conversion cost per byte (:class:`ExecutorObservation`, :data:`CONVERT_GRID`)
and the throughput objective's hand-off per served HETERO subgraph (:class:`PipelineObservation`,
:data:`HANDOFF_GRID`). Each observation is a measured ratio with its 95 % interval and the
simulator's ratio at every value of its grid, so that the fit (:func:`fit_grid`: least squares on log
ratios, each divided by its standard error) needs no model of its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np

#: A measurement's standard error is never taken below this (log units): a very tight interval
#: from a quiet spell must not dominate the fit.
MIN_SE = 0.01


def standard_error(o) -> float:
    """The standard error (log units) of an observation's ratio from its 95 % interval; infinite
    without an interval, never below :data:`MIN_SE`."""
    if not (o.low > 0 and math.isfinite(o.high) and o.high > 0):
        return math.inf
    return max((math.log(o.high) - math.log(o.low)) / (2 * 1.96), MIN_SE)


class ExecutorObservation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One placement run by hdp's concurrent executor, measured head to head with the reference
    (every op on the first device, under HETERO): the measured ratio, and the simulator's ratio
    (:meth:`~hdp.placement.simulate.Simulator.latency_concurrent` over the reference's latency,
    with the executor's probed launch, hand-over and request costs) at each ``convert`` of ``grid``
    (seconds per byte), so that the fit needs no model."""

    model: str
    costs: str
    name: str
    heldout: bool
    ratio: float
    low: float
    high: float
    rounds: int
    subgraphs: int  # the executor's sub-models
    grid: tuple[float, ...]
    predicted: tuple[float, ...]

    def at(self, convert: float) -> float:
        """The simulator's ratio at ``convert`` (linear between grid points, clamped at its ends)."""
        return float(np.interp(convert, self.grid, self.predicted))


#: The ``convert`` values (seconds per byte) at which each executor observation is simulated:
#: 0 to 2 ms per MB (the probe reads 0.1-0.2 here; HETERO's fitted copy cost is 0.3 per MB for both sides).
CONVERT_GRID = tuple(float(x) for x in np.linspace(0.0, 2e-9, 41))


def fit_grid(obs) -> float | None:
    """The value on the observations' grid that best explains their measured ratios (each has
    ``ratio``, ``low``, ``high``, ``grid`` and ``at``): least squares on log ratios, each divided by
    its standard error (as the boundary fit), over the grid's range; None without observations."""
    from scipy.optimize import minimize_scalar

    use = [o for o in obs if o.ratio > 0 and o.grid and math.isfinite(standard_error(o))]
    if not use:
        return None
    se = np.array([standard_error(o) for o in use])
    meas = np.log([o.ratio for o in use])

    def loss(c: float) -> float:
        pred = np.log(np.maximum([o.at(c) for o in use], 1e-12))
        return float((((pred - meas) / se) ** 2).sum())

    lo, hi = min(o.grid[0] for o in use), max(o.grid[-1] for o in use)
    grid = np.linspace(lo, hi, 81)  # the loss is piecewise smooth: start from the best grid point
    best = float(grid[int(np.argmin([loss(c) for c in grid]))])
    step = (hi - lo) / 80
    r = minimize_scalar(loss, bounds=(max(lo, best - step), min(hi, best + step)), method="bounded")
    return float(r.x) if r.success and loss(r.x) <= loss(best) else best


def fit_convert(obs: Sequence[ExecutorObservation]) -> float | None:
    """The executor's ``convert`` (seconds per byte) that best explains its measured ratios
    (:func:`fit_grid`)."""
    return fit_grid(obs)


def grid_errors(obs, value: float) -> np.ndarray:
    """``predicted / measured - 1`` of each observation (executor or pipeline) at ``value``."""
    return np.array([o.at(value) / o.ratio - 1 for o in obs if o.ratio > 0])


class PipelineObservation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One placement served under HETERO with ``requests`` in flight, window beside window with the
    plain compile of the target's first device (:meth:`hdp.runtime.measure.measurer.Measurer.serve_beside`):
    ``ratio`` is the placement's seconds per request over the plain device's (Hodges-Lehmann over the
    paired windows, 95 % interval ``low``-``high``), ``predicted`` the simulator's period over the
    plain device's simulated compute at each ``handoff`` of ``grid`` (seconds per subgraph)."""

    model: str
    costs: str
    name: str
    heldout: bool
    requests: int
    ratio: float
    low: float
    high: float
    rounds: int
    subgraphs: int  # the simulator's
    hetero_subgraphs: int  # HETERO_NUMBER_OF_SUBMODELS of the served compile
    grid: tuple[float, ...]
    predicted: tuple[float, ...]

    def at(self, handoff: float) -> float:
        """The simulator's ratio at ``handoff`` (linear between grid points, clamped at its ends)."""
        return float(np.interp(handoff, self.grid, self.predicted))


#: The ``handoff`` values (seconds per served subgraph) each pipeline observation is simulated at:
#: 0 to 1 ms in 25 µs steps.
HANDOFF_GRID = tuple(float(x) for x in np.linspace(0.0, 1e-3, 41))


def grid_error_lines(obs, before: float, after: float, parts: str) -> list[str]:
    """Per model, held-out then fitted: the median and worst error of ``obs`` (executor or pipeline
    observations) at ``before`` and at ``after``; ``parts`` names what ``subgraphs`` counts."""
    lines = []
    for name in dict.fromkeys(o.model for o in obs):
        for label, sel in (("held out", True), ("fitted", False)):
            part = [o for o in obs if o.model == name and o.heldout == sel]
            if not part:
                continue
            b, a = grid_errors(part, before), grid_errors(part, after)
            lines.append(f"  {name} ({label}, {len(part)} placements, {min(o.subgraphs for o in part)}-"
                         f"{max(o.subgraphs for o in part)} {parts}): median |error| "
                         f"{np.median(np.abs(b)) * 100:.1f} % -> {np.median(np.abs(a)) * 100:.1f} %, worst "
                         f"{b[np.argmax(np.abs(b))] * 100:+.1f} % -> {a[np.argmax(np.abs(a))] * 100:+.1f} %")
    return lines

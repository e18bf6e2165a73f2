"""Two-stage pipelines over a placement problem's tie groups (and the cuts next to one's,
:func:`neighbour_cuts`, which ``auto`` serves): for each ordered pair of devices,
the groups up to a cut of their topological order on one and the rest on the other. ``auto`` takes
them as throughput candidates, ``optimal`` under the throughput objective keeps one when its program
(which over-charges copies, :mod:`hdp.placers.constrained`) finds nothing better in simulation, and
``hdp calibrate`` serves them."""

from __future__ import annotations

import numpy as np

#: Cut positions tried per device pair by :func:`pipeline_candidates` (every one below this many groups).
PIPELINE_CUTS = 1024


def pipeline_candidates(p, sim) -> list[tuple[str, np.ndarray, bool]]:
    """Two-stage pipelines for the throughput objective: for each ordered pair of devices, the
    tie groups up to a cut (groups are in topological order) on the first and the rest on the
    second, the cut with the lowest simulated period (at most :data:`PIPELINE_CUTS` positions, evenly
    spaced); only placements every group's device allows and memory fits. A HETERO split of such a
    placement is two submodels, one per device: the fewest stages, so the fewest conversions
    between them."""
    k = p.n_groups
    out = []
    if k < 2:
        return out
    cuts = np.unique(np.linspace(1, k - 1, min(k - 1, PIPELINE_CUTS)).round().astype(np.int64))
    idx = np.arange(k)
    for a in range(p.n_devices):
        for b in range(p.n_devices):
            if a == b:
                continue
            mat = np.where(idx[None, :] < cuts[:, None], a, b).astype(np.int16)
            ok = p.allowed[idx[None, :], mat].all(axis=1)
            if not ok.any():
                continue
            cost = np.where(ok, sim.costs(np.where(ok[:, None], mat, a)), np.inf)
            for j in np.argsort(cost, kind="stable"):
                if not np.isfinite(cost[j]):
                    break
                if sim.feasible(mat[j]):
                    out.append((f"pipeline:{p.devices[a]}>{p.devices[b]}", mat[j].copy(), False))
                    break
    return out


#: Cut moves (tie groups) around the best two-stage pipeline that ``auto`` also serves: on
#: virtual-2x1 a ResNet-50 pipeline cut after 48 % of its ops served 0.94 (2 in flight) and 0.91 (4)
#: of the plain two-stream compile's rate, cut after 50 or 52 % 0.98-0.99 (one process, 12 windows
#: each side by side): differences of a block or two that a profile's noise cannot rank.
SERVED_MOVES = (-1, 1, -3, 3)


def neighbour_cuts(p, sim, gd: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Two-stage pipelines whose cut is :data:`SERVED_MOVES` groups from ``gd``'s (a two-stage
    pipeline: groups up to the cut on one device, the rest on another), allowed and fitting."""
    gd = np.asarray(gd, np.int16)
    change = np.nonzero(gd[1:] != gd[:-1])[0]
    if change.size != 1:
        return []
    cut, a, b = int(change[0]) + 1, int(gd[0]), int(gd[-1])
    idx = np.arange(p.n_groups)
    out = []
    for m in SERVED_MOVES:
        c = cut + m
        if 1 <= c < p.n_groups:
            cand = np.where(idx < c, a, b).astype(np.int16)
            if p.allowed[idx, cand].all() and sim.feasible(cand):
                out.append((f"pipeline:{p.devices[a]}>{p.devices[b]}@{m:+d}", cand))
    return out

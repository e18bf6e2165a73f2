"""Greedy local refinement of a placement under the simulator's model of the problem's objective.

Each round considers moving one tie group that sits on a device boundary to the device of one of
its neighbours (where that device is allowed for it), evaluates all such moves at once with
:meth:`Simulator.costs`, and applies the best one that keeps every device within its memory if it
lowers the cost. It stops when no
move helps or after ``max_rounds``. The result is never worse than the input under the model.
"""

from __future__ import annotations

import numpy as np

from hdp.placement.problem import PlacementProblem
from hdp.placement.simulate import Simulator

_CHUNK = 512  # candidate placements evaluated per batch


def refine(problem: PlacementProblem, group_device: np.ndarray,
           max_rounds: int = 200) -> tuple[np.ndarray, float, float, int]:
    """Return (refined device per group, cost before, cost after, moves applied)."""

    sim = Simulator(problem)
    d = np.array(group_device, np.int64)
    before = cur = sim.cost(d)
    binds = problem.memory_binds
    k = d.shape[0]
    if k == 0 or sim.n_devices < 2:
        return d.astype(np.int16), before, cur, 0
    src, dst = sim.u_src, sim.u_dst
    allowed = problem.allowed
    moves = 0
    for _ in range(max_rounds):
        cross = d[src] != d[dst]
        # a group may move to the device of a neighbour across a boundary
        cand_g = np.concatenate([src[cross], dst[cross]])
        cand_dev = np.concatenate([d[dst[cross]], d[src[cross]]])
        keep = allowed[cand_g, cand_dev]
        pairs = np.unique(np.stack([cand_g[keep], cand_dev[keep]], axis=1), axis=0)
        if pairs.shape[0] == 0:
            break
        best, best_lat = None, cur
        for c in range(0, pairs.shape[0], _CHUNK):
            chunk = pairs[c:c + _CHUNK]
            mat = np.repeat(d[None, :], chunk.shape[0], axis=0)
            mat[np.arange(chunk.shape[0]), chunk[:, 0]] = chunk[:, 1]
            lat = sim.costs(mat)
            for j in np.argsort(lat, kind="stable"):
                if not lat[j] < best_lat * (1 - 1e-12):
                    break
                if not binds or sim.feasible(mat[j]):  # the cheapest move that keeps every device within its memory
                    best, best_lat = chunk[j], float(lat[j])
                    break
        if best is None:
            break
        d[best[0]] = best[1]
        cur = best_lat
        moves += 1
    return d.astype(np.int16), before, cur, moves

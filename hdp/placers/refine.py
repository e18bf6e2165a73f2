"""Greedy local refinement of a per-op placement under the simulator's sequential cost model.

Each round considers moving one op that sits on a device boundary to the device of one of its
neighbours (where that device supports it), evaluates all such moves at once with
:meth:`Simulator.latencies`, and applies the best one if it lowers the latency. It stops when no
move helps or after ``max_rounds``. Constant-like ops, Parameters and Results are not moved (the
assign pass co-locates them afterwards). The result is never worse than the input under the model.
"""

from __future__ import annotations

import numpy as np

from hdp.ir.build import constant_like, edge_sources
from hdp.ir.types import Module

_CHUNK = 512  # candidate placements evaluated per batch


def refine(module: Module, device_of: np.ndarray, max_rounds: int = 200) -> tuple[np.ndarray, float, float, int]:
    """Return (refined device_of, latency before, latency after, moves applied)."""
    from hdp.runtime.simulate import Simulator

    sim = Simulator(module, module.costs.devices)
    d = np.array(device_of, np.int64)
    before = cur = sim.latency(d)
    n = d.shape[0]
    if n == 0 or sim.n_devices < 2:
        return d.astype(np.int16), before, cur, 0
    g = module.graph
    movable = ~constant_like(g) & np.array([op.type not in ("Parameter", "Result") for op in g.ops])
    allowed = np.isfinite(sim.time)
    if module.support is not None and module.support.devices == module.costs.devices:
        allowed &= module.support.mask.numpy()
    src = edge_sources(g).astype(np.int64)
    dst = g.indices.numpy().astype(np.int64)
    moves = 0
    for _ in range(max_rounds):
        cross = d[src] != d[dst]
        # an op may move to the device of a neighbour across a boundary
        cand_op = np.concatenate([src[cross], dst[cross]])
        cand_dev = np.concatenate([d[dst[cross]], d[src[cross]]])
        keep = movable[cand_op] & allowed[cand_op, cand_dev]
        pairs = np.unique(np.stack([cand_op[keep], cand_dev[keep]], axis=1), axis=0)
        if pairs.shape[0] == 0:
            break
        best, best_lat = None, cur
        for k in range(0, pairs.shape[0], _CHUNK):
            chunk = pairs[k:k + _CHUNK]
            mat = np.repeat(d[None, :], chunk.shape[0], axis=0)
            mat[np.arange(chunk.shape[0]), chunk[:, 0]] = chunk[:, 1]
            lat = sim.latencies(mat)
            j = int(np.argmin(lat))
            if lat[j] < best_lat * (1 - 1e-12):
                best, best_lat = chunk[j], float(lat[j])
        if best is None:
            break
        d[best[0]] = best[1]
        cur = best_lat
        moves += 1
    return d.astype(np.int16), before, cur, moves

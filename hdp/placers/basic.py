"""Placements that need no cost model: one device, and OpenVINO's own rules (the fallback order
of ``hetero-auto`` and the memory split of ``pipeline-parallel``)."""

from __future__ import annotations

import numpy as np

from hdp.base.errors import InputError
from hdp.placers import PlaceContext, Placed
from hdp.placers.options import HeteroAuto, PipelineParallel, Single


def single(o: Single, ctx: PlaceContext) -> Placed:
    """Every op on one device."""
    p = ctx.problem
    name = o.device or p.devices[0]
    j = p.device_index(name)
    bad = np.nonzero(~p.allowed[:, j])[0]
    if bad.size:
        op = ctx.module.graph.ops[int(p.structure.members(int(bad[0]))[0])]
        raise InputError(f"single:{name}: device '{name}' cannot run op '{op.name}' ({op.type}) "
                         f"and {bad.size - 1} more groups; use hetero-auto or another method")
    return Placed(p.single(j), {"device": name})


def hetero_auto(o: HeteroAuto, ctx: PlaceContext) -> Placed:
    """Each tie group on the first device, in priority order, allowed for all of it."""
    p = ctx.problem
    order = list(o.priority) or list(p.devices)
    cols = [p.device_index(d) for d in order]
    sub = p.allowed[:, cols]
    none = np.nonzero(~sub.any(axis=1))[0]
    if none.size:
        op = ctx.module.graph.ops[int(p.structure.members(int(none[0]))[0])]
        raise InputError(f"hetero-auto: no device of {order} can run op '{op.name}' ({op.type})")
    first = np.argmax(sub, axis=1)
    return Placed(np.asarray(cols, np.int16)[first], {"priority": ",".join(order)})


def pipeline_parallel(o: PipelineParallel, ctx: PlaceContext) -> Placed:
    """OpenVINO's ``MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL`` split, as openvino#38250 describes
    it: walk the ops in topological order and fill the devices in priority order, each until
    ``margin`` (1.2) × the bytes of the constants placed on it would pass its memory (a device
    without a capacity, such as OpenVINO's CPU, is unlimited), then move on to the next. A group
    the current device cannot run goes to the first later device that can, without moving on.
    It counts constants only (no activations or state): :func:`hdp.placers.place` refuses the
    result when the estimate puts a device over its memory, as OpenVINO's compile would fail."""
    p = ctx.problem
    order = list(o.priority) or list(p.devices)
    cols = [p.device_index(d) for d in order]
    needs, caps = p.needs, p.caps
    k = p.n_groups
    units_of: list[list[int]] = [[] for _ in range(k)]
    for u in range(needs.u_bytes.shape[0]):
        for g in needs.u_groups[needs.u_ptr[u]:needs.u_ptr[u + 1]]:
            units_of[int(g)].append(u)
    used = np.zeros(p.n_devices)
    held = [set() for _ in range(p.n_devices)]
    gd = np.zeros(k, np.int16)
    cur = 0
    for g in range(k):
        while True:
            ok = [j for j in range(cur, len(cols)) if p.allowed[g, cols[j]]]
            if not ok:
                op = ctx.module.graph.ops[int(p.structure.members(g)[0])] if ctx.module is not None else None
                raise InputError(f"pipeline-parallel: no device of {order[cur:]} can run op "
                                 f"'{op.name if op else g}' or hold it")
            j = ok[0]
            d = cols[j]
            extra = needs.weights[g] + sum(needs.u_bytes[u] for u in units_of[g] if u not in held[d])
            if j == cur and j + 1 < len(cols) and used[d] + o.margin * extra > caps[d]:
                cur += 1  # this device is full: the next one in priority order
                continue
            break
        gd[g] = d
        used[d] += o.margin * extra
        held[d].update(units_of[g])
    return Placed(gd, {"priority": ",".join(order), "margin": o.margin})


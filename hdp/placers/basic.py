"""Placements that need no cost model: one device, and OpenVINO's own fallback rule."""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.placers import PlaceContext, Placed
from hdp.placers.options import HeteroAuto, Single


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

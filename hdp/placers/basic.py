"""Placements that need no cost model: one device, and OpenVINO's own fallback rule."""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.ir.types import Module
from hdp.placers import Placed, PlaceRequest, device_index, placer


@placer("single", requires=("support",))
def single(module: Module, req: PlaceRequest) -> Placed:
    """Every op on one device: single:<DEVICE> (default: the target's first device)."""
    name = req.arg or req.devices[0]
    j = device_index(req.devices, name)
    mask = module.support.mask.numpy()
    bad = np.nonzero(~mask[:, j])[0]
    if bad.size:
        op = module.graph.ops[bad[0]]
        raise InputError(f"single:{name}: device '{name}' does not support op '{op.name}' ({op.type}) "
                         f"and {bad.size - 1} more; use hetero-auto or another method")
    n = module.graph.n_ops
    return Placed(np.zeros(n, np.int32), np.array([j], np.int16), {"device": name})


@placer("hetero-auto", requires=("support",))
def hetero_auto(module: Module, req: PlaceRequest) -> Placed:
    """OpenVINO's rule: each op on the first device (in target order) that supports it."""
    order = list(req.devices)
    if req.arg:
        order = [d for d in req.arg.split(",") if d]
        for d in order:
            device_index(req.devices, d)
    mask = module.support.mask.numpy()
    cols = [req.devices.index(d) for d in order]
    sub = mask[:, cols]
    none = np.nonzero(~sub.any(axis=1))[0]
    if none.size:
        op = module.graph.ops[none[0]]
        raise InputError(f"hetero-auto: no device of {order} supports op '{op.name}' ({op.type})")
    first = np.argmax(sub, axis=1)
    return Placed.per_op(np.asarray(cols, np.int16)[first], {"priority": ",".join(order)})

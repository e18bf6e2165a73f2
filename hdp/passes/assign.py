"""``assign``: from groups to a device for every op.

Constants follow their consumer, Parameters their first consumer, Results their producer (HETERO
needs every op placed; splitting a Constant from its consumer hurts folding and accuracy). An op
placed on a device that does not support it moves to the first supporting device.
"""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.ir.build import constant_like, predecessors_csr
from hdp.ir.types import Array, Module, Placement
from hdp.passes.base import Pass, register


def colocate(module: Module, device_of: np.ndarray) -> np.ndarray:
    """Constants/Parameters take their first consumer's device, Results their producer's.

    Constant chains (Constant -> Convert -> consumer) are resolved by walking in reverse
    topological order, so every constant in a chain ends on the final consumer's device.
    """
    g = module.graph
    d = device_of.copy()
    indptr, indices = g.indptr.numpy(), g.indices.numpy()
    types = [op.type for op in g.ops]
    const_like = constant_like(g)
    pindptr, preds = predecessors_csr(g)
    for i in range(g.n_ops - 1, -1, -1):
        if (const_like[i] or types[i] == "Parameter") and indptr[i + 1] > indptr[i]:
            d[i] = d[indices[indptr[i]]]
    for i, t in enumerate(types):
        if t == "Result" and pindptr[i + 1] > pindptr[i]:
            d[i] = d[preds[pindptr[i]]]
    return d


def fix_support(module: Module, device_of: np.ndarray) -> tuple[np.ndarray, int]:
    """Move every op placed on a device that cannot run it to the first device that can (in the
    support table's order); returns (devices, number moved). InputError if no device can run an op."""
    d = np.array(device_of, np.int16)
    if module.support is None or not d.size:
        return d, 0
    mask = module.support.mask.numpy()
    bad = np.nonzero(~mask[np.arange(d.shape[0]), d])[0]
    if bad.size:
        none = bad[~mask[bad].any(axis=1)]
        if none.size:
            op = module.graph.ops[none[0]]
            raise InputError(f"no device of {module.support.devices} supports op '{op.name}' ({op.type})")
        d[bad] = np.argmax(mask[bad], axis=1)
    return d, int(bad.size)


@register
class AssignPass(Pass, tag="assign"):
    """Device per op from the partition; co-locate Constants/Parameters/Results; fix support;
    optionally refine greedily under the cost model."""

    refine: bool = False  # greedy boundary moves under the cost model (needs costs)
    refine_rounds: int = 200
    requires = ("graph", "partition")
    provides = ("placement",)

    def run(self, module: Module) -> Module:
        p = module.partition
        dev = p.group_device.numpy()[p.group_of.numpy()].astype(np.int16)
        if module.support is not None and module.support.devices != p.devices:
            raise InputError("support and partition disagree on the device list")
        dev, moved = fix_support(module, dev)
        info = dict(p.info)
        if self.refine:
            if module.costs is None:
                raise InputError("assign --set refine=true needs costs; run the profile pass first")
            if module.costs.devices != p.devices:
                raise InputError("costs and partition disagree on the device list")
            from hdp.placers.refine import refine

            dev, before, after, n_moves = refine(module, colocate(module, dev), self.refine_rounds)
            info.update(refine_before_s=f"{before:.6g}", refine_after_s=f"{after:.6g}", refine_moves=str(n_moves))
        if module.graph.n_ops:
            dev = colocate(module, dev)
        info["moved_unsupported"] = str(moved)
        pl = Placement(method=p.method, devices=p.devices, device_of=Array.of(dev, np.int16), info=info)
        return module.replace(placement=pl)

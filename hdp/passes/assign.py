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
        moved = 0
        if module.support is not None and module.graph.n_ops:
            mask = module.support.mask.numpy()
            if module.support.devices != p.devices:
                raise InputError("support and partition disagree on the device list")
            bad = np.nonzero(~mask[np.arange(dev.shape[0]), dev])[0]
            for i in bad:
                ok = np.nonzero(mask[i])[0]
                if ok.size == 0:
                    op = module.graph.ops[i]
                    raise InputError(f"no device of {p.devices} supports op '{op.name}' ({op.type})")
                dev[i] = ok[0]
            moved = int(bad.size)
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

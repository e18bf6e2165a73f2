"""``assign``: from a device per tie group to the device of every op.

Placed ops take their group's device; constant data and replicated shape chains show the device
of their first consumer (the written model gives every consumer its own copy, see
:mod:`hdp.placement.structure`). Optionally refines the placement greedily under the cost model.
With costs, ``info`` holds the simulated figures of the final placement.
"""

from __future__ import annotations

import numpy as np

from hdp.base.errors import InputError
from hdp.base.validation import Count
from hdp.ir.types import Array, Module, Placement
from hdp.passes.base import Pass
from hdp.placement.problem import Hosts, problem_of
from hdp.placement.simulate import SIMULATED_KEYS, Simulator
from hdp.placement.subgraphs import untangle
from hdp.placers.refine import refine


class AssignPass(Pass, tag="assign"):
    """Device per op from the partition; optionally refine greedily under the cost model."""

    refine: bool = False  # greedy boundary moves under the cost model (needs costs)
    refine_rounds: Count = 200
    requires = ("graph", "partition")
    provides = ("placement",)
    version = 4  # replicated chains priced once per device (the price depends on the placement alone); refined placements untangled for HETERO's state rule

    def needs(self) -> tuple[str, ...]:
        """``graph`` and ``partition``, and ``costs`` to refine."""
        return type(self).requires + (("costs",) if self.refine else ())

    def run(self, module: Module) -> Module:
        p = module.partition
        if module.support is not None and module.support.devices != p.devices:
            raise InputError("support and partition disagree on the device list")
        if self.refine_rounds < 0:
            raise InputError(f"refine_rounds must be >= 0, got {self.refine_rounds}")
        ties = p.extra_ties.numpy() if p.extra_ties is not None else ()
        problem = problem_of(module, p.devices, ties)
        if p.info.get("hosts_table"):  # placed on several hosts: priced on them
            try:
                problem = problem.with_hosts(Hosts.from_text(p.info["hosts_table"]))
            except ValueError as e:
                raise InputError(f"the partition's hosts record is broken ({e}); run the partition pass "
                                 f"again") from None
        gd = p.group_device.numpy().astype(np.int64)
        if gd.shape[0] != problem.n_groups:
            raise InputError(f"the partition has {gd.shape[0]} groups, the graph {problem.n_groups}; "
                             f"run the partition pass again")
        if gd.size and not problem.allowed[np.arange(gd.shape[0]), gd].all():
            bad = int(np.nonzero(~problem.allowed[np.arange(gd.shape[0]), gd])[0][0])
            op = module.graph.ops[int(problem.structure.members(bad)[0])]
            raise InputError(f"the partition puts op '{op.name}' ({op.type}) on {p.devices[gd[bad]]}, "
                             f"which cannot run it; run the partition pass again")
        info = {k: v for k, v in p.info.items() if k not in SIMULATED_KEYS}
        if self.refine:
            if module.costs is None:
                raise InputError("assign --set refine=true needs costs; run the profile pass first")


            gd, before, after, n_moves = refine(problem, gd, self.refine_rounds)
            gd, moved = untangle(problem, gd)  # a refined move may tangle a state (hdp.placement.subgraphs)
            gd = gd.astype(np.int64)
            info.update(refine_before_s=f"{before:.6g}", refine_after_s=f"{after:.6g}", refine_moves=str(n_moves))
            if moved:
                info["untangled_groups"] = str(moved)
        if module.costs is not None and problem.n_groups:
            info.update({k: str(v) for k, v in Simulator(problem).report(gd).items()})
        pl = Placement(method=p.method, devices=p.devices, device_of=Array.of(problem.op_devices(gd), np.int16),
                       info=info)
        return module.replace(placement=pl)

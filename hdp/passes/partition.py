"""``partition``: a device per tie group of the placement problem, by the chosen method."""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.ir.types import Array, Module, Partition
from hdp.passes.base import Pass
from hdp.placers.options import HeteroAuto, Method, method_from
from hdp.runtime.target import Target


class PartitionPass(Pass, tag="partition"):
    """Place the graph's tie groups with ``placer`` (``hdp passes`` lists the methods and options)."""

    target: Target
    placer: Method = HeteroAuto()
    seed: int = 0
    #: pairs of op ids that must share a device beyond the graph's own rules (learned by
    #: ``hdp compile`` when a placement failed its check)
    extra_ties: tuple[tuple[int, int], ...] = ()
    timeout: float = 120.0  # seconds per measured placement (hsdag:measure); not in the key
    requires = ("graph", "support")
    provides = ("partition",)
    key_exclude = ("timeout",)
    version = 4  # replicated chains priced once per device (the price depends on the placement alone); placements untangled for HETERO's state rule (hdp.placement.subgraphs)

    def needs(self) -> tuple[str, ...]:
        """``graph`` and ``support``, and the stages the method needs on this target."""
        return type(self).requires + tuple(s for s in self.placer.stages(self.target) if s not in type(self).requires)

    @classmethod
    def from_options(cls, options: dict) -> "PartitionPass":
        """From flat options, as ``--set`` gives them: ``method`` (``name[:arg]``), ``seed``,
        ``target`` and the method's own options."""
        opts = dict(options)
        target = opts.pop("target", None)
        if target is None:
            raise InputError("pass 'partition' needs a target (--target or --devices)")
        seed = opts.pop("seed", 0)
        try:
            seed = int(seed)
        except (TypeError, ValueError):
            raise InputError(f"pass 'partition': seed must be an integer, not {seed!r}") from None
        extra = {k: opts.pop(k) for k in ("timeout",) if k in opts}
        placer = method_from(str(opts.pop("method", "hetero-auto")), opts)
        try:
            return cls(target=target, placer=placer, seed=seed, **{k: float(v) for k, v in extra.items()})
        except ValueError:
            raise InputError(f"pass 'partition': timeout must be a number, not {extra['timeout']!r}") from None

    def run(self, module: Module) -> Module:
        from hdp.placement.problem import problem_of
        from hdp.placers import PlaceContext, place

        devices = self.target.device_names
        if module.support.devices != devices:
            raise InputError(f"support was computed for devices {module.support.devices}, "
                             f"not for target {devices}")
        problem = problem_of(module, devices, self.extra_ties)
        placed = place(self.placer, PlaceContext(module=module, problem=problem, target=self.target, seed=self.seed,
                                                  timeout=self.timeout))
        label = self.placer.label()
        info = {"method": label, **{k: str(v) for k, v in placed.info.items()}}
        part = Partition(method=label, devices=devices,
                         group_of=Array.of(problem.structure.anchor, np.int32),
                         group_device=Array.of(placed.group_device, np.int16), info=info,
                         extra_ties=Array.of(np.asarray(self.extra_ties, np.int32).reshape(-1, 2)) if self.extra_ties else None)
        return module.replace(partition=part)

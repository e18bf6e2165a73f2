"""``partition``: groups of ops and a device per group, by the chosen method."""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
from hdp.ir.types import Array, Module, Partition
from hdp.passes.base import Pass, register
from hdp.placers import PlaceRequest, parse_method, placers
from hdp.placers.hsdag import DEFAULTS as HSDAG
from hdp.runtime.target import Target


@register
class PartitionPass(Pass, tag="partition"):
    """Place the graph with ``method`` (see ``hdp passes`` for the list)."""

    target: Target
    method: str = "hetero-auto"
    seed: int = 0
    # optimal
    time_limit: float = 60.0  # ILP time limit, seconds
    mip_gap: float = 1e-4  # ILP relative gap at which HiGHS stops
    boundary_penalty: float | None = None  # seconds per copy (default: the link's subgraph overhead)
    # hsdag (see hdp/placers/hsdag.py for each option's meaning)
    reward: str = HSDAG["reward"]
    measure_runs: int = HSDAG["measure_runs"]
    budget: float = HSDAG["budget"]
    placements: int = HSDAG["placements"]
    episodes: int = HSDAG["episodes"]
    samples: int = HSDAG["samples"]
    lr: float = HSDAG["lr"]
    hidden: int = HSDAG["hidden"]
    warm_start: str = HSDAG["warm_start"]
    policy: str = HSDAG["policy"]
    checkpoint: str = HSDAG["checkpoint"]
    report: str = HSDAG["report"]
    algo: str = HSDAG["algo"]
    entropy: float = HSDAG["entropy"]
    reward_shape: str = HSDAG["reward_shape"]
    baseline: str = HSDAG["baseline"]
    cost_aware: bool = HSDAG["cost_aware"]
    timeout: float = HSDAG["timeout"]  # seconds per measured placement (hsdag:measure); not in the key
    requires = ("graph", "support")
    provides = ("partition",)
    key_exclude = ("timeout",)

    def options(self) -> dict:
        """Method-specific options (every field but the common ones)."""
        common = {"target", "method", "seed"}
        return {f: getattr(self, f) for f in self.__struct_fields__ if f not in common}

    def run(self, module: Module) -> Module:
        name, arg = parse_method(self.method)
        fn, needs, _ = placers()[name]
        missing = [s for s in needs if getattr(module, s) is None]
        if missing:
            raise InputError(f"method '{name}' needs {', '.join(missing)}; run "
                             f"{' and '.join(missing)} first")
        devices = self.target.device_names
        if module.support is not None and module.support.devices != devices:
            raise InputError(f"support was computed for devices {module.support.devices}, "
                             f"not for target {devices}")
        req = PlaceRequest(devices=devices, arg=arg, seed=self.seed, target=self.target,
                           options=self.options())
        placed = fn(module, req)
        info = {"method": self.method, **{k: str(v) for k, v in placed.info.items()}}
        part = Partition(method=self.method, devices=devices,
                         group_of=Array.of(placed.group_of, np.int32),
                         group_device=Array.of(placed.group_device, np.int16), info=info)
        return module.replace(partition=part)

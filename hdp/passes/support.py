"""``support``: which device of the target can run which op.

Real devices answer OpenVINO's ``query_model`` on the source model's specialisation (the names
in the answer mapped to op positions at once, see :func:`hdp.ir.openvino_frontend.supported_mask`);
modeled devices support the op types their target entry lists (all types when the list is empty). Parameters, Constants and Results
are supported everywhere (HETERO places them with their neighbours).
"""

from __future__ import annotations

import numpy as np

from hdp.ir.types import Array, Module, Support
from hdp.passes.base import Pass, register
from hdp.runtime.target import Target

ANYWHERE = frozenset({"Parameter", "Constant", "Result"})


@register
class SupportPass(Pass, tag="support"):
    """Ask every device of the target which ops it supports."""

    target: Target
    provides = ("support",)
    host_dependent = True  # real devices answer: the cache key includes the host
    requires = ("graph",)

    def run(self, module: Module) -> Module:
        g = module.graph
        n, devs = g.n_ops, self.target.devices
        mask = np.zeros((n, len(devs)), bool)
        real = [j for j, d in enumerate(devs) if d.kind == "real"]
        if real and n:
            from hdp.ir.openvino_frontend import read_specialised, supported_mask
            from hdp.runtime.devices import make_core

            # ask about the model as it is costed (the specialisation); the answer names ops of
            # that model object, mapped to positions right here
            model, ov_ops = read_specialised(module)
            core = make_core(self.target, [devs[j].name for j in real])
            for j in real:
                mask[:, j] = supported_mask(ov_ops, core.query_model(model, devs[j].name))
        types = np.array([op.type for op in g.ops], dtype=object)
        for j, d in enumerate(devs):
            if d.kind == "modeled":
                mask[:, j] = True if not d.supported_ops else np.isin(types, d.supported_ops)
        if n:
            mask[np.isin(types, list(ANYWHERE)), :] = True
        return module.replace(support=Support(devices=self.target.device_names, mask=Array.of(mask)))


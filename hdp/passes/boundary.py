"""``boundary``: apply a calibrated boundary model to the cost table (see :mod:`hdp.runtime.costs.calibrate`).

Runs after ``profile``. The link terms of the costs become the calibration's (per subgraph, per
copied tensor, per byte), converted into the profile's seconds with the profile's ``α`` when the
calibration measured this very cost table; every op's time on device ``d`` becomes
``δ_d · (m + λ · (t_d - m))`` (``m``: its mean over the devices that run it; ``δ``: the
calibration's correction of that device's profile; ``λ``: the real share of per-op differences
between devices). A cost table the calibration has not seen gets α = δ = 1 and the calibration's
median λ. The module's
``meta`` records what was applied: ``boundary`` (a description) and ``boundary_error`` (the
calibration's held-out error, which ``optimal`` uses as its margin).

``hdp compile`` inserts this pass when the hdp cache holds a calibration of the target for this
host and OpenVINO version (:func:`with_calibration`); ``hdp calibrate`` makes one.
"""

from __future__ import annotations

import math

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.ir.types import Array, Module
from hdp.passes.base import Pass
from hdp.runtime.costs.calibrate import BoundaryModel, ModelScale, calibration_for, costs_digest, op_common

#: Costs need a finite bandwidth: a calibration that found copies free per byte gets this.
MAX_BANDWIDTH = 1e19


class BoundaryPass(Pass, tag="boundary"):
    """Apply a calibrated boundary model (from `hdp calibrate`) to the costs."""

    boundary: BoundaryModel
    models: tuple[ModelScale, ...] = ()
    contrast: float = 1.0  # λ for a profile the calibration has not seen
    error: float = math.nan  # held-out |error| quantile of the calibration (optimal's margin)
    source: str = ""  # what the calibration is, for the record
    requires = ("costs",)
    provides = ("costs",)

    @classmethod
    def from_options(cls, options: dict) -> "BoundaryPass":
        """From ``--set`` options: only a whole calibration makes sense here, so say where one comes from."""

        if "boundary" not in options:
            raise InputError("pass 'boundary' applies a calibration: run `hdp calibrate MODEL --target T`, then "
                             "`hdp compile` inserts it after profile")
        try:
            return msgspec.convert(options, cls, strict=False)
        except msgspec.ValidationError as e:
            raise InputError(f"pass 'boundary': invalid option: {e}") from None

    def run(self, module: Module) -> Module:
        c = module.costs
        scale = next((m for m in self.models if m.costs == costs_digest(c)), None)
        alpha = scale.compute_scale if scale is not None else 1.0
        lam = scale.contrast if scale is not None else self.contrast
        t = np.array(c.op_time.numpy(), np.float64)
        mean = op_common(t)[:, None]
        with np.errstate(invalid="ignore"):  # inf stays inf (unsupported)
            t = np.where(np.isfinite(t), mean + lam * (t - mean), t)
        if scale is not None and len(scale.device_scale) == t.shape[1]:
            t = t * np.asarray(scale.device_scale, np.float64)[None, :]
        b = self.boundary
        bw = min(alpha / b.copy_per_byte, MAX_BANDWIDTH) if b.copy_per_byte > 0 else MAX_BANDWIDTH
        costs = msgspec.structs.replace(c, op_time=Array.of(t, np.float64), link_latency=b.copy_latency / alpha,
                                        link_bandwidth=bw, subgraph_overhead=b.subgraph_overhead / alpha)
        how = (f"calibrated boundary model ({b.describe()})"
               + (f", profile scale {alpha:.3f}, device scales "
                  f"{', '.join(f'{x:.3f}' for x in scale.device_scale)} and contrast {lam:.2f} of this profile"
                  if scale is not None else f"; this profile was not calibrated (scale 1, contrast {lam:.2f})")
               + (f"; {self.source}" if self.source else ""))
        meta = dict(module.meta, boundary=how)
        if math.isfinite(self.error):
            meta["boundary_error"] = repr(float(self.error))
        return module.replace(costs=costs, meta=meta)


def with_calibration(schedule: list, target, cache) -> list:
    """``schedule`` with a ``boundary`` pass after ``profile`` when the cache (a PassCache, or None
    for no cache) holds a calibration of ``target`` on this host; else unchanged."""

    if cache is None:
        return schedule
    cal = calibration_for(target, cache.dir)
    if cal is None:
        return schedule
    out = list(schedule)
    for i, p in enumerate(out):
        if p.pass_name() == "profile":
            out.insert(i + 1, BoundaryPass(boundary=cal.boundary, models=cal.models, contrast=cal.contrast,
                                           error=math.nan if cal.error is None else cal.error,
                                           source=f"hdp calibrate of {cal.created}, "
                                                  f"{len(cal.observations)} measured placements"))
            break
    return out

"""``profile``: per-op, per-device execution time (measured on real devices, modeled otherwise).

See :mod:`hdp.runtime.costs.profile` for how the real devices are run (one worker, interleaved rounds,
a time budget), how compiled nodes map back to ops, the roofline of modeled devices, and why per-op
times are not scaled to the measured whole-model latency; :mod:`hdp.runtime.measure.chunks` for how a
model of more than ``whole_max`` ops is profiled in chunks.
"""

from __future__ import annotations

from hdp.base.validation import AtLeastOne, Count, Duration, TimeLimit
from hdp.ir.types import Module
from hdp.passes.base import Pass
from hdp.runtime.costs.profile import profile_costs
from hdp.runtime.measure.chunks import CHUNK_OPS, WHOLE_MAX
from hdp.target.target import Target


class ProfilePass(Pass, tag="profile"):
    """Time every op on every device of the target (PERF_COUNT on real devices, roofline on modeled)."""

    target: Target
    runs: AtLeastOne = 10  # at most this many timed runs per device
    warmup: Count = 1
    seconds: Duration = 1.0  # ... and after min_runs, only as many as fit in this (timed runs of all devices)
    min_runs: AtLeastOne = 3  # a per-op median needs three runs
    #: per-op medians, devices of one kind pooled, the profile's own correction and shrinkage of
    #: per-op differences toward the device ratio (hdp.runtime.costs.denoise); false: per-op means as timed
    denoise: bool = True
    timeout: TimeLimit = 600.0  # seconds per device for compile + warm-up + runs (not part of the key)
    #: a model of more than ``whole_max`` ops is profiled in chunks of ``chunk`` ops, each distinct
    #: chunk once (hdp.runtime.measure.chunks; 0: whole, however large)
    chunk: Count = CHUNK_OPS
    whole_max: Count = WHOLE_MAX
    requires = ("graph",)
    provides = ("costs",)
    version = 4  # per-run samples: medians, pooled kinds, shrinkage and op_se; bytes per op on a shared DRAM
    host_dependent = True  # real devices answer: the cache key includes the host
    key_exclude = ("timeout",)

    def key_value(self):
        """The options but ``timeout``, and ``chunk``/``whole_max`` only when set otherwise than by
        default: profiles cached before chunking existed keep their keys (models of up to
        ``whole_max`` ops are profiled whole, as then)."""
        out = super().key_value()
        for f, default in (("chunk", CHUNK_OPS), ("whole_max", WHOLE_MAX)):
            if out[f] == default:
                del out[f]
        return out

    def run(self, module: Module) -> Module:
        costs, _ = profile_costs(module, self.target, runs=self.runs, warmup=self.warmup, seconds=self.seconds,
                                 min_runs=self.min_runs, timeout=self.timeout, denoise=self.denoise,
                                 chunk=self.chunk, whole_max=self.whole_max)
        return module.replace(costs=costs)

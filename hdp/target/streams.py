"""What a serving plan needs of a target's devices: streams, their efficiency, shared hardware.

A device's *stream efficiency* ``E`` says what two streams of one compiled model serve against one
(``2 E`` times; the plan model of :mod:`hdp.placement.plan` extends it to ``S`` streams as
``S / (1 + (1/E - 1)(S - 1))``). ``hdp calibrate`` fits it on each real device of the host (its
plain compile served with one and with two streams, side by side); without a fit a device gets its
kind's default (:data:`DEFAULT_EFFICIENCY`, assumptions, not measurements): a CPU whose one stream
already uses every core gains little from a second (0.6), a GPU overlaps one stream's host-side
gaps with another's (0.75). A CPU-plugin device the target caps at ``INFERENCE_NUM_THREADS=n``
runs at most ``n`` streams (the plugin gives a one-thread compile one stream whatever
``NUM_STREAMS`` asks; checked on OpenVINO 2026.4.1); other devices at most :data:`MAX_STREAMS`
of their kind. A device whose target declares a throughput-mode gain ``G`` above 1 (its
``stream_efficiency``: many streams serve up to ``G`` times one, fitted to published figures for
some targets, :mod:`hdp.runtime.costs.fitting`) gets ``E = G / (G + 1)``, the efficiency whose
``S``-stream speedup tends to ``G``; at that field's default of 1 its kind's default applies.
Priority: ``hdp calibrate``'s fit, then the target's gain, then the kind's default.

The target's ``[[shares]]`` (:class:`hdp.target.target.Share`) become the plan's resources:
devices that share ``compute`` are one compute resource, devices that share ``memory`` one memory
with the share's ``capacity`` (when declared).
"""

from __future__ import annotations

import os

import numpy as np

from hdp.placement.plan import DISPATCH, PlanDevices
from hdp.placement.plan import MAX_STREAMS as PLAN_MAX_STREAMS
from hdp.target.target import Target

#: Stream efficiency per device kind (plugin name prefix) when ``hdp calibrate`` fitted none.
DEFAULT_EFFICIENCY = {"CPU": 0.6, "GPU": 0.75, "NPU": 0.6}
#: Streams per device kind a plan may give one replica at most.
MAX_STREAMS = {"CPU": PLAN_MAX_STREAMS, "GPU": 4, "NPU": 4}


def _kind(device) -> str:
    return device.plugin_name.split(".")[0].upper()


def thread_cap(device) -> int | None:
    """A real CPU-plugin device's ``INFERENCE_NUM_THREADS`` when its config sets one above 0."""
    if device.kind != "real" or _kind(device) != "CPU":
        return None
    value = str(device.config.get("INFERENCE_NUM_THREADS", "")).strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def stream_efficiency(device, fitted: dict[str, float] | None = None) -> float:
    """The device's stream efficiency: ``hdp calibrate``'s fit (``fitted``, by device name), else
    its kind's default; 0.5 (a second stream adds nothing) for a one-thread CPU device."""
    if fitted and device.name in fitted:
        return float(min(max(fitted[device.name], 0.5), 1.0))
    gain = float(getattr(device, "stream_efficiency", 1.0))
    if gain > 1.0:  # the target's throughput-mode gain G: S streams serve up to G times one
        return gain / (gain + 1.0)
    cap = thread_cap(device)
    if cap == 1:
        return 0.5
    return DEFAULT_EFFICIENCY.get(_kind(device), 0.6)


def max_streams(device) -> int:
    """Streams one replica on the device may run (see the module docstring)."""
    cap = thread_cap(device)
    if cap is not None:
        return cap
    kind = _kind(device)
    if device.kind == "real" and kind == "CPU":
        return max(1, min(PLAN_MAX_STREAMS, os.cpu_count() or 1))
    return MAX_STREAMS.get(kind, 2)


def plan_devices(target: Target, devices, *, fitted: dict[str, float] | None = None,
                 dispatch: float | None = None) -> PlanDevices:
    """The :class:`~hdp.placement.plan.PlanDevices` of ``devices`` (names, in the problem's order)
    of ``target``: efficiency, streams, the compute and memory resources its shares make, and the
    dispatch cost (``dispatch``: calibrated, else :data:`hdp.placement.plan.DISPATCH`)."""
    names = list(devices)
    idx = {n: i for i, n in enumerate(names)}
    devs = [target.device(n) for n in names]
    compute = np.arange(len(names), dtype=np.int64)
    memory = np.arange(len(names), dtype=np.int64)
    capacity = np.full(len(names), np.inf)
    for s in target.shares:
        members = [idx[d] for d in s.devices if d in idx]
        if len(members) < 2:
            continue
        first = min(members)
        if s.resource == "compute":
            compute[members] = first
        else:
            memory[members] = first
            if s.capacity_bytes is not None:
                capacity[first] = float(s.capacity_bytes)
    return PlanDevices(np.array([stream_efficiency(d, fitted) for d in devs], np.float64),
                       np.array([max_streams(d) for d in devs], np.int64), compute, memory, capacity,
                       float(DISPATCH if dispatch is None else dispatch))

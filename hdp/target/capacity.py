"""Bytes each device of a target holds: declared, reported by OpenVINO, or the host's.

In order: a ``--memory DEV=SIZE`` override; the device's ``memory`` in the target; for a real
device whose plugin reports its memory, that (``GPU_DEVICE_TOTAL_MEM_SIZE``,
``NPU_DEVICE_TOTAL_MEM_SIZE``); for a real CPU plugin, the host's available memory
(``MemAvailable`` of /proc/meminfo: what can be allocated without swapping now); otherwise
unlimited (``inf``). CPU plugin instances registered under other names share that one figure.

Read when a placement is made, not part of the partition pass's cache key: only declared and
``--memory`` capacities are (a cached placement is reused however the host's free memory moved).

Each device's memory model (:class:`~hdp.placement.memory.DeviceMemory`, what
:mod:`hdp.placement.memory` adds to the stored bytes) comes from its ``memory_overhead`` and
``weight_copies`` in the target, else its kind's default in :data:`MEMORY_MODELS` (matched by
the plugin's name: ``CPU``, ``GPU.1`` and a modeled ``CPU`` are of kinds CPU, GPU and CPU). Its
compute precision is a real device's ``INFERENCE_PRECISION_HINT`` (f32 when it sets none) or a
modeled device's ``precision``. :func:`max_allocations` gives each device's cap on one tensor
(``max_allocation``), ``inf`` where the target declares none.
"""

from __future__ import annotations

import math
import os

import numpy as np

from hdp.base.cache import parse_size, shown
from hdp.base.errors import InputError
from hdp.placement.memory import DeviceMemory
from hdp.target.target import PRECISION_BYTES

#: OpenVINO properties that report a device's total memory, by plugin name prefix.
REPORTED = {"GPU": "GPU_DEVICE_TOTAL_MEM_SIZE", "NPU": "NPU_DEVICE_TOTAL_MEM_SIZE"}

#: Default memory model per device kind (plugin name prefix): (overhead bytes, weight copies at the
#: compute precision). CPU: measured here (bench/memory_check.py, OpenVINO 2026.4.1): a process's
#: resident memory grows by 43 MiB for the plugin, the stored weights it reads (the ``.bin`` pages stay
#: resident) and one repacked copy of every weight at the inference precision. Kinds not listed
#: (GPU, NPU: not measurable on this host) count their stored bytes alone.
MEMORY_MODELS = {"CPU": (43 * 2**20, 1.0)}


def host_available() -> float:
    """Bytes of memory available on this host now (``inf`` when it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def reported(device) -> float:
    """What the device's OpenVINO plugin reports as its total memory, else ``inf``."""
    key = next((v for k, v in REPORTED.items() if device.plugin_name.startswith(k)), None)
    if key is None or device.alias:
        return math.inf
    try:
        import openvino as ov

        return float(int(ov.Core().get_property(device.plugin_name, key)))
    except Exception:  # noqa: BLE001 - a plugin that is absent or does not report: unlimited
        return math.inf


def parse_overrides(specs, label: str = "--memory") -> tuple[tuple[str, int], ...]:
    """``("GPU=16GiB", ...)`` -> ``(("GPU", bytes), ...)``; InputError naming the bad one (after
    ``label``: the option or record they come from)."""

    out = []
    for spec in specs or ():
        name, eq, size = str(spec).partition("=")
        if not eq or not name.strip():
            raise InputError(f"{label} {shown(spec)}: expected DEVICE=SIZE (like GPU=16GiB)")
        try:
            out.append((name.strip(), parse_size(size)))
        except ValueError as e:
            if not str(e).startswith("not a size"):
                raise InputError(f"{label} {shown(spec)}: {e}") from None
            raise InputError(f"{label} {shown(spec)}: not a size: {shown(size)!r} (bytes, or like 16GiB, 512MiB)") from None
    return tuple(out)


def caps_record(overrides) -> str:
    """``--memory`` caps ``((device, bytes), ...)`` as the text a placement records them in
    (``"GPU=17179869184,NPU=..."``: the partition's info, the written model's ``hdp/memory_caps``)."""
    return ",".join(f"{d}={b}" for d, b in overrides)


def parse_caps_record(text) -> tuple[tuple[str, int], ...]:
    """:func:`caps_record`'s text back to ``((device, bytes), ...)`` (empty for none)."""
    return parse_overrides((c for c in str(text or "").split(",") if c), label="memory_caps")


def capacities(target, overrides=()) -> np.ndarray:
    """Bytes per device of ``target`` in its order (``inf``: unlimited); ``overrides`` are
    ``(device, bytes)`` pairs (an unknown device is an InputError)."""
    over = dict(overrides)
    for name in over:
        target.device(name)  # names the target's devices when it has no such one
    out = []
    for d in target.devices:
        if d.name in over:
            out.append(float(over[d.name]))
        elif d.memory is not None:
            out.append(float(d.memory_bytes))
        elif d.kind != "real":
            out.append(math.inf)
        elif d.plugin_name.startswith("CPU"):
            out.append(host_available())
        else:
            out.append(reported(d))
    return np.array(out, np.float64)


def max_allocations(target) -> np.ndarray:
    """Bytes one tensor may take on each device of ``target``, in its order (its ``max_allocation``;
    ``inf`` where it declares none)."""
    return np.array([math.inf if d.max_allocation is None else float(d.max_allocation_bytes)
                     for d in target.devices], np.float64)


def _precision(device) -> str:
    if device.kind == "modeled":
        return device.precision
    hint = str(device.config.get("INFERENCE_PRECISION_HINT", "f32")).lower()
    return hint if hint in PRECISION_BYTES else "f32"


def device_memory(target):
    """The :class:`~hdp.placement.memory.DeviceMemory` of ``target``'s devices, in its order (see the
    module docstring)."""

    over, copies, pbytes = [], [], []
    for d in target.devices:
        kind = next((k for k in MEMORY_MODELS if d.plugin_name.upper().startswith(k)), None)
        o, c = MEMORY_MODELS.get(kind, (0, 0.0))
        if d.memory_overhead is not None:
            o = d.memory_overhead if isinstance(d.memory_overhead, int) else parse_size(d.memory_overhead)
        if d.weight_copies is not None:
            c = d.weight_copies
        over.append(float(o))
        copies.append(float(c))
        pbytes.append(float(PRECISION_BYTES[_precision(d)]))
    return DeviceMemory(np.array(over), np.array(copies), np.array(pbytes))

"""Turning a Target into an ``ov.Core`` with its real devices registered and configured."""

from __future__ import annotations

import os

from hdp.base.errors import InputError
from hdp.target.target import Target

_PLUGIN_LIBS = {"CPU": "openvino_intel_cpu_plugin", "GPU": "openvino_intel_gpu_plugin",
                "NPU": "openvino_intel_npu_plugin"}


def plugin_library(plugin: str) -> str:
    """Path of the shared library of a built-in OpenVINO plugin (CPU, GPU, NPU)."""
    import openvino as ov

    base = _PLUGIN_LIBS.get(plugin.split(".")[0])
    if base is None:
        raise InputError(f"cannot register an alias of plugin '{plugin}' (known: {', '.join(_PLUGIN_LIBS)})")
    path = os.path.join(os.path.dirname(ov.__file__), "libs", f"lib{base}.so")
    if not os.path.exists(path):
        raise InputError(f"plugin library for '{plugin}' not found at {path}")
    return path


def make_core(target: Target, devices: list[str] | None = None):
    """An ``ov.Core`` where every real device of ``target`` (or the named subset) exists and is
    configured. Raises InputError for a device absent from this host."""
    import openvino as ov

    core = ov.Core()
    wanted = [target.device(n) for n in devices] if devices else list(target.devices)
    for d in wanted:
        if d.kind != "real":
            raise InputError(f"device '{d.name}' of target '{target.name}' is modeled; it cannot run on this host")
        if d.alias:
            if d.name not in core.get_available_devices():
                try:
                    core.register_plugin(plugin_library(d.plugin), d.name)
                except RuntimeError as e:
                    raise InputError(f"cannot register device '{d.name}' from plugin '{d.plugin}': {e}") from None
        avail = core.get_available_devices()
        # "GPU" is present when OpenVINO lists GPU.0, GPU.1, ...
        if d.name not in avail and not any(a.split(".")[0] == d.name for a in avail):
            raise InputError(absent_message(target, d.name, avail))
        if d.config:
            try:
                core.set_property(d.name, dict(d.config))
            except RuntimeError as e:
                msg = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                raise InputError(f"device '{d.name}': invalid config {d.config}: {msg}") from None
    return core


def absent_message(target: Target, name: str, available: list[str]) -> str:
    """Why device ``name`` of ``target`` cannot run here, in the words of the option that named it:
    ``--devices GPU: this host has no device 'GPU' (OpenVINO sees: CPU)`` for an ad-hoc target."""
    sees = f"OpenVINO sees: {', '.join(available) or 'nothing'}"
    if target.name == "+".join(target.device_names):  # from --devices (hdp.target.target.devices_target)
        return f"--devices {','.join(target.device_names)}: this host has no device '{name}' ({sees})"
    return f"device '{name}' of target '{target.name}' is not present on this host ({sees})"


def check_present(target: Target) -> None:
    """Refuse, before any work, a real device of ``target`` that this host does not have (an alias
    counts when its plugin is present); InputError in :func:`absent_message`'s words."""
    import openvino as ov

    avail = list(ov.Core().available_devices)
    for d in target.devices:
        if d.kind == "real" and device_status(d, avail) == "absent":
            raise InputError(absent_message(target, d.name, avail))


def device_status(device, available: list[str]) -> str:
    """``present``, ``absent`` or ``modeled`` for one device of a target on this host."""
    if device.kind == "modeled":
        return "modeled"
    base = device.name.split(".")[0]
    if device.name in available or base in available or any(a.split(".")[0] == device.name for a in available):
        return "present"  # GPU.1 is a GPU; GPU names the first of GPU.0, GPU.1
    if device.alias and device.plugin_name.split(".")[0] in available:
        return "present"  # registered from its plugin by make_core
    return "absent"


def hetero_name(devices) -> str:
    return "HETERO:" + ",".join(devices)


def hetero_config(target: Target, devices, config=None) -> dict:
    """The properties to compile (or import) a placement under HETERO on ``devices`` with: ``config``
    plus, for each device whose target config caps its threads (``INFERENCE_NUM_THREADS``),
    ``EXCLUSIVE_ASYNC_REQUESTS=NO`` through ``DEVICE_PROPERTIES``.

    HETERO compiles the subgraphs of a split model with exclusive async requests, and the CPU plugin
    (OpenVINO 2026.4) then runs each of them on every core, whatever its thread cap: on
    ``virtual-2x1`` a 16-MatMul chain split in two halves took 6.2 ms with both cores busy against
    11.4 ms on one 1-thread device, and 11.5 ms with one core busy once exclusive requests were
    turned off for the two devices (a model on one device is compiled without them). The devices
    of a target are what it declares only with this override. Set globally (``core.set_property``)
    it does not reach HETERO's subgraphs; as a device property of the HETERO compile it does, and
    the device's global config still applies."""
    out = dict(config or {})
    capped = {d: {"EXCLUSIVE_ASYNC_REQUESTS": "NO"} for d in devices
              if "INFERENCE_NUM_THREADS" in target.device(d).config}
    if capped:
        given = dict(out.get("DEVICE_PROPERTIES") or {})
        for d, props in capped.items():
            given[d] = {**props, **dict(given.get(d) or {})}
        out["DEVICE_PROPERTIES"] = given
    return out


def host_kinds() -> list[str]:
    """The device kinds of this host (``CPU``, ``GPU``, ``NPU``: OpenVINO's available devices
    without their ``.N``), in OpenVINO's order: each has a default plain compile, the reference
    of every verdict."""
    import openvino as ov

    out: list[str] = []
    for d in ov.Core().available_devices:
        base = d.split(".")[0]
        if base not in out:
            out.append(base)
    return out

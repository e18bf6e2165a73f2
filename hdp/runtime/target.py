"""Targets: the set of devices a model is placed on, and the link between them.

A target is a TOML file decoded with msgspec::

    name = "virtual"
    [[devices]]
    name = "CPU"              # the name used in affinities and HETERO's device list
    kind = "real"             # real: an OpenVINO plugin; modeled: a cost model from specs
    plugin = "CPU"            # the OpenVINO plugin this device is (or is registered from)
    alias = ""                # register the plugin library again under ``name`` (CPU_B ...)
    config = { INFERENCE_PRECISION_HINT = "f32" }

    [[devices]]
    name = "GPU"
    kind = "modeled"
    peak_flops = { f32 = 16.4e12, f16 = 32.8e12 }
    precision = "f16"
    memory_bandwidth = 512e9
    op_overhead = 8e-6
    supported_ops = []        # empty: every op type; otherwise the list it supports

    [link]
    latency = 20e-6
    bandwidth = 16e9
    subgraph_overhead = 30e-6

This module does not import openvino; :mod:`hdp.runtime.devices` does the registering.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec

from hdp.errors import InputError


class Device(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    kind: Literal["real", "modeled"] = "real"
    plugin: str = ""
    alias: bool = False
    config: dict[str, str] = {}
    # modeled devices
    peak_flops: dict[str, float] = {}
    precision: str = "f32"
    memory_bandwidth: float = 0.0
    op_overhead: float = 0.0
    supported_ops: list[str] = []
    description: str = ""

    @property
    def plugin_name(self) -> str:
        return self.plugin or self.name


class Link(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    latency: float = 20e-6
    bandwidth: float = 10e9
    subgraph_overhead: float = 50e-6


class Target(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: str
    devices: list[Device]
    link: Link = Link()
    description: str = ""

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def device(self, name: str) -> Device:
        for d in self.devices:
            if d.name == name:
                return d
        raise InputError(f"target '{self.name}' has no device '{name}' (has {', '.join(self.device_names)})")

    @property
    def is_real(self) -> bool:
        return all(d.kind == "real" for d in self.devices)


def _validate(t: Target, source: str) -> Target:
    if not t.devices:
        raise InputError(f"{source}: target has no devices (field 'devices')")
    names = [d.name for d in t.devices]
    for i, d in enumerate(t.devices):
        where = f"{source}: devices[{i}]"
        if not d.name or any(c in d.name for c in ",:() "):
            raise InputError(f"{where}.name: invalid device name '{d.name}'")
        if names.count(d.name) > 1:
            raise InputError(f"{where}.name: duplicate device '{d.name}'")
        if d.kind == "modeled":
            if not d.peak_flops or d.precision not in d.peak_flops:
                raise InputError(f"{where}.peak_flops: needs an entry for precision '{d.precision}'")
            if d.memory_bandwidth <= 0:
                raise InputError(f"{where}.memory_bandwidth: must be > 0 for a modeled device")
        if d.alias and not d.plugin:
            raise InputError(f"{where}.plugin: an aliased device must name the plugin it registers")
    if t.link.bandwidth <= 0:
        raise InputError(f"{source}: link.bandwidth must be > 0")
    return t


def parse_target(data: bytes | str, source: str = "<target>") -> Target:
    try:
        t = msgspec.toml.decode(data, type=Target)
    except msgspec.ValidationError as e:
        raise InputError(f"{source}: invalid target: {e}") from None
    except msgspec.DecodeError as e:
        raise InputError(f"{source}: malformed TOML: {e}") from None
    return _validate(t, source)


def builtin_names() -> list[str]:
    names = ["host"]
    for f in sorted(resources.files("hdp.runtime").joinpath("targets").iterdir()):
        if f.name.endswith(".toml"):
            names.append(f.name[: -len(".toml")])
    return names


def host_target(available: list[str] | None = None) -> Target:
    """The OpenVINO devices present on this machine, each with explicit f32 precision on CPU."""
    if available is None:
        import openvino as ov

        available = ov.Core().available_devices
    devs = []
    for name in available:
        cfg = {"INFERENCE_PRECISION_HINT": "f32"} if name.startswith("CPU") else {}
        devs.append(Device(name=name, kind="real", plugin=name, config=cfg))
    return Target(name="host", devices=devs, description="the OpenVINO devices on this machine")


def devices_target(names: list[str]) -> Target:
    """An ad-hoc target of real devices, as from ``--devices CPU,GPU``."""
    devs = []
    for n in names:
        cfg = {"INFERENCE_PRECISION_HINT": "f32"} if n.startswith("CPU") else {}
        devs.append(Device(name=n, kind="real", plugin=n, config=cfg))
    return _validate(Target(name="+".join(names), devices=devs), "--devices")


def load_target(spec: str) -> Target:
    """A built-in target by name, or a TOML file by path."""
    if spec == "host":
        return host_target()
    p = Path(spec)
    if p.suffix == ".toml" or os.sep in spec or p.exists():
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{spec}: no such target file") from None
        return parse_target(data, str(p))
    res = resources.files("hdp.runtime").joinpath("targets", f"{spec}.toml")
    if not res.is_file():
        raise InputError(f"unknown target '{spec}' (built in: {', '.join(builtin_names())}; or a .toml file)")
    return parse_target(res.read_bytes(), f"target '{spec}'")

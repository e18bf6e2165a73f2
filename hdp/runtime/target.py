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
    efficiency = 0.5          # fraction of peak_flops reached on real layers (default 1.0)
    supported_ops = []        # empty: every op type; otherwise the list it supports

    [link]
    latency = 20e-6
    bandwidth = 16e9
    subgraph_overhead = 30e-6

Modeled devices are costed by a roofline (:mod:`hdp.runtime.profile`): an op takes
``max(flops / (peak_flops[precision] * efficiency), bytes / memory_bandwidth) + op_overhead`` seconds,
where ``bytes`` counts its input and output tensors with floating-point tensors stored at the
device's ``precision`` (f32 = 4 bytes, f16/bf16 = 2, i8 = 1). ``efficiency`` (0 < e <= 1) is the
share of the published peak a device sustains on real layers; peaks are rarely reached, so a
modeled target should state its assumption there.

Every field error names its path (``devices[0].peak_flops: Expected `object`, got `str```).
This module does not import openvino; :mod:`hdp.runtime.devices` does the registering.
"""

from __future__ import annotations

import math
import os
import re
from importlib import resources
from pathlib import Path
from typing import Literal

import msgspec

from hdp.errors import InputError


#: Bytes per element of a floating-point tensor stored at a modeled device's precision.
PRECISION_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i8": 1, "u8": 1}


def _with_path(msg: str) -> str:
    """msgspec says ``Expected `float`, got `str` - at `$.link.bandwidth```; put the field first."""
    m = re.match(r"(?s)(.*) - at `\$\.?(.*)`$", msg)
    return f"{m.group(2) or '(top level)'}: {m.group(1)}" if m else msg


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
    efficiency: float = 1.0
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


#: Bounds of the numbers a target may hold: outside them a cost model overflows or means nothing.
MAX_DEVICES = 64
_RATE = (1e3, 1e19)  # FLOP/s and bytes/s
_SECONDS = (0.0, 10.0)  # per-op, per-copy and per-subgraph overheads
_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


def _number(where: str, x, lo: float, hi: float, lo_open: bool = False) -> None:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise InputError(f"{where}: must be a finite number, got {x!r}")
    if x < lo or (lo_open and x == lo) or x > hi:
        lo_s = f"({lo:g}" if lo_open else f"[{lo:g}"
        raise InputError(f"{where}: {x!r} is out of range {lo_s}, {hi:g}]")


def validate_target(t: Target, source: str) -> Target:
    """Check a decoded target field by field; InputError naming the first bad field."""
    if not t.name.strip():
        raise InputError(f"{source}: name: must not be empty")
    if not t.devices:
        raise InputError(f"{source}: target has no devices (field 'devices')")
    if len(t.devices) > MAX_DEVICES:
        raise InputError(f"{source}: devices: {len(t.devices)} devices, at most {MAX_DEVICES}")
    names = [d.name for d in t.devices]
    for i, d in enumerate(t.devices):
        where = f"{source}: devices[{i}]"
        if not _NAME_RE.match(d.name):
            raise InputError(f"{where}.name: invalid device name '{d.name}' (letters, digits, '_', '.', '-')")
        if d.name in names[:i]:
            raise InputError(f"{where}.name: duplicate device '{d.name}'")
        if d.plugin and not _NAME_RE.match(d.plugin):
            raise InputError(f"{where}.plugin: invalid plugin name '{d.plugin}'")
        for k in d.config:
            if not k.strip():
                raise InputError(f"{where}.config: empty key")
        if d.kind == "modeled":
            if d.precision not in PRECISION_BYTES:
                raise InputError(f"{where}.precision: unknown precision '{d.precision}' "
                                 f"(known: {', '.join(PRECISION_BYTES)})")
            if not d.peak_flops or d.precision not in d.peak_flops:
                raise InputError(f"{where}.peak_flops: needs an entry for precision '{d.precision}'")
            for k, v in d.peak_flops.items():
                if k not in PRECISION_BYTES:
                    raise InputError(f"{where}.peak_flops.{k}: unknown precision (known: {', '.join(PRECISION_BYTES)})")
                _number(f"{where}.peak_flops.{k}", v, *_RATE)
            _number(f"{where}.memory_bandwidth", d.memory_bandwidth, *_RATE)
            _number(f"{where}.efficiency", d.efficiency, 0.0, 1.0, lo_open=True)
            _number(f"{where}.op_overhead", d.op_overhead, *_SECONDS)
            bad = [op for op in d.supported_ops if not op.strip()]
            if bad:
                raise InputError(f"{where}.supported_ops: empty op type")
        if d.alias and not d.plugin:
            raise InputError(f"{where}.plugin: an aliased device must name the plugin it registers")
    _number(f"{source}: link.bandwidth", t.link.bandwidth, *_RATE)
    for field in ("latency", "subgraph_overhead"):
        _number(f"{source}: link.{field}", getattr(t.link, field), *_SECONDS)
    return t


def parse_target(data: bytes | str, source: str = "<target>") -> Target:
    try:
        t = msgspec.toml.decode(data, type=Target)
    except msgspec.ValidationError as e:
        raise InputError(f"{source}: invalid target: {_with_path(str(e))}") from None
    except msgspec.DecodeError as e:
        raise InputError(f"{source}: malformed TOML: {e}") from None
    return validate_target(t, source)


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
    return validate_target(Target(name="+".join(names), devices=devs), "--devices")


def target_file(spec: str) -> Path | None:
    """The file a target spec names (a ``.toml``, a path, or an existing file), else None."""
    p = Path(spec)
    if spec != "host" and (p.suffix == ".toml" or os.sep in spec or p.exists()):
        return p
    return None


def load_target(spec: str) -> Target:
    """A built-in target by name, or a TOML file by path."""
    if spec == "host":
        return host_target()
    p = target_file(spec)
    if p is not None:
        if p.is_dir():
            raise InputError(f"{spec}: is a directory, expected a target .toml file")
        try:
            data = p.read_bytes()
        except FileNotFoundError:
            raise InputError(f"{spec}: no such target file") from None
        except OSError as e:
            raise InputError(f"{spec}: cannot read the target file ({e.strerror or e})") from None
        return parse_target(data, str(p))
    res = resources.files("hdp.runtime").joinpath("targets", f"{spec}.toml")
    if not res.is_file():
        raise InputError(f"unknown target '{spec}' (built in: {', '.join(builtin_names())}; or a .toml file)")
    return parse_target(res.read_bytes(), f"target '{spec}'")

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
    memory = "16GiB"          # bytes it holds (an integer, or "512MiB", "16GiB", "1.5G": powers of 1024)
    memory_overhead = "0"     # bytes it needs once it runs anything (default: its kind's, see below)
    weight_copies = 0         # copies of its weights it holds at its precision besides the stored ones

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

``memory`` caps what a placement may put on a device (:mod:`hdp.placement.memory` estimates
the bytes). Without it a real device's capacity is read from OpenVINO where the plugin reports
one (``GPU_DEVICE_TOTAL_MEM_SIZE``, ``NPU_DEVICE_TOTAL_MEM_SIZE``), a real CPU's is the host's
available memory, and a modeled device's is unlimited (:mod:`hdp.runtime.capacity`);
``--memory DEV=SIZE`` overrides all of these. ``memory_overhead`` and ``weight_copies`` are the
device's memory model (:mod:`hdp.placement.memory`); without them a device gets its kind's
(:data:`hdp.runtime.capacity.MEMORY_MODELS`: the CPU plugin's measured on this host, none for others).

The bounds of every field are declared on it (:mod:`hdp.validation`); :func:`validate_target`
adds the rules between fields. Every error names its path (``devices[0].peak_flops.f32: must be
a finite number in [1000, 1e+19], got inf``). This module does not import openvino;
:mod:`hdp.runtime.devices` does the registering.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hdp.errors import InputError
from hdp.validation import convert, recheck


#: Bytes per element of a floating-point tensor stored at a modeled device's precision.
PRECISION_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i8": 1, "u8": 1}
Precision = Literal[tuple(PRECISION_BYTES)]

#: Bounds of the numbers a target may hold: outside them a cost model overflows or means nothing.
MAX_DEVICES = 64
RATE_MIN, RATE_MAX = 1e3, 1e19
Rate = Annotated[float, Meta(ge=RATE_MIN, le=RATE_MAX)]  # FLOP/s and bytes/s
Seconds = Annotated[float, Meta(ge=0, le=10)]  # per-op, per-copy and per-subgraph overheads
_NAME = r"[A-Za-z0-9_.\-]{1,64}"
Name = Annotated[str, Meta(pattern=f"^{_NAME}$", description="1 to 64 letters, digits, '_', '.', '-'")]
Plugin = Annotated[str, Meta(pattern=f"^(?:{_NAME})?$", description="empty or 1 to 64 letters, digits, '_', '.', '-'")]
NotBlank = Annotated[str, Meta(pattern=r"\S", description="a string that is not blank")]


class Device(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: Name
    kind: Literal["real", "modeled"] = "real"
    plugin: Plugin = ""  # "": the device's name
    alias: bool = False
    config: dict[NotBlank, str] = {}
    # modeled devices
    peak_flops: dict[Precision, Rate] = {}
    precision: Precision = "f32"
    memory_bandwidth: Annotated[float, Meta(ge=0, le=RATE_MAX)] = 0.0  # a modeled device needs >= RATE_MIN
    op_overhead: Seconds = 0.0
    efficiency: Annotated[float, Meta(gt=0, le=1)] = 1.0
    supported_ops: list[NotBlank] = []
    description: str = ""
    #: bytes the device holds: an integer or a size ("16GiB"); None: as the device reports
    memory: Annotated[int, Meta(ge=0)] | str | None = None
    #: the device's memory model (hdp.placement.memory): bytes it needs as soon as it runs a group, and
    #: copies of its weights it holds at its compute precision besides the stored ones; None: its
    #: kind's default (hdp.runtime.capacity.MEMORY_MODELS)
    memory_overhead: Annotated[int, Meta(ge=0)] | str | None = None
    weight_copies: Annotated[float, Meta(ge=0, le=16)] | None = None

    @property
    def plugin_name(self) -> str:
        return self.plugin or self.name

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes (checked by :func:`check_rules`), None when not declared."""
        if self.memory is None or isinstance(self.memory, int):
            return self.memory
        from hdp.cache import parse_size

        return parse_size(self.memory)


class Link(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    latency: Seconds = 20e-6
    bandwidth: Rate = 10e9
    subgraph_overhead: Seconds = 50e-6


class Target(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: NotBlank
    devices: Annotated[list[Device], Meta(max_length=MAX_DEVICES)]  # at least one: check_rules
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


def validate_target(t: Target, source: str) -> Target:
    """Check a target built in Python against the declared bounds, then :func:`check_rules`."""
    return check_rules(recheck(t, _message(source)), source)


def check_rules(t: Target, source: str) -> Target:
    """The rules between fields (the bounds of each field are declared); InputError naming the
    first field that breaks one."""
    if not t.devices:  # a rule, not a bound: a Target value (in a worker request) may hold none
        raise InputError(f"{source}: target has no devices (field 'devices')")
    names = [d.name for d in t.devices]
    for i, d in enumerate(t.devices):
        where = f"{source}: devices[{i}]"
        if d.name in names[:i]:
            raise InputError(f"{where}.name: duplicate device '{d.name}'")
        for field in ("memory", "memory_overhead"):
            value = getattr(d, field)
            if isinstance(value, str):
                from hdp.cache import parse_size

                try:
                    parse_size(value)
                except ValueError:
                    raise InputError(f"{where}.{field}: not a size: {value!r} (bytes as an integer, or like "
                                     f"\"16GiB\", \"512MiB\")") from None
        if d.alias and not d.plugin:
            raise InputError(f"{where}.plugin: an aliased device must name the plugin it registers")
        if d.kind == "modeled":
            if d.precision not in d.peak_flops:
                raise InputError(f"{where}.peak_flops: needs an entry for precision '{d.precision}'")
            if d.memory_bandwidth < RATE_MIN:
                raise InputError(f"{where}.memory_bandwidth: a modeled device needs one in "
                                 f"[{RATE_MIN:g}, {RATE_MAX:g}] bytes/s, got {d.memory_bandwidth!r}")
    return t


def _message(source: str):
    return lambda path, what: f"{source}: invalid target: {path}: {what}"


def target_from(data, source: str) -> Target:
    """A Target from decoded builtins (a TOML table, a JSON record), checked."""
    return check_rules(convert(data, Target, _message(source)), source)


def parse_target(data: bytes | str, source: str = "<target>") -> Target:
    try:
        raw = msgspec.toml.decode(data)
    except msgspec.DecodeError as e:
        raise InputError(f"{source}: malformed TOML: {e}") from None
    return target_from(raw, source)


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

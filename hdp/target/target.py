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
    max_allocation = "4GiB"   # bytes one tensor (buffer) may take on it (default: no cap)
    precision_efficiency = { i8 = 0.2 }   # efficiency at other precisions (default: efficiency)
    stream_efficiency = 2.0   # throughput mode: compute and per-op overhead / 2.0 (default 1)
    power_active = 150.0      # watts while computing, and while waiting (--objective energy)
    power_idle = 30.0

    [link]
    latency = 20e-6
    bandwidth = 16e9
    subgraph_overhead = 30e-6

    [[shares]]                # hardware several devices are one piece of (class Share)
    resource = "memory"       # "compute": the same cores; "memory": one DRAM
    devices = ["CPU", "GPU"]
    capacity = "32GiB"        # memory only: what all of them hold together

    [[hosts]]                 # machines the devices sit on (class Host); none: one host
    name = "a"
    devices = ["CPU", "GPU"]  # every device on exactly one host
    memory = "48GiB"          # optional: what the host holds in all (a cap over its devices)
    address = "10.77.0.1"     # optional: where its Ray node runs (informational)

    [[links]]                 # the network between two hosts (class HostLink)
    hosts = ["a", "b"]
    bandwidth = 25e6          # bytes/s
    latency = 1e-4            # seconds

Modeled devices are costed by a roofline (:mod:`hdp.runtime.costs.profile`): an op takes
``max(flops / (peak_flops[precision] * efficiency), bytes / memory_bandwidth) + op_overhead`` seconds,
where ``bytes`` counts its input and output tensors with floating-point tensors stored at the
device's ``precision`` (f32 = 4 bytes, f16/bf16 = 2, i8 = 1). ``efficiency`` (0 < e <= 1) is the
share of the published peak a device sustains on real layers; peaks are rarely reached, so a
modeled target should state its assumption there, or fit it to published figures
(:mod:`hdp.runtime.costs.fitting`: the targets ``core-ultra-155h``, ``core-ultra-288v``,
``i9-13900k-flex170`` and ``i9-13900k-b580`` are). ``precision_efficiency`` is the same share at
other precisions (a device computing in f16 measured in INT8), ``stream_efficiency`` what
throughput mode (many streams) gains over one request at a time, ``power_active`` and
``power_idle`` the watts of :class:`~hdp.placement.objective.Energy`.

``memory`` caps what a placement may put on a device (:mod:`hdp.placement.memory` estimates
the bytes). Without it a real device's capacity is read from OpenVINO where the plugin reports
one (``GPU_DEVICE_TOTAL_MEM_SIZE``, ``NPU_DEVICE_TOTAL_MEM_SIZE``), a real CPU's is the host's
available memory, and a modeled device's is unlimited (:mod:`hdp.target.capacity`);
``--memory DEV=SIZE`` overrides all of these. ``max_allocation`` caps a single tensor instead (an
iGPU's driver allocates at most about 4 GiB in one buffer): checked per tensor by the memory
model, a group holding a larger weight, state or activation is not placed there.
``memory_overhead`` and ``weight_copies`` are the
device's memory model (:mod:`hdp.placement.memory`); without them a device gets its kind's
(:data:`hdp.target.capacity.MEMORY_MODELS`: the CPU plugin's measured on this host, none for others).

A target without ``[[hosts]]`` is one host, as before. With ``[[hosts]]`` every device must sit on
exactly one of them (a device on none is refused, naming it: a target that states where some devices
are should say it of all), and every two hosts need a ``[[links]]`` entry between them (one link per
pair, either order). A tensor crossing devices of one host costs ``[link]``'s ``latency + bytes /
bandwidth``; one crossing hosts costs the host link's instead (``hdp calibrate --link A,B`` fits it
on the hosts, and a fitted link overrides the target's, :func:`link_table`). A host's ``memory`` caps
the sum over its devices, as a ``[[shares]] resource = "memory"`` capacity does over its devices.

The bounds of every field are declared on it (:mod:`hdp.base.validation`); :func:`validate_target`
adds the rules between fields. Every error names its path (``devices[0].peak_flops.f32: must be
a finite number in [1000, 1e+19], got inf``). This module does not import openvino;
:mod:`hdp.target.devices` does the registering.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hdp.base.cache import parse_size, shown
from hdp.base.errors import InputError
from hdp.base.validation import Bytes, convert, recheck
from hdp.placement.objective import Energy

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
    memory: Bytes | str | None = None
    #: the device's memory model (hdp.placement.memory): bytes it needs as soon as it runs a group, and
    #: copies of its weights it holds at its compute precision besides the stored ones; None: its
    #: kind's default (hdp.target.capacity.MEMORY_MODELS)
    memory_overhead: Bytes | str | None = None
    weight_copies: Annotated[float, Meta(ge=0, le=16)] | None = None
    #: bytes one tensor may take on the device (an integer or a size); None: no cap
    max_allocation: Annotated[int, Meta(ge=1)] | str | None = None
    #: modeled devices: ``efficiency`` at each precision listed (the roofline at another precision
    #: than ``precision``: a published INT8 row of a device computing in f16); unlisted: ``efficiency``
    precision_efficiency: dict[Precision, Annotated[float, Meta(gt=0, le=1)]] = {}
    #: modeled devices, throughput mode (as many streams as fill the device): compute-bound work and
    #: the per-op overhead take ``1 / stream_efficiency`` of their one-request time (memory-bound work
    #: does not: the streams share one bandwidth); 1: streams gain nothing
    stream_efficiency: Annotated[float, Meta(ge=1, le=64)] = 1.0
    #: watts the device draws while it computes and while it waits (``--objective energy``); None: not known
    power_active: Annotated[float, Meta(ge=0, le=1e5)] | None = None
    power_idle: Annotated[float, Meta(ge=0, le=1e5)] | None = None

    @property
    def plugin_name(self) -> str:
        return self.plugin or self.name

    def efficiency_at(self, precision: str) -> float:
        """The share of ``peak_flops[precision]`` the device sustains on real layers, one request at a time."""
        return self.precision_efficiency.get(precision, self.efficiency)

    @property
    def memory_bytes(self) -> int | None:
        """``memory`` in bytes (checked by :func:`check_rules`), None when not declared."""
        if self.memory is None or isinstance(self.memory, int):
            return self.memory

        return parse_size(self.memory)

    @property
    def max_allocation_bytes(self) -> int | None:
        """``max_allocation`` in bytes (checked by :func:`check_rules`), None when not declared."""
        if self.max_allocation is None or isinstance(self.max_allocation, int):
            return self.max_allocation
        return parse_size(self.max_allocation)


class Link(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    latency: Seconds = 20e-6
    bandwidth: Rate = 10e9
    subgraph_overhead: Seconds = 50e-6


class Share(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Devices of a target that are one piece of hardware for a plan: ``compute`` — the same cores
    (``virtual``'s CPU and CPU_B: work on one slows the other, replicas on both compete for them);
    ``memory`` — one DRAM (a Core Ultra's CPU, iGPU and NPU: one capacity and one bandwidth for all
    of them, ``capacity`` and ``bandwidth`` when declared)."""

    resource: Literal["compute", "memory"]
    devices: Annotated[list[Name], Meta(min_length=2, max_length=MAX_DEVICES)]
    #: ``memory``: the bytes all of ``devices`` hold together (an integer or a size); None: not capped here
    capacity: Bytes | str | None = None
    #: ``memory``: bytes/s all of ``devices`` draw together; None: each device's own bandwidth
    bandwidth: Annotated[float, Meta(ge=RATE_MIN, le=RATE_MAX)] | None = None
    description: str = ""

    @property
    def capacity_bytes(self) -> int | None:
        return _size_bytes(self.capacity)


def _size_bytes(size: int | str | None) -> int | None:
    """A size field's bytes (an integer, or a size such as "16GiB"; None: none given)."""
    return size if size is None or isinstance(size, int) else parse_size(size)


class Host(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """A machine of the target: the devices on it, what it holds in all, where its Ray node runs."""

    name: Name
    devices: Annotated[list[Name], Meta(min_length=1, max_length=MAX_DEVICES)]
    #: bytes the host holds in all (a cap over the sum of its devices; an integer or a size); None: no cap
    memory: Bytes | str | None = None
    #: where the host's Ray node runs (informational: the planner does not connect to it)
    address: Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.:\-\[\]]{1,255}$",
                                 description="a host name or address")] | None = None
    description: str = ""

    @property
    def memory_bytes(self) -> int | None:
        return _size_bytes(self.memory)


class HostLink(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """The network between two hosts: a tensor crossing it costs ``latency + bytes / bandwidth``."""

    hosts: Annotated[list[Name], Meta(min_length=2, max_length=2)]
    bandwidth: Rate
    latency: Seconds = 0.0
    description: str = ""


class Target(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    name: NotBlank
    devices: Annotated[list[Device], Meta(max_length=MAX_DEVICES)]  # at least one: check_rules
    link: Link = Link()
    #: hardware several devices share (see :class:`Share`); checked by :func:`check_rules`
    shares: Annotated[list[Share], Meta(max_length=MAX_DEVICES)] = []
    #: the machines the devices sit on (see :class:`Host`); empty: one host
    hosts: Annotated[list[Host], Meta(max_length=MAX_DEVICES)] = []
    #: the network between every two hosts (see :class:`HostLink`)
    links: Annotated[list[HostLink], Meta(max_length=MAX_DEVICES * (MAX_DEVICES - 1) // 2)] = []
    description: str = ""

    @property
    def multi_host(self) -> bool:
        """Whether the target spans more than one host."""
        return len(self.hosts) > 1

    def host_of(self, device: str) -> str | None:
        """The name of the host ``device`` sits on (None: the target declares no hosts)."""
        for h in self.hosts:
            if device in h.devices:
                return h.name
        return None

    def host_link(self, a: str, b: str) -> HostLink | None:
        """The link between hosts ``a`` and ``b`` (either order), None when there is none."""
        for ln in self.links:
            if {a, b} == set(ln.hosts):
                return ln
        return None

    def sharing(self, resource: str, device: str) -> tuple[str, ...]:
        """The devices that share ``resource`` with ``device`` (itself included; just itself when none)."""
        for s in self.shares:
            if s.resource == resource and device in s.devices:
                return tuple(s.devices)
        return (device,)

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


def energy_of(t: Target) -> Energy:
    """The :class:`~hdp.placement.objective.Energy` objective of ``t``: each device's active and idle
    watts, in device order. InputError naming the first field missing, or a real device (hdp cannot
    read a real device's watts, so energy is a figure of modeled targets)."""
    active, idle = [], []
    for i, d in enumerate(t.devices):
        where = f"target '{t.name}': devices[{i}]"
        if d.kind == "real":
            raise InputError(f"{where} ({d.name}) is a real device: --objective energy is simulated from modeled "
                             f"devices' power_active and power_idle")
        for field in ("power_active", "power_idle"):
            if getattr(d, field) is None:
                raise InputError(f"{where}.{field}: --objective energy needs each device's watts ({d.name} has none)")
        active.append(float(d.power_active))
        idle.append(float(d.power_idle))
    return Energy(active=tuple(active), idle=tuple(idle))


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
        for field in ("memory", "memory_overhead", "max_allocation"):
            value = getattr(d, field)
            if isinstance(value, str):
                _check_size(value, f"{where}.{field}")
        if d.max_allocation is not None and d.max_allocation_bytes < 1:
            raise InputError(f"{where}.max_allocation: must be at least 1 byte, got {d.max_allocation!r}")
        if d.power_active is not None and d.power_idle is not None and d.power_idle > d.power_active:
            raise InputError(f"{where}.power_idle: {d.power_idle:g} W is more than power_active ({d.power_active:g} W)")
        for p in d.precision_efficiency:
            if p not in d.peak_flops:
                raise InputError(f"{where}.precision_efficiency.{p}: no peak_flops entry for precision '{p}'")
        if d.alias and not d.plugin:
            raise InputError(f"{where}.plugin: an aliased device must name the plugin it registers")
        if d.kind == "modeled":
            if d.precision not in d.peak_flops:
                raise InputError(f"{where}.peak_flops: needs an entry for precision '{d.precision}'")
            if d.memory_bandwidth < RATE_MIN:
                raise InputError(f"{where}.memory_bandwidth: a modeled device needs one in "
                                 f"[{RATE_MIN:g}, {RATE_MAX:g}] bytes/s, got {d.memory_bandwidth!r}")
    seen: dict[tuple[str, str], int] = {}
    for i, s in enumerate(t.shares):
        where = f"{source}: shares[{i}]"
        for dev in s.devices:
            if dev not in names:
                raise InputError(f"{where}.devices: no device '{dev}' in the target (has {', '.join(names)})")
            if (s.resource, dev) in seen:
                raise InputError(f"{where}.devices: '{dev}' already shares {s.resource} in "
                                 f"shares[{seen[s.resource, dev]}]")
            seen[s.resource, dev] = i
        if s.resource == "compute" and (s.capacity is not None or s.bandwidth is not None):
            raise InputError(f"{where}: capacity and bandwidth are fields of a shared memory, not of shared compute")
        if isinstance(s.capacity, str):
            _check_size(s.capacity, f"{where}.capacity")
    _check_hosts(t, source, names)
    return t


def _check_hosts(t: Target, source: str, names: list[str]) -> None:
    """The rules of ``hosts`` and ``links`` (see the module docstring)."""
    if not t.hosts:
        if t.links:
            raise InputError(f"{source}: links[0]: links join hosts, and the target declares no [[hosts]]")
        return
    on: dict[str, int] = {}
    hosts: dict[str, int] = {}
    for i, h in enumerate(t.hosts):
        where = f"{source}: hosts[{i}]"
        if h.name in hosts:
            raise InputError(f"{where}.name: duplicate host '{h.name}'")
        hosts[h.name] = i
        for dev in h.devices:
            if dev not in names:
                raise InputError(f"{where}.devices: no device '{dev}' in the target (has {', '.join(names)})")
            if dev in on:
                where_else = "this host" if on[dev] == i else f"hosts[{on[dev]}] ({t.hosts[on[dev]].name})"
                raise InputError(f"{where}.devices: '{dev}' is already on {where_else}; a device sits on one host")
            on[dev] = i
        if isinstance(h.memory, str):
            _check_size(h.memory, f"{where}.memory")
    missing = [d for d in names if d not in on]
    if missing:
        raise InputError(f"{source}: hosts: device{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                         f"{'are' if len(missing) > 1 else 'is'} on no host; with [[hosts]] every device is listed "
                         f"under one")
    seen: dict[frozenset, int] = {}
    for i, ln in enumerate(t.links):
        where = f"{source}: links[{i}].hosts"
        for h in ln.hosts:
            if h not in hosts:
                raise InputError(f"{where}: no host '{h}' in the target (has {', '.join(hosts)})")
        if ln.hosts[0] == ln.hosts[1]:
            raise InputError(f"{where}: a link joins two different hosts, got '{ln.hosts[0]}' twice")
        pair = frozenset(ln.hosts)
        if pair in seen:
            raise InputError(f"{where}: hosts '{ln.hosts[0]}' and '{ln.hosts[1]}' already have links[{seen[pair]}]")
        seen[pair] = i
    order = list(hosts)
    for i, a in enumerate(order):
        for b in order[i + 1:]:
            if frozenset((a, b)) not in seen:
                raise InputError(f"{source}: links: no link between hosts '{a}' and '{b}' (add a [[links]] entry "
                                 f"with hosts = [\"{a}\", \"{b}\"], its bandwidth and latency)")


def _check_size(text: str, where: str) -> None:
    try:
        parse_size(text)
    except ValueError as e:
        if str(e).startswith("not a size"):
            raise InputError(f"{where}: not a size: {shown(text)!r} (bytes as an integer, or like \"16GiB\", "
                             f"\"512MiB\")") from None
        raise InputError(f"{where}: {shown(text)!r} is {e}") from None


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
    for f in sorted(resources.files("hdp.target").joinpath("targets").iterdir()):
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
    res = resources.files("hdp.target").joinpath("targets", f"{spec}.toml")
    if not res.is_file():
        raise InputError(f"unknown target '{spec}' (built in: {', '.join(builtin_names())}; or a .toml file)")
    return parse_target(res.read_bytes(), f"target '{spec}'")

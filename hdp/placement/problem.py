"""The placement problem: a graph's structure on a target's devices, with times and copy costs.

Built once from a Module (its graph, support and costs) by :func:`problem_of`; every placer maps
it to a device per tie group, the simulator prices such a vector, and ``assign`` expands it to a
device per op (:meth:`Structure.op_devices`).

- ``allowed[g, d]``: every placed member of group ``g``, and every replicated op it gets a copy
  of, is supported by device ``d`` and has a finite time there. Constant data needs no support
  (it is data of its consumer), nor do Parameters and Results.
- ``time[g, d]``: the members' times (``inf`` where not allowed); 0 everywhere without a cost table.
- replicated copies (:data:`~hdp.placement.structure.REPLICATED` chains): the written model gives
  every consumer its own copy on its own device, and the plugin of each device computes the
  identical copies it gets once. So a replicated op costs its time once on every device that runs
  one of the groups it feeds: ``r_time[u, d]`` for each *unit* ``u`` (replicated ops feeding the
  same groups, summed) and device ``d`` used by one of its groups ``r_groups[r_ptr[u]:r_ptr[u+1]]``.
  This makes the price of a placement a function of the device of every op alone: ties learned
  by a repair (which merge groups) do not change it.
- ``t_cost[t]``: seconds one copy of tensor ``t`` costs across a device boundary
  (``link_latency + bytes / link_bandwidth``; a cost graph's own transfer time where the cost
  table gives one per edge, ``Costs.edge_time``: the largest over the tensor's edges).
- ``objective``: what placers optimise and the simulator's :meth:`~hdp.placement.simulate.Simulator.cost`
  prices (:mod:`hdp.placement.objective`).
- ``memory``: bytes per group (:mod:`hdp.placement.memory`), ``device_memory`` each device's
  memory model (its overhead and the copies of its weights it holds) and ``capacity[d]`` the bytes
  device ``d`` holds (``inf``: unlimited). A placement is feasible iff every device's memory fits.
  ``max_allocation[d]`` caps one tensor on ``d`` (:meth:`PlacementProblem.with_max_allocation`):
  a group holding a larger one is not ``allowed`` there.

- ``hosts``: the machines the devices sit on (:class:`Hosts`; None: one host). A tensor crossing
  devices of one host costs ``t_cost``; one crossing hosts costs the link between them instead,
  ``latency + bytes / bandwidth`` (:meth:`PlacementProblem.transfer`), and a host's ``capacity``
  caps the bytes of all its devices together.

A Module whose ``meta["placement_rules"]`` is ``"ties"`` (an abstract cost graph,
:mod:`hdp.costgraph`) gets the structure of its ties alone (see :mod:`hdp.placement.structure`).
"""

from __future__ import annotations

import json

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.ir.build import edge_sources
from hdp.ir.types import Module
from hdp.placement.memory import DeviceMemory, MemoryNeeds, largest_tensor, memory_needs, size_text, state_scale
from hdp.placement.objective import Energy, Latency, Objective
from hdp.placement.structure import CONE, Structure, build_structure

#: Op types that take no time on any device (HETERO keeps them with their neighbours).
FREE_TYPES = frozenset({"Parameter", "Constant", "Result"})


class Hosts(msgspec.Struct, frozen=True):
    """The hosts of a problem's devices: ``host_of[d]`` (an index into ``names``), the link between
    every two hosts (``latency[a, b]`` seconds and ``bandwidth[a, b]`` bytes/s; the diagonal unused)
    and each host's ``capacity`` in bytes over all its devices (``inf``: none)."""

    names: tuple[str, ...]
    host_of: np.ndarray  # int64 per device
    latency: np.ndarray  # float64 n_hosts x n_hosts
    bandwidth: np.ndarray  # float64 n_hosts x n_hosts
    capacity: np.ndarray  # float64 per host

    @property
    def n_hosts(self) -> int:
        return len(self.names)

    def cross(self) -> np.ndarray:
        """``[a, b]``: devices ``a`` and ``b`` sit on different hosts."""
        h = np.asarray(self.host_of, np.int64)
        return h[:, None] != h[None, :]

    def pair_terms(self) -> tuple[np.ndarray, np.ndarray]:
        """``(latency[a, b], seconds per byte[a, b])`` between devices (0 within a host)."""
        h = np.asarray(self.host_of, np.int64)
        cross = self.cross()
        lat = np.where(cross, np.asarray(self.latency, np.float64)[h[:, None], h[None, :]], 0.0)
        inv = np.where(cross, 1.0 / np.asarray(self.bandwidth, np.float64)[h[:, None], h[None, :]], 0.0)
        return lat, inv

    def devices_of(self, host: int) -> np.ndarray:
        return np.flatnonzero(np.asarray(self.host_of) == host)

    def to_text(self) -> str:
        """The hosts as compact JSON (a partition's ``info["hosts_table"]``, read back by the
        ``assign`` pass, which has no target, to price the placement as it was placed)."""
        def num(a):
            return [[float(x) if np.isfinite(x) else None for x in row] for row in np.atleast_2d(a)]
        return json.dumps({"names": list(self.names), "host_of": np.asarray(self.host_of).tolist(),
                           "latency": num(self.latency), "bandwidth": num(self.bandwidth),
                           "capacity": num(self.capacity)[0]}, separators=(",", ":"))

    @staticmethod
    def from_text(text: str) -> "Hosts":
        """The inverse of :meth:`to_text` (``None`` entries are ``inf``); ValueError when it is not one."""
        try:
            d = json.loads(text)
            def arr(x):
                return np.array([[np.inf if v is None else float(v) for v in row] for row in x], np.float64)
            out = Hosts(names=tuple(str(n) for n in d["names"]), host_of=np.asarray(d["host_of"], np.int64),
                        latency=arr(d["latency"]), bandwidth=arr(d["bandwidth"]),
                        capacity=arr([d["capacity"]])[0])
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"not a hosts record: {e}") from None
        return out

    def scaled(self, by: float) -> "Hosts":
        """The same hosts with every link ``by`` times as costly (the energy problem's joules)."""
        return msgspec.structs.replace(self, latency=np.asarray(self.latency) * by,
                                       bandwidth=np.asarray(self.bandwidth) / by if by > 0 else
                                       np.full_like(np.asarray(self.bandwidth), np.inf))


class PlacementProblem(msgspec.Struct, frozen=True):
    """See the module docstring. Arrays are read-only numpy arrays."""

    devices: tuple[str, ...]
    structure: Structure
    time: np.ndarray  # float64 n_groups x n_devices
    allowed: np.ndarray  # bool n_groups x n_devices
    op_time: np.ndarray  # float64 n_ops x n_devices: the cost table in device order (0 without one)
    t_cost: np.ndarray  # float64 per tensor
    r_ptr: np.ndarray  # int64, n_units + 1: CSR of the groups fed by each unit of replicated ops
    r_groups: np.ndarray  # int64
    r_time: np.ndarray  # float64 n_units x n_devices (0 where a device cannot run the unit)
    link_latency: float = 0.0
    link_bandwidth: float = float("inf")
    subgraph_overhead: float = 0.0
    has_costs: bool = False
    objective: Objective = Latency()
    memory: MemoryNeeds | None = None  # None: no memory needs known (zero)
    capacity: np.ndarray | None = None  # float64 bytes per device; None: every device unlimited
    #: each device's memory model (overhead, copies at its precision); None: stored bytes only
    device_memory: DeviceMemory | None = None
    #: bytes per tensor that a sub-model taking or giving it converts from or to its plugin's own
    #: layout (the concurrent executor's ``convert`` term): a 4-D or 5-D tensor's bytes (the CPU
    #: plugin's blocked layouts, nChw8c/nChw16c, are for those), 0 for the others; None: every byte
    convert_bytes: np.ndarray | None = None
    #: bytes per (group, device) each group moves to and from the device's memory (the cost table's
    #: ``op_dram``) and, per DRAM several devices share, ``(device indices, bytes/s)``: the
    #: simulator's contention term when they run at once (:meth:`~hdp.placement.simulate.Simulator.dram_seconds`)
    dram_bytes: np.ndarray | None = None
    dram_shares: tuple[tuple[tuple[int, ...], float], ...] = ()
    #: bytes one tensor may take on each device (``inf``: no cap); None: no device caps one
    max_allocation: np.ndarray | None = None
    #: the state (KV cache) factor the memory needs were scaled by (:func:`hdp.placement.memory.state_scale`)
    state_factor: float = 1.0
    #: the hosts of the devices and the links between them (None: one host)
    hosts: Hosts | None = None

    @property
    def multi_host(self) -> bool:
        return self.hosts is not None and self.hosts.n_hosts > 1

    def with_hosts(self, hosts: Hosts | None) -> "PlacementProblem":
        """The same problem on these hosts (None, or one host: as today)."""
        if hosts is not None and len(hosts.host_of) != self.n_devices:
            raise ValueError(f"hosts name {len(hosts.host_of)} devices, the problem has {self.n_devices}")
        return msgspec.structs.replace(self, hosts=hosts)

    def transfer(self, tensors: np.ndarray, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """Seconds one copy of each tensor ``tensors[i]`` costs from device ``src[i]`` to ``dst[i]``:
        ``t_cost`` within a host, the hosts' link (``latency + bytes / bandwidth``) across hosts."""
        t = np.asarray(tensors, np.int64)
        out = np.asarray(self.t_cost, np.float64)[t]
        if not self.multi_host:
            return out
        lat, inv = self.hosts.pair_terms()
        a, b = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        cross = self.hosts.cross()[a, b]
        nbytes = np.asarray(self.structure.t_bytes, np.float64)[t]
        return np.where(cross, lat[a, b] + nbytes * inv[a, b], out)

    @property
    def needs(self) -> MemoryNeeds:
        """The memory needs (zero when not known)."""
        return self.memory if self.memory is not None else MemoryNeeds.zero(self.n_groups)

    @property
    def caps(self) -> np.ndarray:
        """Bytes per device (``inf``: unlimited)."""
        return self.capacity if self.capacity is not None else np.full(self.n_devices, np.inf)

    def memory_terms(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fixed[g, d], units[u, d], overhead[d])``: the bytes each group and shared constant
        unit needs on each device, and each device's own (see :mod:`hdp.placement.memory`)."""
        return self.needs.on_devices(self.device_memory, self.n_devices)

    def with_device_memory(self, device_memory: DeviceMemory | None) -> "PlacementProblem":
        """The same problem with another memory model per device (None: stored bytes only)."""
        return msgspec.structs.replace(self, device_memory=device_memory)

    @property
    def memory_binds(self) -> bool:
        """Whether some device (or host) has a finite capacity."""
        return bool(np.isfinite(self.caps).any()) or (self.multi_host and bool(np.isfinite(self.hosts.capacity).any()))

    def largest_allocation(self) -> np.ndarray:
        """``[g, d]``: bytes of the largest single tensor group ``g`` puts on device ``d``
        (:meth:`hdp.placement.memory.MemoryNeeds.largest_allocation`)."""
        return self.needs.largest_allocation(self.device_memory, self.n_devices)

    def with_max_allocation(self, limit, graph=None) -> "PlacementProblem":
        """The same problem where device ``d`` holds no tensor over ``limit[d]`` bytes (``inf``: no
        cap): a group whose largest single tensor there is larger is not ``allowed`` on ``d``
        (its time there is ``inf``). With every device's cap ``inf`` (or ``limit`` None) the problem
        itself. InputError when a group then fits no device, naming its largest tensor (from
        ``graph``, the problem's graph, when given) and every device's cap."""
        if limit is None:
            return self
        limit = np.asarray(limit, np.float64).copy()
        if limit.shape != (self.n_devices,):
            raise ValueError(f"max_allocation has {limit.shape} entries for {self.n_devices} devices")
        if not np.isfinite(limit).any():
            return self
        fits = self.largest_allocation() <= limit[None, :]
        allowed = self.allowed & fits
        none = np.nonzero(self.allowed.any(axis=1) & ~allowed.any(axis=1))[0]
        if none.size:
            g = int(none[0])
            caps = ", ".join(f"{d} {size_text(c)}" if np.isfinite(c) else f"{d} none"
                             for d, c in zip(self.devices, limit))
            what = ""
            if graph is not None:
                name, size, kind = largest_tensor(graph, self.structure, g, self.state_factor)
                what = f": its {kind} '{name}' is {size_text(size)}"
            raise InputError(f"no device can hold tie group {g} within the largest single allocation it "
                             f"allows{what} (max_allocation: {caps})")
        time = np.where(allowed, self.time, np.inf)
        for a in (allowed, time, limit):
            a.setflags(write=False)
        return msgspec.structs.replace(self, allowed=allowed, time=time, max_allocation=limit)

    def with_objective(self, objective: Objective) -> "PlacementProblem":
        """The same problem asking another question."""
        return msgspec.structs.replace(self, objective=objective)

    def as_latency(self) -> "PlacementProblem":
        """Under :class:`~hdp.placement.objective.Energy`: the latency problem whose sequential latency
        is the energy in joules (group times on each device weighted by the joules per second of
        computing there, copies and subgraph overheads by the idle watts; see
        :mod:`hdp.placement.objective`); any other problem as it is."""
        ob = self.objective
        if not isinstance(ob, Energy):
            return self
        if len(ob.active) != self.n_devices:
            raise ValueError(f"energy objective has watts for {len(ob.active)} devices, the problem {self.n_devices}")
        p0, w = ob.weights()
        w = np.asarray(w, np.float64)

        def scaled(a: np.ndarray, by) -> np.ndarray:
            out = np.where(np.isfinite(a), a * by, np.inf)
            out.setflags(write=False)
            return out

        return msgspec.structs.replace(
            self, objective=Latency(), time=scaled(self.time, w[None, :]), op_time=scaled(self.op_time, w[None, :]),
            r_time=scaled(self.r_time, w[None, :]) if self.r_time.size else self.r_time,
            t_cost=scaled(self.t_cost, p0), link_latency=self.link_latency * p0,
            subgraph_overhead=self.subgraph_overhead * p0,
            hosts=self.hosts.scaled(p0) if self.hosts is not None else None)

    def with_capacity(self, capacity) -> "PlacementProblem":
        """The same problem with ``capacity`` bytes per device (None: unlimited)."""
        if capacity is not None:
            capacity = np.asarray(capacity, np.float64).copy()
            capacity.setflags(write=False)
        return msgspec.structs.replace(self, capacity=capacity)

    @property
    def n_groups(self) -> int:
        return self.structure.n_groups

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    @property
    def n_ops(self) -> int:
        return self.structure.n_ops

    def device_index(self, name: str) -> int:
        if name not in self.devices:
            raise InputError(f"unknown device '{name}' (target devices: {', '.join(self.devices)})")
        return self.devices.index(name)

    def op_devices(self, group_device) -> np.ndarray:
        """int16 device per op (see :meth:`Structure.op_devices`)."""
        return self.structure.op_devices(group_device)

    def single(self, d: int) -> np.ndarray:
        """Every group on device ``d``."""
        return np.full(self.n_groups, d, np.int16)

    def lower_bound(self) -> float:
        """Σ over groups of the fastest allowed device's time, plus every unit of replicated ops
        on the fastest device one of its groups may use: no placement is faster."""
        if not self.n_groups:
            return 0.0
        low = float(np.where(self.allowed, self.time, np.inf).min(axis=1).sum())
        if self.r_time.shape[0]:
            can = np.zeros(self.r_time.shape, bool)
            np.logical_or.at(can, np.repeat(np.arange(self.r_time.shape[0]), np.diff(self.r_ptr)),
                             self.allowed[self.r_groups])
            low += float(np.where(can, self.r_time, np.inf).min(axis=1).sum())
        return low

    def time_with_copies(self) -> np.ndarray:
        """``time`` plus, for every group, the whole time of each unit of replicated ops it feeds
        (as if each group computed its own copy): a per-group figure for heuristics and features,
        not the price of a placement (that is the simulator's)."""
        if not self.r_time.shape[0]:
            return self.time
        t = np.array(self.time)
        np.add.at(t, self.r_groups, self.r_time[np.repeat(np.arange(self.r_time.shape[0]), np.diff(self.r_ptr))])
        return np.where(self.allowed, t, np.inf)


def _columns(names: tuple[str, ...], devices: tuple[str, ...], what: str) -> list[int]:
    missing = [d for d in devices if d not in names]
    if missing:
        raise InputError(f"{what} cover devices {', '.join(names)}, not {', '.join(missing)}; "
                         f"run the passes again for this target")
    return [names.index(d) for d in devices]


def build_problem(module: Module, devices: tuple[str, ...] | None = None, extra_ties=(), *,
                  objective: Objective = Latency(), capacity=None, context: int = 0,
                  device_memory: DeviceMemory | None = None) -> PlacementProblem:
    """The problem of ``module`` on ``devices`` (default: the devices of its support, else costs);
    ``extra_ties``: more pairs of ops that must share a device; ``objective``; ``capacity``: bytes
    per device (None or ``inf``: unlimited); ``context``: tokens of state (KV cache) to hold
    (0: as specialised), see :mod:`hdp.placement.memory`; ``device_memory``: each device's memory
    model (None: stored bytes only)."""
    g = module.graph
    if devices is None:
        src = module.support or module.costs
        if src is None:
            raise InputError("placing needs the devices: run the support pass first")
        devices = tuple(src.devices)
    devices = tuple(devices)
    st = build_structure(g, extra_ties, closed=module.meta.get("placement_rules") != "ties")
    n, nd = g.n_ops, len(devices)
    types = np.array([op.type for op in g.ops], dtype=object)
    free = np.isin(types, list(FREE_TYPES)) | (st.role == CONE)  # no time, no support needed
    ok = np.ones((n, nd), bool)
    if module.support is not None:
        ok &= module.support.mask.numpy()[:, _columns(module.support.devices, devices, "support results")]
    op_time = np.zeros((n, nd))
    c = module.costs
    if c is not None:
        t = np.array(c.op_time.numpy()[:, _columns(c.devices, devices, "costs")], np.float64)
        t[np.isnan(t)] = np.inf
        ok &= np.isfinite(t)
        op_time = np.where(free[:, None], 0.0, t)
    ok[free] = True
    op_time = np.where(ok, op_time, np.inf)

    k = st.n_groups
    time = np.zeros((k, nd))
    bad = np.zeros((k, nd), np.int64)
    pl = st.group_of >= 0
    np.add.at(time, st.group_of[pl], np.where(ok[pl], op_time[pl], 0.0))
    np.add.at(bad, st.group_of[pl], ~ok[pl])
    if st.r_ops.size:
        rg = np.repeat(np.arange(k), np.diff(st.r_ptr))
        np.add.at(bad, rg, ~ok[st.r_ops])
    r_ptr, r_groups, r_time = replicated_units(st, np.where(ok, op_time, 0.0))
    allowed = bad == 0
    none = np.nonzero(~allowed.any(axis=1))[0]
    if none.size:
        gbad = int(none[0])
        members = list(st.members(gbad)) + list(st.r_ops[st.r_ptr[gbad]:st.r_ptr[gbad + 1]])
        culprit = next((m for m in members if not ok[m].all()), members[0])
        op = g.ops[culprit]
        tied = f" (tied with {len(members) - 1} other ops)" if len(members) > 1 else ""
        raise InputError(f"no device of {list(devices)} can run op '{op.name}' ({op.type}){tied}")
    time = np.where(allowed, time, np.inf)
    if c is not None:
        lat, bw, ovh = float(c.link_latency), float(c.link_bandwidth), float(c.subgraph_overhead)
        t_cost = lat + st.t_bytes / (bw if bw > 0 else np.inf)
        if c.edge_time is not None:
            t_cost = _tensor_times(g, st, c.edge_time.numpy())
    else:
        lat, bw, ovh = 0.0, float("inf"), 0.0
        t_cost = np.zeros(st.n_tensors)
    for a in (time, allowed, op_time, t_cost, r_ptr, r_groups, r_time):
        a.setflags(write=False)
    factor = state_scale(module.meta, context)
    needs = memory_needs(g, st, factor)
    blocked = np.array([len(g.ops[o].out_shapes[pt]) in (4, 5) if pt < len(g.ops[o].out_shapes) else False
                        for o, pt in zip(st.t_op, st.t_port)], bool)
    convert_bytes = np.where(blocked, st.t_bytes, 0).astype(np.float64)
    convert_bytes.setflags(write=False)
    dram, shares = _dram_terms(c, st, devices)
    p = PlacementProblem(devices=devices, structure=st, time=time, allowed=allowed, op_time=op_time,
                         t_cost=t_cost, r_ptr=r_ptr, r_groups=r_groups, r_time=r_time, link_latency=lat,
                         link_bandwidth=bw, subgraph_overhead=ovh, has_costs=c is not None, objective=objective,
                         memory=needs, device_memory=device_memory, convert_bytes=convert_bytes,
                         dram_bytes=dram, dram_shares=shares, state_factor=factor)
    if capacity is not None:
        if len(capacity) != nd:
            raise ValueError(f"capacity has {len(capacity)} entries for {nd} devices")
        p = p.with_capacity(capacity)
    return p


def _dram_terms(c, st: Structure, devices: tuple[str, ...]):
    """``(bytes per group and device, shares as device indices and bandwidth)`` from a cost table's
    ``op_dram`` and ``dram_shares`` (``(None, ())`` without them, or when no share has two of
    ``devices``). A replicated op counts in every group it feeds (an upper bound: a device computes
    the copies it gets once)."""
    if c is None or c.op_dram is None or not c.dram_shares:
        return None, ()
    shares = tuple((tuple(devices.index(d) for d in names if d in devices), float(bw)) for names, bw in c.dram_shares)
    shares = tuple((ix, bw) for ix, bw in shares if len(ix) >= 2)
    if not shares:
        return None, ()
    b = np.asarray(c.op_dram.numpy(), np.float64)[:, _columns(c.devices, devices, "costs")]
    out = np.zeros((st.n_groups, len(devices)))
    pl = st.group_of >= 0
    np.add.at(out, st.group_of[pl], b[pl])
    if st.r_ops.size:
        np.add.at(out, np.repeat(np.arange(st.n_groups), np.diff(st.r_ptr)), b[st.r_ops])
    out.setflags(write=False)
    return out, shares


def _tensor_times(g, st: Structure, edge_time: np.ndarray) -> np.ndarray:
    """Per tensor of ``st``, the largest ``edge_time`` over the edges leaving its producer's port."""

    if not st.n_tensors:
        return np.zeros(0)
    src = edge_sources(g).astype(np.int64)
    port = g.src_port.numpy().astype(np.int64)
    nport = int(port.max()) + 1 if port.size else 1
    key = src * nport + port
    best = np.zeros(g.n_ops * nport)
    np.maximum.at(best, key, np.asarray(edge_time, np.float64))
    return best[st.t_op.astype(np.int64) * nport + st.t_port.astype(np.int64)]


def replicated_units(st: Structure, op_time: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(r_ptr, r_groups, r_time): the replicated ops grouped by the set of groups they feed, each
    unit's time per device the sum of its ops' (see the module docstring)."""
    nd = op_time.shape[1]
    if not st.r_ops.size:
        return np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros((0, nd))
    rg = np.repeat(np.arange(st.n_groups, dtype=np.int64), np.diff(st.r_ptr))
    ops = st.r_ops.astype(np.int64)
    order = np.lexsort((rg, ops))
    ops, rg = ops[order], rg[order]
    starts = np.flatnonzero(np.r_[True, ops[1:] != ops[:-1]])
    ends = np.r_[starts[1:], ops.size]
    units: dict[tuple[int, ...], int] = {}
    unit_of = np.empty(starts.size, np.int64)
    for j, (a, b) in enumerate(zip(starts, ends)):
        unit_of[j] = units.setdefault(tuple(rg[a:b].tolist()), len(units))
    r_time = np.zeros((len(units), nd))
    np.add.at(r_time, unit_of, op_time[ops[starts]])
    sets = list(units)
    r_ptr = np.zeros(len(sets) + 1, np.int64)
    r_ptr[1:] = np.cumsum([len(g) for g in sets])
    r_groups = np.fromiter((g for gs in sets for g in gs), np.int64, int(r_ptr[-1]))
    return r_ptr, r_groups, r_time


_CACHE: list[tuple[tuple, tuple, PlacementProblem]] = []


def problem_of(module: Module, devices: tuple[str, ...] | None = None, extra_ties=(), *,
               objective: Objective = Latency(), capacity=None, context: int = 0,
               device_memory: DeviceMemory | None = None) -> PlacementProblem:
    """:func:`build_problem`, reused while the same graph, support and costs objects are asked
    about again (a compile builds it once for partition, assign and the report)."""
    ties = tuple((int(a), int(b)) for a, b in extra_ties)
    key = (module.graph, module.support, module.costs, None if devices is None else tuple(devices))
    rest = (ties, context)
    for k, t, p in _CACHE:
        if t == rest and all(a is b for a, b in zip(k, key)):
            break
    else:
        p = build_problem(module, devices, ties, context=context)
        _CACHE.insert(0, (key, rest, p))
        del _CACHE[4:]
    if objective != p.objective:
        p = p.with_objective(objective)
    if capacity is not None:
        p = p.with_capacity(capacity)
    if device_memory is not None:
        p = p.with_device_memory(device_memory)
    return p

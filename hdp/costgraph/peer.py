"""The workload and split formats of msr-fiddle/dnn-partitioning (Tarnawski et al., NeurIPS 2020).

Workload (one JSON object): ``maxSizePerFPGA`` (bytes each accelerator holds), ``maxFPGAs`` (k
identical accelerators), ``maxCPUs`` (their scorer merges every CPU into one device; 0: none),
``nodes`` and ``edges``. A node: ``id`` (int, unique, not necessarily dense), ``supportedOnFpga``
(0/1 or a boolean), ``cpuLatency``, ``fpgaLatency``, ``size`` (bytes on an accelerator, default 0),
``colorClass`` (optional: nodes sharing one share a device), ``isBackwardNode`` and ``name``
(informative). An edge: ``sourceId``, ``destId``, ``cost`` (the time to move the source's output,
the same on every edge leaving one source) and ``size`` (bytes, informative). Unknown keys are
ignored.

Lowered devices: ``CPU`` (when ``maxCPUs`` >= 1; unlimited memory; ``free_comm``: its transfers
cost it nothing) and ``FPGA1`` … ``FPGAk`` (capped at ``maxSizePerFPGA``, one device class). Each
node becomes an op named by its id; its one output is a tensor whose transfer time is the cost.

Split: ``{"cpus": [{"nodes": [ids]}], "fpgas": [{"nodes": [ids]}, ...]}`` with the workload's ids;
every ``cpus`` entry is the CPU, ``fpgas[i]`` the i-th accelerator. Their expert splits list
forward nodes only: a node left out takes the device of its tie class (their scorer's rule).
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec
import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import ByteAmount, Count, convert
from hdp.costgraph.graph import CostGraph, free_comm, load_json, usable_count

#: Their DP's tolerance for "the out-edges of one source carry the same cost".
COST_TOLERANCE = 1e-6

Flag = Union[bool, int]
Time = Annotated[float, Meta(ge=0, le=1e9)]


#: Node ids: whatever fits an int64.
NodeId = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]


class Node(msgspec.Struct):
    id: NodeId
    cpuLatency: Time
    fpgaLatency: Time
    supportedOnFpga: Flag = True
    isBackwardNode: Flag = False
    colorClass: NodeId | None = None
    size: ByteAmount = 0.0
    name: str = ""


class Edge(msgspec.Struct):
    sourceId: NodeId
    destId: NodeId
    cost: Time
    size: ByteAmount = 0.0


class Workload(msgspec.Struct):
    maxSizePerFPGA: ByteAmount
    maxFPGAs: Count  # more than the nodes an accelerator supports: only those many are made
    nodes: list[Node]
    edges: list[Edge]
    maxCPUs: Count = 1


def parse(source: str, data) -> CostGraph:
    """The :class:`CostGraph` of a parsed workload; InputErrors name the file and the node or field."""
    w: Workload = convert(data, Workload, lambda path, what: f"{source}: {path} {what}")
    index: dict[int, int] = {}
    for j, nd in enumerate(w.nodes):
        if nd.id in index:
            raise InputError(f"{source}: nodes[{j}]: node id {nd.id} appears twice")
        index[nd.id] = j
    n = len(w.nodes)
    if not n:
        raise InputError(f"{source}: nodes: the workload has no node")
    cons: dict[int, list[int]] = {}
    cost: dict[int, tuple[float, int]] = {}
    nbytes: dict[int, float] = {}
    for j, e in enumerate(w.edges):
        for field, v in (("sourceId", e.sourceId), ("destId", e.destId)):
            if v not in index:
                raise InputError(f"{source}: edges[{j}].{field}: node {v} is not in nodes")
        if e.sourceId == e.destId:
            raise InputError(f"{source}: edges[{j}]: node {e.sourceId} feeds itself")
        u = index[e.sourceId]
        seen = cost.setdefault(u, (e.cost, e.destId))
        if abs(seen[0] - e.cost) > COST_TOLERANCE:
            raise InputError(f"{source}: node {e.sourceId}: its out-edges carry different costs ({seen[0]:g} to node "
                             f"{seen[1]}, {e.cost:g} to node {e.destId}; edges[{j}]): one output, one cost")
        lst = cons.setdefault(u, [])
        v = index[e.destId]
        if v not in lst:
            lst.append(v)
        nbytes[u] = max(nbytes.get(u, 0.0), e.size)
    k = usable_count(source, "maxFPGAs", w.maxFPGAs, sum(1 for x in w.nodes if x.supportedOnFpga), "FPGA")
    devices = (("CPU",) if w.maxCPUs else ()) + tuple(f"FPGA{i + 1}" for i in range(k))
    if not devices:
        raise InputError(f"{source}: maxCPUs and maxFPGAs are both 0: no device")
    nd = len(devices)
    time = np.empty((n, nd))
    fpga = 1 if w.maxCPUs else 0
    if w.maxCPUs:
        time[:, 0] = [x.cpuLatency for x in w.nodes]
    sup = np.array([bool(x.supportedOnFpga) for x in w.nodes])
    time[:, fpga:] = np.where(sup, [x.fpgaLatency for x in w.nodes], np.inf)[:, None]
    classes: dict[int, list[int]] = {}
    for j, x in enumerate(w.nodes):
        if x.colorClass is not None:
            classes.setdefault(x.colorClass, []).append(j)
    t_op = np.array(sorted(cons), np.int64)
    t_ptr = np.zeros(t_op.shape[0] + 1, np.int64)
    t_ptr[1:] = np.cumsum([len(cons[u]) for u in t_op])
    return CostGraph(
        source=source, fmt="dnn-partitioning",
        names=[str(x.id) for x in w.nodes], labels=[x.name for x in w.nodes],
        devices=devices, device_class=(("cpu",) if w.maxCPUs else ()) + ("fpga",) * k,
        time=time, size=np.array([round(x.size) for x in w.nodes], np.int64),
        t_op=t_op, t_port=np.zeros(t_op.shape[0], np.int64),
        t_bytes=np.array([round(nbytes[u]) for u in t_op], np.int64),
        t_time=np.array([cost[u][0] for u in t_op], np.float64),
        t_ptr=t_ptr, t_cons=np.array([v for u in t_op for v in cons[u]], np.int64),
        ties=[c for c in classes.values() if len(c) > 1],
        capacity=np.array(([np.inf] if w.maxCPUs else []) + [float(w.maxSizePerFPGA)] * k),
        free_comm=np.array(([True] if w.maxCPUs else []) + [False] * k),
        backward=np.array([bool(x.isBackwardNode) for x in w.nodes]))


class SplitPart(msgspec.Struct):
    nodes: list[int]


class Split(msgspec.Struct):
    cpus: list[SplitPart] = []
    fpgas: list[SplitPart] = []


def read_split(path: str, module, devices: tuple[str, ...]) -> np.ndarray:
    """Device index (into ``devices``) per op of ``module`` from a split file in the peer's format.
    ``cpus`` entries go to the ``free_comm`` device, ``fpgas[i]`` to the i-th other device; an op
    the split leaves out takes its tie class's device."""

    s: Split = convert(load_json(path), Split, lambda p, what: f"{path}: {p} {what}")
    free = free_comm(module, devices)
    cpu = np.flatnonzero(free)
    acc = np.flatnonzero(~free)
    names = {op.name: i for i, op in enumerate(module.graph.ops)}
    dev = np.full(len(names), -1, np.int64)
    for field, parts, targets in (("cpus", s.cpus, [cpu[0]] * len(s.cpus) if cpu.size else []),
                                  ("fpgas", s.fpgas, list(acc))):
        if len(parts) > len(targets):
            raise InputError(f"{path}: {field}: {len(parts)} entries, the workload has {len(targets)} such devices")
        for part, d in zip(parts, targets):
            for i in part.nodes:
                j = names.get(str(i))
                if j is None:
                    raise InputError(f"{path}: {field}: node {i} is not in the workload")
                dev[j] = d
    ties = module.graph.ties.numpy() if module.graph.ties is not None else np.zeros((0, 2), np.int64)
    for _ in range(len(ties) + 1):  # a class is a chain of pairs: spread a known device along it
        changed = False
        for a, b in ties:
            if dev[a] < 0 <= dev[b] or dev[b] < 0 <= dev[a]:
                dev[a] = dev[b] = max(dev[a], dev[b])
                changed = True
            elif dev[a] != dev[b]:
                raise InputError(f"{path}: nodes {module.graph.ops[a].name} and {module.graph.ops[b].name} share a "
                                 f"colour class but not a device")
        if not changed:
            break
    missing = np.flatnonzero(dev < 0)
    if missing.size:
        raise InputError(f"{path}: node {module.graph.ops[missing[0]].name} is in no part of the split "
                         f"(nor is any node of its colour class)")
    return dev


def split_json(module, devices: tuple[str, ...], op_device: np.ndarray, loads: np.ndarray | None = None) -> dict:
    """The peer's split of a device per op: the ``free_comm`` devices under ``cpus``, the others
    under ``fpgas`` in device order, nodes by their original ids; ``load``/``maxLoad`` filled
    when ``loads`` (per device) is given, else -1 (as their expert files)."""

    free = free_comm(module, devices)
    ids = [_id(op.name) for op in module.graph.ops]
    op_device = np.asarray(op_device)

    def part(d):
        return {"load": float(loads[d]) if loads is not None else -1,
                "nodes": sorted(ids[i] for i in np.flatnonzero(op_device == d))}

    return {"maxLoad": float(loads.max()) if loads is not None and loads.size else -1,
            "cpus": [part(d) for d in np.flatnonzero(free)],
            "fpgas": [part(d) for d in np.flatnonzero(~free)]}


def _id(name: str):
    try:
        return int(name)
    except ValueError:
        return name

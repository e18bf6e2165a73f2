"""The cost graph read from a file, its checks and its lowering into a Module (see :mod:`hdp.costgraph`)."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hdp.base.errors import InputError
from hdp.base.validation import FLOAT_MAX
from hdp.ir.build import graph_from_edges, topological_order
from hdp.ir.types import Array, Costs, Module, Op, Support
from hdp.ir.verify import verify
from hdp.placement.maxload import MaxLoad, group_bytes
from hdp.placement.objective import Latency, Throughput
from hdp.placement.problem import problem_of

#: ``--format`` values.
FORMATS = ("hdp", "dnn-partitioning")
#: The op type of every cost-graph op.
COST_OP = "CostOp"


@dataclass(frozen=True)
class CostGraph:
    """A cost graph read from a file. Ops in file order; ``names`` unique (the peer's node ids as
    text), ``labels`` the human names. ``time[i, d]`` is ``inf`` where op ``i`` cannot run on ``d``.
    Tensors: ``t_op``/``t_port`` their producer and its output port, ``t_bytes``, ``t_time``
    (seconds to move it across devices, NaN: the link model prices it), consumers in CSR
    ``t_ptr``/``t_cons`` (op indices)."""

    source: str
    fmt: str
    names: list[str]
    labels: list[str]
    devices: tuple[str, ...]
    device_class: tuple[str, ...]
    time: np.ndarray
    size: np.ndarray
    t_op: np.ndarray
    t_port: np.ndarray
    t_bytes: np.ndarray
    t_time: np.ndarray
    t_ptr: np.ndarray
    t_cons: np.ndarray
    ties: list[list[int]]
    capacity: np.ndarray
    free_comm: np.ndarray
    link_latency: float = 0.0
    link_bandwidth: float = float("inf")
    extra: dict = field(default_factory=dict)
    #: bool per op: a training graph's backward op (None: none is); orders contiguous splits
    #: (:mod:`hdp.placement.ideals`)
    backward: np.ndarray | None = None

    @property
    def n_ops(self) -> int:
        return len(self.names)


#: Devices a cost graph may expand to (its kinds times their counts, after :func:`usable_count`): every
#: problem holds a time per op and device, and the searches look at every device of a class.
MAX_DEVICES = 256


def usable_count(source: str, field: str, count: int, runnable: int, kind: str) -> int:
    """How many of ``count`` identical devices of ``kind`` a cost graph gets: no more than the
    ``runnable`` ops that may run on the kind (one device more could only stay empty: the best
    placement is the same), with a warning when that is fewer; InputError naming ``field`` when
    they are more than :data:`MAX_DEVICES`."""
    n = max(1, min(count, runnable))
    if n < count:
        warnings.warn(f"{source}: {field} is {count}, but only {runnable} op{'s' if runnable != 1 else ''} can run "
                      f"on {kind}: placing on {n} (more could only stay empty)", stacklevel=2)
    if n > MAX_DEVICES:
        raise InputError(f"{source}: {field}: {n} devices of {kind} that ops could use; a cost graph has at most "
                         f"{MAX_DEVICES} devices")
    return n


def load_json(path: str | Path):
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    except (ValueError, RecursionError) as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None


def check(cg: CostGraph) -> None:
    """InputErrors for what no placement can satisfy, naming the op: a tie class that no device can
    hold (every member supported there and the class's bytes within its cap)."""
    n = cg.n_ops
    ok = np.isfinite(cg.time)
    classes = cg.ties + [[i] for i in sorted(set(range(n)) - {i for c in cg.ties for i in c})]
    for members in classes:
        m = np.asarray(members, np.int64)
        fits = ok[m].all(axis=0) & (cg.size[m].sum() <= cg.capacity)
        if not fits.any():
            what = "tie class of op" if len(members) > 1 else "op"
            nb = int(cg.size[m].sum())
            why = [f"{d}: {'unsupported' if not ok[m, j].all() else f'{nb} B > cap {cg.capacity[j]:.0f} B'}"
                   for j, d in enumerate(cg.devices)]
            raise InputError(f"{cg.source}: no device can hold the {what} '{cg.names[members[0]]}'"
                             f"{f' ({len(members)} ops)' if len(members) > 1 else ''}: {'; '.join(why)}")


def lower(cg: CostGraph):
    """The Module of a cost graph (see the module docstring)."""

    n = cg.n_ops
    per_t = np.diff(cg.t_ptr)
    src = np.repeat(cg.t_op, per_t).astype(np.int64)
    dst = cg.t_cons.astype(np.int64)
    try:
        order = topological_order(n, src, dst)
    except ValueError:
        raise InputError(f"{cg.source}: the graph has a cycle (through op '{cg.names[_on_cycle(n, src, dst)]}')") from None
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n)
    nports = np.zeros(n, np.int64)
    np.maximum.at(nports, cg.t_op, cg.t_port + 1)
    ops = [Op(name=cg.names[i], type=COST_OP, out_shapes=((),) * int(max(nports[i], 1)),
              out_types=("opaque",) * int(max(nports[i], 1)), weight_bytes=int(cg.size[i])) for i in order]
    e_src, e_dst = pos[src], pos[dst]
    e_bytes = np.repeat(cg.t_bytes, per_t)
    e_port = np.repeat(cg.t_port, per_t)
    e_time = np.repeat(cg.t_time, per_t)
    if np.isnan(e_time).any():
        bw = cg.link_bandwidth if cg.link_bandwidth > 0 else np.inf
        e_time = np.where(np.isnan(e_time), cg.link_latency + e_bytes / bw, e_time)
    ekey = np.lexsort((np.zeros_like(e_dst), e_dst, e_src))  # graph_from_edges's canonical order
    e_src, e_dst, e_bytes, e_port, e_time = (a[ekey] for a in (e_src, e_dst, e_bytes, e_port, e_time))
    ties = [(int(pos[c[j]]), int(pos[c[j + 1]])) for c in cg.ties for j in range(len(c) - 1)]
    renamed = {cg.names[i]: cg.labels[i] for i in range(n) if cg.labels[i] and cg.labels[i] != cg.names[i]}
    graph = graph_from_edges(ops, e_src, e_dst, edge_bytes=e_bytes, src_port=e_port, renamed=renamed,
                             ties=np.asarray(ties, np.int64).reshape(-1, 2) if ties else None)
    time = cg.time[order]
    nd = len(cg.devices)
    support = Support(devices=cg.devices, mask=Array.of(np.isfinite(time), np.bool_))
    costs = Costs(devices=cg.devices, op_time=Array.of(time, np.float64), kind=("modeled",) * nd,
                  link_latency=float(cg.link_latency), link_bandwidth=min(float(cg.link_bandwidth), FLOAT_MAX),
                  subgraph_overhead=0.0,
                  device_class=cg.device_class, edge_time=Array.of(e_time, np.float64))
    meta = {"costgraph": cg.source, "costgraph_format": cg.fmt, "placement_rules": "ties",
            "capacity": ",".join(f"{d}={_num(c)}" for d, c in zip(cg.devices, cg.capacity)),
            "free_comm": ",".join(d for d, f in zip(cg.devices, cg.free_comm) if f)}
    if cg.backward is not None and cg.backward.any():
        meta["backward"] = json.dumps([cg.names[i] for i in order if cg.backward[i]])
    meta.update({k: str(v) for k, v in cg.extra.items()})
    m = Module(graph=graph, meta=meta, support=support, costs=costs)
    verify(m)
    return m


def _num(x: float) -> str:
    return "inf" if not np.isfinite(x) else f"{x:.17g}"


def _on_cycle(n, src, dst) -> int:
    """An op on a cycle (the graph has one)."""
    indeg = np.bincount(dst, minlength=n)
    out = [[] for _ in range(n)]
    for a, b in zip(src.tolist(), dst.tolist()):
        out[a].append(b)
    stack = [i for i in range(n) if indeg[i] == 0]
    while stack:
        u = stack.pop()
        for v in out[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                stack.append(v)
    return int(np.flatnonzero(indeg > 0)[0])


def is_costgraph(module) -> bool:
    return module.meta.get("placement_rules") == "ties"


def time_text(module, t: float) -> str:
    """A time of ``module``'s cost table as text in its own unit: milliseconds for a model and for
    hdp's cost-graph format (seconds), the bare number for msr-fiddle/dnn-partitioning's, whose
    README calls its latencies and costs "time it takes" without a unit."""
    if is_costgraph(module) and module.meta.get("costgraph_format") == "dnn-partitioning":
        return f"{t:.6g} time units"
    return f"{t * 1e3:.3f} ms"


def capacities(module, devices) -> np.ndarray:
    """Bytes each of ``devices`` may hold, from a cost graph's Module (``inf``: no cap)."""
    caps = dict(kv.split("=", 1) for kv in module.meta.get("capacity", "").split(",") if "=" in kv)
    return np.array([float(caps.get(d, "inf")) for d in devices])


def free_comm(module, devices) -> np.ndarray:
    """Whether each of ``devices`` pays nothing for transfers (the peer's CPU)."""
    free = set(filter(None, module.meta.get("free_comm", "").split(",")))
    return np.array([d in free for d in devices], bool)


def backward_ops(module) -> np.ndarray | None:
    """Which ops of a cost graph's Module are a training graph's backward ops (None: none)."""

    names = module.meta.get("backward")
    if not names:
        return None
    want = set(json.loads(names))
    return np.array([op.name in want for op in module.graph.ops], bool)


def max_load_data(problem, module):
    """The :class:`~hdp.placement.maxload.MaxLoad` data of a cost graph's Module: per-group bytes,
    caps, ``free_comm`` and the backward ops from its meta."""

    return MaxLoad(group_bytes(problem, module), capacities(module, problem.devices), free_comm(module, problem.devices),
                   backward_ops(module))


#: Requests in flight of a cost graph's throughput objective: the peer's model is the steady state
#: of an unbounded pipeline (max load alone); with this many, latency / requests never binds.
STEADY_REQUESTS = 4096


def throughput_objective(module, devices):
    """The throughput objective of a cost graph: its max per-device load with the peer's rule (a
    cut tensor costs on its sender and on each distinct receiving device; ``free_comm`` devices pay
    nothing)."""

    free = free_comm(module, devices)
    return Throughput(requests=STEADY_REQUESTS, send=1.0, receive=1.0,
                      free_comm=tuple(d for d, f in zip(devices, free) if f))


def problem_for(module, objective: str = "throughput"):
    """The placement problem of a cost graph's Module: its caps, and the objective asked for
    (``throughput``: :func:`throughput_objective`; ``latency``: one request, sequentially)."""

    devices = tuple(module.costs.devices)
    obj = throughput_objective(module, devices) if objective == "throughput" else Latency()
    return problem_of(module, objective=obj, capacity=capacities(module, devices))

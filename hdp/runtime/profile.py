"""Per-op, per-device execution times: measured on real devices, a roofline on modeled ones.

**Measured** (real devices): the whole source model is compiled on the device alone (no HETERO;
an aliased device such as ``CPU_B`` is registered by :func:`hdp.runtime.devices.make_core`) with
``PERF_COUNT=YES`` in a worker process and run ``warmup + runs`` times. The CPU plugin's per-node
counter is a running average over every inference since compile, of durations truncated to whole
microseconds; the first inference is much slower (weights are repacked), so a node's time is the
mean over the timed runs recovered from the counter read after the warm-up (``w`` inferences,
at least 1) and at the end: ``(avg_end * (w + r) - avg_warm * w) / r``, plus 0.5 µs for the
truncation of every run if the node executed. This is a mean, not a median: a run slowed down by
another process shows up in it (the whole-model total is the median wall time). Mapping back to IR
ops:

- a node's ``originalLayersNames`` lists the source ops it implements (a convolution with its
  fused bias add and activation lists all three); the worker, which holds the model it compiled,
  maps those names to op positions (``ops``), so no name crosses processes and auto-generated
  names never have to agree between two reads of the model; its time is split across those ops in proportion
  to ``max(flops, output elements)``, so fused element-wise ops get a small share and the main op
  the rest;
- some fusions drop the main op's name (Convolution -> Multiply by a constant becomes one
  convolution named after the Multiply; MatMul -> Add becomes a FullyConnected named after the Add):
  a costed op that no node names joins the node that names its nearest consumer (else producer),
  so the convolution still gets the convolution's share;
- nodes that implement no costed op (layout/precision Reorders the plugin inserts, or nodes made
  only of Parameters/Constants/Results) pass their time to the nearest costed node downstream in the
  runtime graph (the consumer that needed the conversion), else upstream;
- ops the plugin removed (constant-folded subgraphs, in-place Reshapes) cost 0 on that device.

``Costs.measured_total`` is the median wall time of the same timed runs (the statistic
:mod:`hdp.runtime.measure` reports). The sum of the per-op times is checked against the mean wall
time (a mean, like the per-node times): ``coverage = sum / mean`` is returned per device by
:func:`profile_costs`, with a warning when it exceeds 1.5 or, for a model slower than 1 ms, falls
below 0.5 (:func:`coverage` gives sum / median from a Costs). The times are **not scaled** to the total: the gap is
the per-inference cost of an infer request (input/output copies, scheduling), which a HETERO run
pays once per subgraph and the cost model charges as ``subgraph_overhead``; spreading it over the
ops would make a many-op subgraph look slower than it is.

**Modeled** devices: ``max(flops / (peak_flops[precision] * efficiency), bytes / memory_bandwidth)
+ op_overhead`` where ``bytes`` sums the op's input tensors (weights arrive as the tensors of their
Constant inputs) and output tensors, floating-point tensors counted at the device's precision.

Parameters, Constants, Results and ops computed only from constants (folded at compile time; a
ShapeOf is a constant for a static-shaped model) cost 0 everywhere. An op the module's support
table marks unsupported on a device costs ``inf`` there (without a table, a modeled device's
``supported_ops`` list decides). A real device is profiled by compiling the whole model on it, so
a real device that cannot compile every op of the model is an error here.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from hdp.errors import InputError
from hdp.ir.build import edge_sources, predecessors_csr
from hdp.ir.types import Array, Costs, Graph, Module
from hdp.runtime.target import PRECISION_BYTES, Device, Target

_FLOAT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}
#: Half the 1 µs resolution of OpenVINO's per-node counters (each run's duration is truncated).
COUNTER_FLOOR = 0.5e-6


def zero_cost_ops(graph: Graph) -> np.ndarray:
    """Bool per op: Parameter/Constant/Result, or constant data (computed only from Constants
    and ShapeOfs, folded at compile time; :mod:`hdp.placement.structure`)."""
    from hdp.placement.problem import FREE_TYPES
    from hdp.placement.structure import CONE, roles

    types = np.array([op.type for op in graph.ops], dtype=object)
    return (roles(graph) == CONE) | np.isin(types, list(FREE_TYPES))


def op_bytes(graph: Graph, precision: str | None = None) -> np.ndarray:
    """Bytes each op reads and writes (inputs + consumed outputs), float64 per op.

    With ``precision`` (``f16``, ``bf16``, ...), floating-point tensors are counted at that width.
    An input that is constant data (a weight and its decompression chain, see
    :mod:`hdp.placement.structure`) counts the weight as stored when it is stored as integers
    (u4/u8/i8 ...: the device reads the compressed bytes), else at the tensor's float width
    (``precision``): an f16-compressed IR and its f32 twin cost the same.
    """
    n = graph.n_ops
    if graph.n_edges == 0:
        return np.zeros(n)
    src = edge_sources(graph)
    dst = graph.indices.numpy()
    port = graph.src_port.numpy()
    eb = graph.edge_bytes.numpy().astype(np.float64)
    if precision is not None:
        width = PRECISION_BYTES[precision]
        scale = np.array([width / _FLOAT_BYTES[graph.ops[s].out_types[p]]
                          if graph.ops[s].out_types[p] in _FLOAT_BYTES else 1.0
                          for s, p in zip(src, port)])
        eb = eb * scale
    stored = _stored_weight_bytes(graph)
    from_cone = np.nonzero(stored[src] >= 0)[0]
    eb[from_cone] = np.minimum(eb[from_cone], stored[src[from_cone]])
    reads = np.bincount(dst, weights=eb, minlength=n)
    _, first = np.unique(src.astype(np.int64) * (int(port.max()) + 1) + port, return_index=True)
    writes = np.bincount(src[first], weights=eb[first], minlength=n)  # each output once
    return reads + writes


def _stored_weight_bytes(graph: Graph) -> np.ndarray:
    """Per op: for constant data computed from integer-typed Constants (compressed weights), the
    bytes of those Constants as stored; -1 for every other op."""
    from hdp.placement.structure import CONE, roles

    role = roles(graph)
    pptr, preds = predecessors_csr(graph)
    out = np.full(graph.n_ops, -1.0)
    for i, op in enumerate(graph.ops):  # topological: predecessors first
        if role[i] != CONE:
            continue
        if op.type == "Constant":
            t = op.out_types[0] if op.out_types else ""
            out[i] = float(op.weight_bytes) if t and t[0] in "ui" and t != "i64" and t != "i32" else -1.0
            continue
        ins = preds[pptr[i]:pptr[i + 1]]
        vals = out[ins]
        out[i] = float(vals[vals >= 0].sum()) if (vals >= 0).any() else -1.0
    return out


def roofline(graph: Graph, device: Device) -> np.ndarray:
    """Modeled seconds per op on ``device`` (0 for zero-cost ops)."""
    flops = np.array([op.flops for op in graph.ops], np.float64)
    peak = device.peak_flops[device.precision] * device.efficiency
    t = np.maximum(flops / peak, op_bytes(graph, device.precision) / device.memory_bandwidth)
    t += device.op_overhead
    t[zero_cost_ops(graph)] = 0.0
    return t


def node_seconds(node: dict, warmup: int, runs: int) -> float:
    """Mean seconds per timed run of one runtime node from its two counter readings."""
    a, r = max(int(warmup), 0), int(runs)
    t = (node["avg_all"] * (a + r) - node["avg_warm"] * a) / r
    return max(t, 0.0) + (COUNTER_FLOOR if node.get("executed") else 0.0)


def attribute(graph: Graph, nodes: list[dict], warmup: int, runs: int) -> tuple[np.ndarray, float]:
    """Per-op seconds from the runtime graph ``nodes`` of one profiled compile (see
    :mod:`hdp.runtime.worker`; a node's ``ops`` are the positions of the ops it implements) after
    ``warmup`` + ``runs`` inferences; returns (times, seconds attributed to no op)."""
    n = graph.n_ops
    free = zero_cost_ops(graph)
    weight = np.array([max(op.flops, sum(math.prod(s) for s in op.out_shapes)) for op in graph.ops], np.float64)
    weight = np.maximum(weight, 1.0)

    k = len(nodes)
    ids: list[list[int]] = []
    for nd in nodes:
        own = [int(i) for i in nd["ops"] if 0 <= i < n and not free[i]]
        ids.append(sorted(set(own)))
    _absorb_unnamed(graph, free, ids)
    succ: list[list[int]] = [[] for _ in range(k)]
    for j, nd in enumerate(nodes):
        for p in nd["preds"]:
            succ[p].append(j)

    def nearest(start: int, step) -> list[int]:
        seen, frontier = {start}, [start]
        while frontier:
            nxt = []
            for u in frontier:
                for v in step(u):
                    if v in seen:
                        continue
                    if ids[v]:
                        return ids[v]
                    seen.add(v)
                    nxt.append(v)
            frontier = nxt
        return []

    times = np.zeros(n)
    lost = 0.0
    for j, nd in enumerate(nodes):
        t = node_seconds(nd, warmup, runs)
        if t == 0.0:
            continue
        target = ids[j] or nearest(j, lambda u: succ[u]) or nearest(j, lambda u: nodes[u]["preds"])
        if not target:
            lost += t
            continue
        w = weight[target]
        times[target] += t * w / w.sum()
    return times, lost


def _absorb_unnamed(graph: Graph, free: np.ndarray, ids: list[list[int]]) -> None:
    """Give every costed op no runtime node names to the node naming its nearest consumer (or,
    failing that, producer): fusions that rename the fused op drop the original name."""
    owner = {}
    for j, own in enumerate(ids):
        for i in own:
            owner.setdefault(i, j)
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    pindptr, pred = predecessors_csr(graph)
    orphans = [i for i in range(graph.n_ops) if not free[i] and i not in owner]
    for i in reversed(orphans):  # consumers first, so chains of unnamed ops resolve
        j = next((owner[s] for s in succ[indptr[i]:indptr[i + 1]] if s in owner), None)
        if j is not None:
            owner[i] = j
    for i in orphans:
        if i not in owner:
            j = next((owner[p] for p in pred[pindptr[i]:pindptr[i + 1]] if p in owner), None)
            if j is not None:
                owner[i] = j
    for i in orphans:
        if i in owner:
            ids[owner[i]].append(i)


def coverage(costs: Costs) -> tuple[float, ...]:
    """Per device: sum of op times / whole-model latency (nan when no total is known)."""
    t = costs.op_time.numpy()
    out = []
    for j in range(len(costs.devices)):
        col = t[:, j]
        s = float(col[np.isfinite(col)].sum())
        tot = costs.measured_total[j] if j < len(costs.measured_total) else 0.0
        out.append(s / tot if tot > 0 else float("nan"))
    return tuple(out)


def profile_costs(module: Module, target: Target, *, runs: int = 10, warmup: int = 1,
                  timeout: float = 600.0) -> tuple[Costs, dict[str, dict[str, float]]]:
    """The Costs of ``module`` on ``target`` and, per device, ``total`` (median), ``mean``, ``sum``,
    ``coverage`` and ``unattributed`` seconds (measured devices) or ``total``/``sum`` (modeled)."""
    g = module.graph
    n, devs = g.n_ops, target.devices
    op_time = np.zeros((n, len(devs)))
    totals, kinds, info = [], [], {}
    real = [d for d in devs if d.kind == "real"]
    measurer = None
    if real and n:
        from hdp.runtime.measure import MeasureError, Measurer

        measurer = Measurer(module, target, runs=runs, warmup=warmup, timeout=timeout, cache=False)
    try:
        for j, d in enumerate(devs):
            if d.kind == "modeled" or not n:
                op_time[:, j] = roofline(g, d) if n else 0.0
                kinds.append("modeled")
                total = float(op_time[:, j].sum())
                totals.append(total)
                info[d.name] = {"total": total, "sum": total}
                continue
            try:
                reply = measurer.profile(d.name, runs=runs, warmup=max(warmup, 1))
            except MeasureError as e:
                raise InputError(str(e)) from None
            times, lost = attribute(g, reply["nodes"], max(warmup, 1), runs)
            op_time[:, j] = times
            total, mean = float(np.median(reply["times"])), float(np.mean(reply["times"]))
            kinds.append("measured")
            totals.append(total)
            s = float(times.sum())
            cov = s / mean if mean > 0 else float("nan")
            info[d.name] = {"total": total, "mean": mean, "sum": s, "coverage": cov, "unattributed": lost}
            if cov > 1.5 or (cov < 0.5 and mean > 1e-3):
                warnings.warn(f"profile on {d.name}: per-op times sum to {cov:.2f}x the mean latency "
                              f"({s * 1e3:.3f} vs {mean * 1e3:.3f} ms); the per-op costs are unreliable "
                              f"(another process competing for the cores?)", stacklevel=2)
    finally:
        if measurer is not None:
            measurer.close()
    if n:
        sup = module.support
        free = zero_cost_ops(g)
        types = np.array([op.type for op in g.ops], dtype=object)
        for j, d in enumerate(devs):
            if sup is not None and d.name in sup.devices:
                op_time[~sup.mask.numpy()[:, sup.devices.index(d.name)], j] = np.inf
            elif d.kind == "modeled" and d.supported_ops:  # no support table: the target's list
                op_time[~np.isin(types, d.supported_ops) & ~free, j] = np.inf
    costs = Costs(devices=target.device_names, op_time=Array.of(op_time, np.float64), kind=tuple(kinds),
                  link_latency=target.link.latency, link_bandwidth=target.link.bandwidth,
                  subgraph_overhead=target.link.subgraph_overhead, measured_total=tuple(totals))
    return costs, info

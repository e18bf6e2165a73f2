"""Per-op, per-device execution times: measured on real devices, a roofline on modeled ones.

**Measured** (real devices): the whole source model is compiled on each device alone (no HETERO;
an aliased device such as ``CPU_B`` is registered by :func:`hdp.target.devices.make_core`) with
``PERF_COUNT=YES``, every device in one request to one worker process (see
:mod:`hdp.runtime.measure.worker`): the devices compile and run ``warmup`` inferences (at least 1) in
parallel threads, nothing of which is timed; then the timed runs go in **interleaved rounds**, one
run per device per round, the order alternating, so that every device sees the same load from
other processes. The compiled model and infer request of the warm-up are the ones timed. There
are ``min_runs`` rounds (default 3), then more while another round, judged by the last, keeps the
timed runs within ``seconds`` (default 1 s), at most ``runs`` (default 10): a model faster than
50 ms on two devices still gets 10 runs each, a 500-op CNN at 0.1-0.5 s per inference 2-5.

The trade, measured on inception_v3 on ``virtual`` on the shared 2-core bench VM, 8 profiles per
scheme in each of three sessions under different load from other processes
(``bench/profile_stability.py``, table in ``bench/topics/steps.md``; CPU_B falls back to f32 there, so both
devices run the same code and any difference between them is noise). Per session (medians), the old
scheme (10 runs per device, one device after the other) took 6.6-17 s, the default 3.1-7.6 s, 10
interleaved rounds (``seconds=0``) 6.2-16 s. Interleaving removes the worst device-level errors: the
two identical devices measured up to 1.97x apart in total with the old scheme (worst profile of a
session), at most 1.25x with the default and 1.09x with 10 interleaved rounds. Per op, the default's
means over 2-5 runs are noisier: the time-weighted mean ``|log|`` ratio between the two devices'
per-op times was 0.28-0.58 against 0.16-0.29 for the old scheme (0.17-0.27 for 10 interleaved
rounds), worst under heavy load, when only 2 rounds fit. A placement made by ``optimal`` on any
scheme's costs was as good: 1.0-1.7 % above the best single device for every scheme, evaluated on
costs pooled from every profile. Set ``seconds`` higher, or 0 for always ``runs``, where per-op
precision is worth the time (e.g. devices that differ by less than 2x per op on a loaded host).

The CPU plugin's per-node counter is a running average over every inference since compile, of
durations truncated to whole microseconds; the first inference is much slower (weights are
repacked), so a node's time is the mean over the timed runs recovered from the counter read after
the warm-up (``w`` inferences) and at the end: ``(avg_end * (w + r) - avg_warm * w) / r``, plus
0.5 µs for the truncation of every run if the node executed. This is a mean, not a median: a run
slowed down by another process shows up in it (the whole-model total is the median wall time; a
per-op median over the same few runs, read after every run, was no more stable). Mapping back to IR
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
:mod:`hdp.runtime.measure.measurer` reports). The sum of the per-op times is checked against the mean wall
time (a mean, like the per-node times): ``coverage = sum / mean`` is returned per device by
:func:`profile_costs`, with a warning when it exceeds 1.5 or, for a model slower than 1 ms, falls
below 0.5 (:func:`coverage` gives sum / median from a Costs). The times are **not scaled** to the total: the gap is
the per-inference cost of an infer request (input/output copies, scheduling), which a HETERO run
pays once per subgraph and the cost model charges as ``subgraph_overhead``; spreading it over the
ops would make a many-op subgraph look slower than it is.

**Modeled** devices: ``max(flops / (peak_flops[precision] * efficiency), bytes / memory_bandwidth)
+ op_overhead`` where ``bytes`` sums the op's input tensors (weights arrive as the tensors of their
Constant inputs) and output tensors, floating-point tensors counted at the device's precision.
Where the target declares a memory several devices share with its bandwidth, the Costs also
carry each op's bytes (``op_dram``) and the shares (``dram_shares``), the simulator's term for
devices of one DRAM running at once.

Parameters, Constants, Results and ops computed only from constants (folded at compile time; a
ShapeOf is a constant for a static-shaped model) cost 0 everywhere. An op the module's support
table marks unsupported on a device costs ``inf`` there (without a table, a modeled device's
``supported_ops`` list decides). A real device is profiled by compiling the whole model on it, so
a real device that cannot compile every op of the model is an error here.

**Chunks.** A model of more than ``whole_max`` ops (default :data:`~hdp.runtime.measure.chunks.WHOLE_MAX`,
8,192: larger than every zoo model) is profiled in chunks of ``chunk`` ops instead, each distinct
chunk compiled and timed once (:mod:`hdp.runtime.measure.chunks`): OpenVINO's compile of a long
element-wise chain grows superlinearly (cubically on the CPU plugin), so a 20,000-op Relu/Add chain
sharing one Constant did not compile within 20 minutes, and its chunks compile in seconds. The
nodes and times of the chunks go through the same attribution as a whole model's.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings

import numpy as np

from hdp.base.errors import InputError
from hdp.ir.build import csr, edge_sources, predecessors_csr
from hdp.ir.types import Array, Costs, Graph, Module
from hdp.placement.problem import FREE_TYPES
from hdp.placement.structure import CONE, roles
from hdp.runtime.costs import denoise as dn
from hdp.runtime.measure.chunks import CHUNK_OPS, WHOLE_MAX
from hdp.runtime.measure.measurement import MeasureError
from hdp.runtime.measure.measurer import Measurer
from hdp.target.target import PRECISION_BYTES, Device, Target

_FLOAT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2}
#: Half the 1 µs resolution of OpenVINO's per-node counters (each run's duration is truncated).
COUNTER_FLOOR = 0.5e-6


def zero_cost_ops(graph: Graph) -> np.ndarray:
    """Bool per op: Parameter/Constant/Result, or constant data (computed only from Constants
    and ShapeOfs, folded at compile time; :mod:`hdp.placement.structure`)."""

    types = np.array([op.type for op in graph.ops], dtype=object)
    return (roles(graph) == CONE) | np.isin(types, list(FREE_TYPES))


def op_bytes(graph: Graph, precision: str | None = None) -> np.ndarray:
    """Bytes each op reads and writes (inputs + consumed outputs), float64 per op.

    With ``precision`` (``f16``, ``bf16``, ...), floating-point tensors are counted at that width.
    An input that is constant data (a weight and its decompression chain, see
    :mod:`hdp.placement.structure`) counts the weight as stored when it is stored as integers
    (u4/u8/i8 ...: the device reads the compressed bytes), else at the tensor's float width
    (``precision``): an f16-compressed IR and its f32 twin cost the same. A Gather's table (its first
    input) counts at most the bytes it gathers (its output).
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
    # a Gather reads the rows it gathers, not its whole table (an embedding lookup of one token)
    gather = np.array([op.type == "Gather" for op in graph.ops], bool)
    rows = np.nonzero(gather[dst] & (graph.dst_port.numpy() == 0))[0]
    if rows.size:
        out = _output_bytes(graph, precision)
        eb[rows] = np.minimum(eb[rows], out[dst[rows]])
    reads = np.bincount(dst, weights=eb, minlength=n)
    _, first = np.unique(src.astype(np.int64) * (int(port.max()) + 1) + port, return_index=True)
    writes = np.bincount(src[first], weights=eb[first], minlength=n)  # each output once
    return reads + writes


def _output_bytes(graph: Graph, precision: str | None) -> np.ndarray:
    """Bytes of each op's first output (floating-point at ``precision`` when given)."""
    out = np.zeros(graph.n_ops)
    for i, op in enumerate(graph.ops):
        if not op.out_shapes:
            continue
        t = op.out_types[0] if op.out_types else "f32"
        width = PRECISION_BYTES[precision] if precision is not None and t in _FLOAT_BYTES else \
            _FLOAT_BYTES.get(t, PRECISION_BYTES.get(t, 4))
        out[i] = math.prod(op.out_shapes[0]) * width
    return out


def _stored_weight_bytes(graph: Graph) -> np.ndarray:
    """Per op: for constant data computed from integer-typed Constants (compressed weights), the
    bytes of those Constants as stored; -1 for every other op."""

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


def roofline(graph: Graph, device: Device, precision: str | None = None, streams: bool = False) -> np.ndarray:
    """Modeled seconds per op on ``device`` (0 for zero-cost ops) at ``precision`` (default: the
    device's); with ``streams``, per inference in throughput mode (compute and the per-op overhead
    divided by the device's ``stream_efficiency``, memory-bound work not)."""
    p = precision or device.precision
    flops = np.array([op.flops for op in graph.ops], np.float64)
    gain = device.stream_efficiency if streams else 1.0
    peak = device.peak_flops[p] * min(device.efficiency_at(p) * gain, 1.0)
    t = np.maximum(flops / peak, op_bytes(graph, p) / device.memory_bandwidth)
    t += device.op_overhead / gain
    t[zero_cost_ops(graph)] = 0.0
    return t


def dram_bytes(graph: Graph, device: Device) -> np.ndarray:
    """Bytes each op moves to and from ``device``'s memory (the roofline's, at its precision; 0 for
    zero-cost ops): what devices sharing one DRAM draw on it together (``Costs.op_dram``)."""
    b = op_bytes(graph, device.precision)
    b[zero_cost_ops(graph)] = 0.0
    return b


def node_seconds(nodes: list[dict], warmup: int, runs: int) -> np.ndarray:
    """Mean seconds per timed run of each runtime node, from its two counter readings."""
    k = len(nodes)
    a, r = max(int(warmup), 0), int(runs)
    warm = np.fromiter((nd["avg_warm"] for nd in nodes), np.float64, k)
    end = np.fromiter((nd["avg_all"] for nd in nodes), np.float64, k)
    ran = np.fromiter((bool(nd.get("executed")) for nd in nodes), bool, k)
    return np.maximum((end * (a + r) - warm * a) / r, 0.0) + np.where(ran, COUNTER_FLOOR, 0.0)


def split_weights(graph: Graph) -> np.ndarray:
    """Per op, its share weight within a fused runtime node: ``max(flops, output elements, 1)``."""
    return np.fromiter((max(op.flops, sum(math.prod(s) for s in op.out_shapes), 1.0) for op in graph.ops),
                       np.float64, graph.n_ops)


def node_run_seconds(nodes: list[dict], warmup: int) -> np.ndarray:
    """Seconds of every timed run of every runtime node (runs x nodes), from the counter read after
    the warm-up and after each run (``avg_runs``): run ``r`` took ``avg_r (w + r) - avg_(r-1) (w + r - 1)``
    plus the truncation floor. The counter is a truncated average (whole microseconds), so one run's
    figure is off by up to ``w + r`` µs; their mean is exact to the counter's resolution."""
    k = len(nodes)
    if not k:
        return np.zeros((0, 0))
    a = max(int(warmup), 0)
    avg = np.array([nd["avg_runs"] for nd in nodes], np.float64).T  # (runs + 1) x nodes
    count = (a + np.arange(avg.shape[0], dtype=np.float64))[:, None]
    per = np.diff(avg * count, axis=0)
    ran = np.fromiter((bool(nd.get("executed")) for nd in nodes), bool, k)
    return np.maximum(per, 0.0) + np.where(ran, COUNTER_FLOOR, 0.0)[None, :]


def attribute(graph: Graph, nodes: list[dict], warmup: int, runs: int) -> tuple[np.ndarray, float]:
    """Per-op seconds from the runtime graph ``nodes`` of one profiled compile (see
    :mod:`hdp.runtime.measure.worker`; a node's ``ops`` are the positions of the ops it implements) after
    ``warmup`` + ``runs`` inferences; returns (times, seconds attributed to no op)."""
    times, lost = attribute_seconds(graph, nodes, node_seconds(nodes, warmup, runs)) if nodes else \
        (np.zeros(graph.n_ops), 0.0)
    return times, float(lost)


def attribute_seconds(graph: Graph, nodes: list[dict], secs: np.ndarray) -> tuple[np.ndarray, np.ndarray | float]:
    """Per-op seconds from seconds per runtime node: ``secs`` is one value per node (then one time
    per op and the seconds attributed to no op) or a (runs x nodes) array (then runs x ops and one
    lost figure per run). The map from nodes to ops is linear, built once.

    Linear in ops + nodes: (node, op) pairs as arrays, a node's time split over its ops with one
    ``bincount`` per run; only the few nodes naming no costed op are walked one by one (breadth
    first)."""
    n, k = graph.n_ops, len(nodes)
    one = np.ndim(secs) == 1
    if not k:
        rows = np.shape(secs)[0] if not one else 1
        return (np.zeros(n), 0.0) if one else (np.zeros((rows, n)), np.zeros(rows))
    secs = np.asarray(secs, np.float64).reshape(-1, k)
    free = zero_cost_ops(graph)
    counts = np.fromiter((len(nd["ops"]) for nd in nodes), np.int64, k)
    op = np.fromiter(itertools.chain.from_iterable(nd["ops"] for nd in nodes), np.int64, int(counts.sum()))
    node = np.repeat(np.arange(k, dtype=np.int64), counts)
    keep = (op >= 0) & (op < n)
    keep[keep] = ~free[op[keep]]
    pair = np.unique(node[keep] * max(n, 1) + op[keep])  # each (node, costed op) once, by node
    node, op = _absorb_unnamed(graph, free, pair // max(n, 1), pair % max(n, 1))
    named = np.zeros(k, bool)
    named[node] = True
    # a node naming no costed op passes its time to the nearest named node downstream, else upstream
    to = np.where(named, np.arange(k), -1)
    homeless = np.flatnonzero(~named & (secs > 0).any(axis=0))
    if homeless.size:
        pcount = np.fromiter((len(nd["preds"]) for nd in nodes), np.int64, k)
        pred = np.fromiter(itertools.chain.from_iterable(nd["preds"] for nd in nodes), np.int64, int(pcount.sum()))
        pptr = np.concatenate(([0], np.cumsum(pcount)))
        dst = np.repeat(np.arange(k, dtype=np.int64), pcount)
        sptr, succ = csr(k, pred, dst)  # successors of each node, in node order
        for j in homeless:
            m = _nearest(int(j), sptr, succ, named)
            if m < 0:
                m = _nearest(int(j), pptr, pred, named)
            to[j] = m
    share = np.zeros_like(secs)
    moved = to >= 0
    np.add.at(share, (slice(None), to[moved]), secs[:, moved])
    lost = secs[:, ~moved].sum(axis=1)
    w = split_weights(graph)[op]
    wsum = np.bincount(node, weights=w, minlength=k)
    frac = w / wsum[node]
    times = np.stack([np.bincount(op, weights=share[r, node] * frac, minlength=n) for r in range(secs.shape[0])])
    return (times[0], float(lost[0])) if one else (times, lost)


def _nearest(start: int, ptr: np.ndarray, adj: np.ndarray, named: np.ndarray) -> int:
    """The first named node met by a breadth-first walk from ``start`` along CSR ``ptr``/``adj``, or -1."""
    seen, frontier = {start}, [start]
    while frontier:
        nxt = []
        for u in frontier:
            for v in adj[ptr[u]:ptr[u + 1]].tolist():
                if v in seen:
                    continue
                if named[v]:
                    return v
                seen.add(v)
                nxt.append(v)
        frontier = nxt
    return -1


def _absorb_unnamed(graph: Graph, free: np.ndarray, node: np.ndarray, op: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(node, op) pairs plus one for every costed op no runtime node names, given to the node
    naming its nearest consumer (or, failing that, producer): fusions that rename the fused op
    drop the original name. An op named by several nodes belongs to the first."""
    n = graph.n_ops
    owner = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(owner, op, node)
    owner[owner == np.iinfo(np.int64).max] = -1
    orphans = np.flatnonzero(~free & (owner < 0)).tolist()
    if not orphans:
        return node, op
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    pindptr, pred = predecessors_csr(graph)
    for i in reversed(orphans):  # consumers first, so chains of unnamed ops resolve
        j = next((owner[s] for s in succ[indptr[i]:indptr[i + 1]] if owner[s] >= 0), -1)
        owner[i] = j
    for i in orphans:
        if owner[i] < 0:
            owner[i] = next((owner[p] for p in pred[pindptr[i]:pindptr[i + 1]] if owner[p] >= 0), -1)
    adopted = np.array([i for i in orphans if owner[i] >= 0], np.int64)
    return np.concatenate([node, owner[adopted]]), np.concatenate([op, adopted])


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


def profile_costs(module: Module, target: Target, *, runs: int = 10, warmup: int = 1, seconds: float = 1.0,
                  min_runs: int = 3, timeout: float = 600.0, denoise: bool = True,
                  chunk: int = CHUNK_OPS, whole_max: int = WHOLE_MAX,
                  stages: dict[str, float] | None = None,
                  samples: dict | None = None) -> tuple[Costs, dict[str, dict[str, float]]]:
    """The Costs of ``module`` on ``target`` and, per device, ``total`` (median), ``mean``, ``sum``,
    ``coverage``, ``unattributed`` seconds, ``runs``, ``compile_seconds``, ``kind`` (what the
    device is, :func:`hdp.runtime.costs.denoise.device_kind`) and ``scale`` (the profile's own correction,
    below) for measured devices; ``total``/``sum`` for modeled ones.

    Every real device is profiled in one worker request (see :mod:`hdp.runtime.measure.worker`): compiled
    with PERF_COUNT and warmed up ``warmup`` times, in parallel; then timed in interleaved rounds
    (one run per device per round): ``min_runs`` rounds, then more while the next (judged by the
    last) keeps the timed runs within ``seconds`` (0: no budget), at most ``runs``. ``timeout``
    bounds each device's compile, warm-up and runs (the one request gets the sum). A model of more
    than ``whole_max`` ops is profiled in chunks of ``chunk`` ops, each distinct chunk measured once
    (:mod:`hdp.runtime.measure.chunks`; ``chunk=0``: always whole); ``info`` then says how many
    (``chunks``, ``measured_chunks``).

    With ``denoise`` (:mod:`hdp.runtime.costs.denoise`): each op's time is its median over the runs
    (minimum below three), devices of one kind are pooled into one column, the **profile's own
    correction** scales each kind's per-op times so that every op on one device is simulated at
    the median whole-model wall time of the same runs (the per-op counters miss the work between
    nodes and read slow under bursts; the ops keep at least half of the wall time when the
    target's subgraph overhead is larger than the other half), and per-op differences between kinds are shrunk toward the
    device-level ratio; ``Costs.op_se`` holds each op's standard error. Without, each op's time is
    the mean of its runs, as profiled. ``samples``, if given, receives per device the per-run op
    times (``op_runs``, runs x ops), the wall ``times`` and the compiled model's ``properties``.
    With ``stages``, the wall seconds of each step are stored in it: ``start`` (worker start and
    model read), ``prepare`` (compiles and warm-ups), ``timed``, ``nodes`` (reading the runtime
    graphs), ``outputs`` (the check's inferences on the compiled devices, kept for the check),
    ``close``, ``attribute`` and ``total``."""

    if not (runs >= 1 and min_runs >= 1 and seconds >= 0 and warmup >= 0):
        raise InputError(f"profile: runs and min_runs must be >= 1, seconds and warmup >= 0 "
                         f"(got runs={runs}, min_runs={min_runs}, seconds={seconds}, warmup={warmup})")
    t_begin = time.perf_counter()
    g = module.graph
    n, devs = g.n_ops, target.devices
    op_time = np.zeros((n, len(devs)))
    op_var = np.zeros((n, len(devs)))  # variance of the log of each measured op time
    real = [d.name for d in devs if d.kind == "real"]
    replies: dict[str, dict] = {}
    clock = {}
    if real and n:
        # one request profiles every device: it gets ``timeout`` per device
        with Measurer(module, target, runs=runs, warmup=max(warmup, 1), timeout=timeout * len(real),
                      cache=False) as m:
            try:
                t0 = time.perf_counter()
                m.loaded()
                clock["start"] = time.perf_counter() - t0
                reply = m.profile(real, seconds=seconds, min_runs=min_runs, chunk=chunk, whole_max=whole_max)
            except MeasureError as e:
                raise InputError(str(e)) from None
            t0 = time.perf_counter()
        clock.update(reply["seconds"])
        clock["close"] = time.perf_counter() - t0
        replies = {r["device"]: r for r in reply["devices"]}
    t0 = time.perf_counter()
    totals, kinds, info = [], [], {}
    per_run: dict[str, np.ndarray] = {}
    labels: dict[str, str] = {}
    for j, d in enumerate(devs):
        if d.name not in replies:
            op_time[:, j] = roofline(g, d) if n else 0.0
            kinds.append("modeled")
            total = float(op_time[:, j].sum())
            totals.append(total)
            info[d.name] = {"total": total, "sum": total}
            continue
        r = replies[d.name]
        k = len(r["times"])
        times, lost = attribute(g, r["nodes"], r["warmup"], k)
        op_time[:, j] = times
        if r["nodes"] and "avg_runs" in r["nodes"][0]:
            per_run[d.name] = attribute_seconds(g, r["nodes"], node_run_seconds(r["nodes"], r["warmup"]))[0]
        labels[d.name] = dn.device_kind(d.plugin_name, r.get("properties", {}))
        if samples is not None:
            samples[d.name] = {"op_runs": per_run.get(d.name), "times": np.asarray(r["times"]),
                               "properties": r.get("properties", {})}
        total, mean = float(np.median(r["times"])), float(np.mean(r["times"]))
        kinds.append("measured")
        totals.append(total)
        s = float(times.sum())
        cov = s / mean if mean > 0 else float("nan")
        info[d.name] = {"total": total, "mean": mean, "sum": s, "coverage": cov, "unattributed": lost,
                        "runs": k, "compile_seconds": r["compile_seconds"], "kind": labels[d.name]}
        if r.get("chunks"):
            info[d.name].update(chunks=r["chunks"], measured_chunks=r["measured_chunks"])
        if cov > 1.5 or (cov < 0.5 and mean > 1e-3):
            warnings.warn(f"profile on {d.name}: per-op times sum to {cov:.2f}x the mean latency "
                          f"({s * 1e3:.3f} vs {mean * 1e3:.3f} ms); the per-op costs are unreliable "
                          f"(another process competing for the cores?)", stacklevel=2)
    if n:
        sup = module.support
        free = zero_cost_ops(g)
        types = np.array([op.type for op in g.ops], dtype=object)
        unsupported = np.zeros((n, len(devs)), bool)
        for j, d in enumerate(devs):
            if sup is not None and d.name in sup.devices:
                unsupported[:, j] = ~sup.mask.numpy()[:, sup.devices.index(d.name)]
            elif d.kind == "modeled" and d.supported_ops:  # no support table: the target's list
                unsupported[:, j] = ~np.isin(types, d.supported_ops) & ~free
        op_time[unsupported] = np.inf
    classes = tuple(labels.get(d.name, "modeled") for d in devs)
    measured = [j for j, d in enumerate(devs) if d.name in per_run]
    op_se = None
    if denoise and n and measured and len(measured) == len(replies):
        op_time, op_var, totals = _denoise(op_time, op_var, totals, [devs[j].name for j in measured], measured,
                                           per_run, replies, target.link.subgraph_overhead, labels, info)
        with np.errstate(invalid="ignore"):
            op_se = np.where(np.isfinite(op_time) & np.isfinite(op_var), op_time * np.sqrt(op_var), 0.0)
    shares = tuple((tuple(s.devices), float(s.bandwidth)) for s in target.shares
                   if s.resource == "memory" and s.bandwidth is not None)
    op_dram = None
    if shares and n:
        op_dram = np.zeros((n, len(devs)))
        for j, d in enumerate(devs):
            if d.kind == "modeled":
                op_dram[:, j] = dram_bytes(g, d)
    costs = Costs(devices=target.device_names, op_time=Array.of(op_time, np.float64), kind=tuple(kinds),
                  link_latency=target.link.latency, link_bandwidth=target.link.bandwidth,
                  subgraph_overhead=target.link.subgraph_overhead, measured_total=tuple(totals),
                  op_se=None if op_se is None else Array.of(op_se, np.float64),
                  device_class=classes if measured else (),
                  op_dram=None if op_dram is None else Array.of(op_dram, np.float64), dram_shares=shares)
    if stages is not None:
        stages.update(clock)
        stages["attribute"] = time.perf_counter() - t0
        stages["total"] = time.perf_counter() - t_begin
    return costs, info


def _denoise(op_time, op_var, totals, names, cols, per_run, replies, overhead, labels, info):
    """Per-op medians, devices of one kind pooled, the profile's own correction and shrinkage
    between kinds (see :func:`profile_costs` and :mod:`hdp.runtime.costs.denoise`)."""

    op_time, op_var, totals = op_time.copy(), op_var.copy(), list(totals)
    blocked = ~np.isfinite(op_time)
    groups: dict[str, list[int]] = {}
    for name, j in zip(names, cols):
        groups.setdefault(labels[name], []).append(j)
    kind_cols = []
    for label, js in groups.items():
        members = [names[cols.index(j)] for j in js]
        est, var = dn.run_estimates(np.vstack([per_run[m] for m in members]))
        wall = float(np.median(np.concatenate([replies[m]["times"] for m in members])))
        s = float(est.sum())
        # every op on one device is then simulated at the wall time (ops + one subgraph's overhead),
        # unless the target's overhead is more than half the wall time (a tiny model): then the
        # ops keep half of it and the report says how far the simulator is off
        scale = max(wall - overhead, 0.5 * wall) / s if s > 0 and wall > 0 else 1.0
        est = est * scale
        for j, m in zip(js, members):
            op_time[:, j] = est
            op_var[:, j] = var
            totals[j] = wall
            info[m].update(scale=scale, pooled=",".join(members) if len(members) > 1 else "")
        kind_cols.append(js)
    firsts = [js[0] for js in kind_cols]
    t = np.where(blocked[:, firsts], np.inf, op_time[:, firsts])
    shrunk, post, sh = dn.shrink(t, op_var[:, firsts])
    for c, js in enumerate(kind_cols):
        col = shrunk[:, c]
        fin = np.isfinite(col)
        if sh and col[fin].sum() > 0:  # shrinking moves single ops, not the device's total (the correction)
            col = np.where(fin, col * (op_time[fin, js[0]].sum() / col[fin].sum()), col)
        for j in js:
            op_time[:, j] = np.where(blocked[:, j], np.inf, col)
            op_var[:, j] = post[:, c]
            if sh:
                info[names[cols.index(j)]].update(tau=sh["tau"][c], ratio=sh["ratio"][c], kept=sh["kept"])
    return op_time, op_var, totals

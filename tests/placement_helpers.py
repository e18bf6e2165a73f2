"""Hand-built modules and placement problems shared by the simulator, placer and core tests."""

from __future__ import annotations

import numpy as np

from hdp.ir.build import graph_from_edges
from hdp.ir.types import Array, Costs, Module, Op, Support
from hdp.placement.problem import PlacementProblem, build_problem

#: a modeled two-device target (TOML) for tests that need one written to a file
MODELED_TOML = """
name = "m2"
[[devices]]
name = "A"
kind = "modeled"
peak_flops = { f32 = 1e12 }
memory_bandwidth = 1e11
op_overhead = 5e-6
[[devices]]
name = "B"
kind = "modeled"
peak_flops = { f32 = 4e12 }
memory_bandwidth = 3e11
op_overhead = 2e-5
"""

LAT, BW, OVH = 1e-3, 1e3, 1e-2  # one copy of b bytes: 1e-3 + b * 1e-3 seconds


def make_module(types, edges, op_time, edge_bytes=None, support=None, src_port=None,
                lat=LAT, bw=BW, ovh=OVH, ties=None, fragile=None, live_shapes=None, weights=None) -> Module:
    """A Module from op types, (src, dst) edges in topological order and a time table; ops are
    named ``op<i>``; ``weights``: {op: stored bytes} of Constants."""
    n = len(types)
    op_time = np.asarray(op_time, np.float64).reshape(n, -1)
    devs = tuple(f"D{j}" for j in range(op_time.shape[1]))
    w = weights or {}
    ops = [Op(f"op{i}", t, ((1,),) * 2, ("f32",) * 2, weight_bytes=int(w.get(i, 0))) for i, t in enumerate(types)]
    e = np.asarray(edges, np.int64).reshape(-1, 2)
    eb = np.ones(len(e), np.int64) if edge_bytes is None else edge_bytes
    g = graph_from_edges(ops, e[:, 0], e[:, 1], eb, src_port=src_port, fragile=fragile, ties=ties,
                         live_shapes=live_shapes)
    costs = Costs(devices=devs, op_time=Array.of(op_time), kind=("modeled",) * len(devs),
                  link_latency=lat, link_bandwidth=bw, subgraph_overhead=ovh)
    sup = None if support is None else Support(devs, Array.of(np.asarray(support, bool)))
    return Module(graph=g, costs=costs, support=sup)


def problem(m: Module, devices=None) -> PlacementProblem:
    """The placement problem of ``m`` (on its cost table's devices by default)."""
    return build_problem(m, devices if devices is not None else m.costs.devices)


def per_group(p: PlacementProblem, device_of_op) -> np.ndarray:
    """A placement written per op, as the device per tie group the simulator and placers take.

    The per-op placement must respect the tie groups (every placed member of a group on one
    device); a test that wants to show what happens to an op "placed elsewhere" than its group
    must say so through the structure, not rely on a majority vote here."""
    d = np.asarray(device_of_op, np.int64)
    st = p.structure
    gd = st.group_devices(d)
    placed = st.group_of >= 0
    bad = np.nonzero(placed & (d != gd[np.maximum(st.group_of, 0)]))[0]
    assert not bad.size, f"ops {bad.tolist()} are not on the device of their tie group"
    return gd.astype(np.int64)


def random_types_and_edges(rng, n, p_edge=0.15, const_frac=0.1):
    """A random DAG in topological order: a Parameter first, some Constants, ``X`` compute ops,
    and a Result on every compute op without consumers."""
    types = []
    for i in range(n):
        r = rng.random()
        types.append("Parameter" if i == 0 else "Constant" if r < const_frac else "X")
    edges = []
    for j in range(1, n):
        preds = [i for i in range(j) if rng.random() < p_edge and types[j] not in ("Constant",)]
        if types[j] == "X" and not preds:
            preds = [int(rng.integers(0, j))]
        edges += [(i, j) for i in preds]
    sinks = [i for i in range(n) if not any(e[0] == i for e in edges) and types[i] == "X"]
    for s in sinks:
        types.append("Result")
        edges.append((s, len(types) - 1))
    return types, edges


def random_module(rng, n, n_dev, p_edge=0.15, const_frac=0.1, n_ties=0, lat=0.05, bw=1e3, ovh=0.2,
                  weights=False) -> Module:
    """A random DAG (see :func:`random_types_and_edges`) with random times, two output ports per
    op, and ``n_ties`` random ``Graph.ties`` pairs between compute ops that are not constant data
    (like the ReadValue/Assign pairs the frontend emits); ``weights``: every Constant stores a
    random number of bytes (drawn after everything else, so the rest is as without)."""
    types, edges = random_types_and_edges(rng, n, p_edge, const_frac)
    n = len(types)
    t = rng.uniform(0.5, 2.0, size=(n, n_dev))
    ports = [int(rng.integers(0, 2)) for _ in edges]
    tensor_bytes = rng.integers(1, 2000, size=(n, 2))  # one size per output port
    ties = None
    cone = cone_of(types, edges)
    xs = [i for i, ty in enumerate(types) if ty == "X" and not cone[i]]
    if n_ties and len(xs) >= 2:
        ties = [tuple(sorted(rng.choice(xs, 2, replace=False).tolist())) for _ in range(n_ties)]
    w = {i: int(rng.integers(100, 5000)) for i, ty in enumerate(types) if ty == "Constant"} if weights else None
    return make_module(types, edges, t, edge_bytes=[tensor_bytes[s, p] for (s, _), p in zip(edges, ports)],
                       src_port=ports, lat=lat, bw=bw, ovh=ovh, ties=ties, weights=w)


def cone_of(types, edges) -> np.ndarray:
    """Constant data computed directly from the definition (a Constant or ShapeOf, or an op whose
    inputs are all constant data), independently of :mod:`hdp.placement.structure`."""
    n = len(types)
    preds = [[] for _ in range(n)]
    for a, b in edges:
        preds[b].append(a)
    never = {"Parameter", "Result", "ReadValue", "Assign", "RandomUniform", "Multinomial", "Loop", "If",
             "TensorIterator"}
    cone = np.zeros(n, bool)
    for i in range(n):
        cone[i] = types[i] in ("Constant", "ShapeOf") or (
            types[i] not in never and bool(preds[i]) and all(cone[p] for p in preds[i]))
    return cone

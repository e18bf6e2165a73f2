"""The simulator against hand-computed latencies and structural properties of its subgraphs."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hdp.errors import InputError
from hdp.ir.build import graph_from_edges
from hdp.ir.types import Array, Costs, Module, Op, Support
from hdp.runtime.simulate import Simulator, constant_like, lower_bound

LAT, BW, OVH = 1e-3, 1e3, 1e-2  # one copy of b bytes: 1e-3 + b * 1e-3 seconds


def make_module(types, edges, op_time, edge_bytes=None, support=None, src_port=None,
                lat=LAT, bw=BW, ovh=OVH) -> Module:
    """A Module from op types, (src, dst) edges in topological order and a time table."""
    n = len(types)
    op_time = np.asarray(op_time, np.float64).reshape(n, -1)
    devs = tuple(f"D{j}" for j in range(op_time.shape[1]))
    ops = [Op(f"op{i}", t, ((1,),) * 2, ("f32",) * 2) for i, t in enumerate(types)]
    e = np.asarray(edges, np.int64).reshape(-1, 2)
    eb = np.ones(len(e), np.int64) if edge_bytes is None else edge_bytes
    g = graph_from_edges(ops, e[:, 0], e[:, 1], eb, src_port=src_port)
    costs = Costs(devices=devs, op_time=Array.of(op_time), kind=("modeled",) * len(devs),
                  link_latency=lat, link_bandwidth=bw, subgraph_overhead=ovh)
    sup = None if support is None else Support(devs, Array.of(np.asarray(support, bool)))
    return Module(graph=g, costs=costs, support=sup)


def copy(b=1):
    return LAT + b / BW


def test_chain_split_across_two_devices():
    # P -> a -> b -> c -> d -> R ; a,b on D0 and c,d on D1
    types = ["Parameter", "X", "X", "X", "X", "Result"]
    t = [[0, 0], [1, 10], [2, 20], [30, 3], [40, 4], [0, 0]]
    edges = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)]
    m = make_module(types, edges, t, edge_bytes=[5, 6, 7, 8, 9])
    sim = Simulator(m)
    dev = np.array([0, 0, 0, 1, 1, 1])
    comp, cp, nsub = sim.terms(dev)
    assert comp == 1 + 2 + 3 + 4
    assert cp == pytest.approx(copy(7))  # the b -> c tensor, 7 bytes
    assert nsub == 2
    assert sim.latency(dev) == pytest.approx(10 + copy(7) + 2 * OVH)
    # a Result placed elsewhere still runs with its producer
    assert sim.latency(np.array([0, 0, 0, 1, 1, 0])) == pytest.approx(sim.latency(dev))
    # the whole chain on one device: no copy, one subgraph
    assert sim.latency(np.zeros(6, int)) == pytest.approx(1 + 2 + 30 + 40 + OVH)


def test_tensor_with_two_consumers_on_other_device_copied_once():
    # a -> b, a -> c (same output port), b -> d, c -> d
    types = ["X"] * 4
    t = np.ones((4, 2))
    m = make_module(types, [(0, 1), (0, 2), (1, 3), (2, 3)], t, edge_bytes=[100, 100, 1, 1])
    sim = Simulator(m)
    comp, cp, nsub = sim.terms(np.array([0, 1, 1, 1]))
    assert cp == pytest.approx(copy(100))
    assert nsub == 2
    # consumers on two different other devices: one copy to each
    m3 = make_module(types, [(0, 1), (0, 2), (1, 3), (2, 3)], np.ones((4, 3)), edge_bytes=[100, 100, 1, 1])
    _, cp3, _ = Simulator(m3).terms(np.array([0, 1, 2, 2]))
    assert cp3 == pytest.approx(2 * copy(100) + copy(1))


def test_distinct_output_ports_are_distinct_tensors():
    # a has two outputs, port 0 -> b and port 1 -> c, both on the other device: two copies
    m = make_module(["X"] * 3, [(0, 1), (0, 2)], np.ones((3, 2)), edge_bytes=[10, 20], src_port=[0, 1])
    _, cp, _ = Simulator(m).terms(np.array([0, 1, 1]))
    assert cp == pytest.approx(copy(10) + copy(20))


def test_residual_block_with_branch_on_other_device_is_three_subgraphs():
    # a(D0) -> b(D1) -> c(D0) with skip a -> c: HETERO cannot keep {a, c} in one subgraph
    m = make_module(["X"] * 3, [(0, 1), (1, 2), (0, 2)], np.ones((3, 2)))
    sim = Simulator(m)
    comp, cp, nsub = sim.terms(np.array([0, 1, 0]))
    assert nsub == 3
    assert cp == pytest.approx(2 * copy(1))
    lab = sim.subgraphs(np.array([0, 1, 0]))
    assert len(set(lab.tolist())) == 3


def test_independent_producer_does_not_split_a_component():
    # a(D0) -> b(D0) and c(D1) -> b: {a, b} stays one subgraph
    m = make_module(["X"] * 3, [(0, 2), (1, 2)], np.ones((3, 2)))
    assert Simulator(m).terms(np.array([0, 1, 0]))[2] == 2


def test_constant_edges_are_free_and_constants_are_no_subgraph():
    # K -> Convert -> a, K2 -> a, P -> a ; constants on another device than a
    types = ["Constant", "Convert", "Constant", "Parameter", "X"]
    m = make_module(types, [(0, 1), (1, 4), (2, 4), (3, 4)], [[0, 0], [1, 1], [0, 0], [0, 0], [5, 5]],
                    edge_bytes=[1e6] * 4)
    sim = Simulator(m)
    assert constant_like(m).tolist() == [True, True, True, False, False]
    comp, cp, nsub = sim.terms(np.array([1, 1, 1, 0, 0]))
    assert cp == 0.0
    assert comp == 6
    assert nsub == 2  # the Convert alone on D1 is a subgraph; the Constants are none


def test_unsupported_placement_is_inf_and_support_mask_applies():
    m = make_module(["X", "X"], [(0, 1)], [[1, np.inf], [1, 1]], support=[[True, True], [True, False]])
    sim = Simulator(m)
    assert math.isinf(sim.latency(np.array([1, 0])))
    assert math.isinf(sim.latency(np.array([0, 1])))  # support says D1 cannot run op1
    assert sim.latency(np.array([0, 0])) == pytest.approx(2 + OVH)
    assert lower_bound(m) == 2


def test_lower_bound_is_fastest_device_sum_and_rejects_unrunnable_op():
    m = make_module(["Parameter", "X", "X", "Result"], [(0, 1), (1, 2), (2, 3)],
                    [[9, 9], [1, 3], [4, 2], [9, 9]])
    assert lower_bound(m) == 3
    bad = make_module(["X"], [], [[np.inf, np.inf]])
    with pytest.raises(InputError, match="op0"):
        lower_bound(bad)


def test_fork_join_parallel_by_hand():
    # s -> x -> j, s -> y -> j ; s,x,j on D0 (times 1, 2, 1), y on D1 (time 3)
    t = [[1, 9], [2, 9], [9, 3], [1, 9]]
    m = make_module(["X"] * 4, [(0, 1), (0, 2), (1, 3), (2, 3)], t)
    sim = Simulator(m)
    dev = np.array([0, 0, 1, 0])
    c, h = copy(1), OVH
    # subgraphs {s, x}, {y}, {j}: j cannot join {s, x} without a cycle through y
    assert sim.terms(dev) == pytest.approx((7, 2 * c, 3))
    assert sim.latency(dev) == pytest.approx(7 + 2 * c + 3 * h)
    # parallel: s [h, h+1]; x [h+1, h+3]; y opens at h+1+c, runs [2h+1+c, 2h+4+c];
    # j ready at 2h+4+2c, opens (+h), runs 1
    assert sim.latency_parallel(dev) == pytest.approx(3 * h + 5 + 2 * c)


def test_batched_equals_single_and_checks_input():
    rng = np.random.default_rng(0)
    m = random_module(rng, 30, 3)
    sim = Simulator(m)
    n = m.graph.n_ops
    devs = rng.integers(0, 3, size=(50, n))
    batch = sim.latencies(devs)
    assert batch == pytest.approx([sim.latency(d) for d in devs])
    with pytest.raises(ValueError):
        sim.latency(np.zeros(n - 1, int))
    with pytest.raises(ValueError):
        sim.latency(np.full(n, 3))


def test_costs_device_order_and_missing_device():
    m = make_module(["X"], [], [[1.0, 2.0]])
    assert Simulator(m, devices=("D1", "D0")).latency(np.array([0])) == pytest.approx(2 + OVH)
    with pytest.raises(InputError, match="GPU"):
        Simulator(m, devices=("D0", "GPU"))


def random_module(rng, n, n_dev, p_edge=0.15, const_frac=0.1) -> Module:
    """A random DAG in topological order with some Parameters/Constants/Results sprinkled in."""
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
    n = len(types)
    t = rng.uniform(0.5, 2.0, size=(n, n_dev))
    ports = [int(rng.integers(0, 2)) for _ in edges]
    tensor_bytes = rng.integers(1, 2000, size=(n, 2))  # one size per output port
    return make_module(types, edges, t, edge_bytes=[tensor_bytes[s, p] for (s, _), p in zip(edges, ports)],
                       src_port=ports, lat=0.05, bw=1e3, ovh=0.2)


@settings(max_examples=60, deadline=None, database=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 25), st.integers(1, 3))
def test_subgraphs_are_single_device_acyclic_and_not_oversplit(seed, n, n_dev):
    rng = np.random.default_rng(seed)
    m = random_module(rng, n, n_dev)
    sim = Simulator(m)
    dev = rng.integers(0, n_dev, m.graph.n_ops)
    lab = sim.subgraphs(dev)
    eff = dev.copy()
    eff[sim.res_src >= 0] = dev[sim.res_src[sim.res_src >= 0]]
    src, dst = sim.u_src, sim.u_dst
    # each subgraph is on one device, and the subgraph order is acyclic
    for s, d in zip(src, dst):
        if lab[s] == lab[d]:
            assert eff[s] == eff[d]
    q = nx.DiGraph()
    q.add_nodes_from(set(lab.tolist()))
    q.add_edges_from((lab[s], lab[d]) for s, d in zip(src, dst) if lab[s] != lab[d])
    assert nx.is_directed_acyclic_graph(q)
    # when the plain same-device components are already acyclic, they are the subgraphs
    u = nx.Graph()
    u.add_nodes_from(range(m.graph.n_ops))
    u.add_edges_from((s, d) for s, d in zip(src, dst) if eff[s] == eff[d])
    comps = list(nx.connected_components(u))
    cid = np.empty(m.graph.n_ops, int)
    for k, c in enumerate(comps):
        cid[list(c)] = k
    cq = nx.DiGraph()
    cq.add_nodes_from(range(len(comps)))
    cq.add_edges_from((cid[s], cid[d]) for s, d in zip(src, dst) if cid[s] != cid[d])
    if nx.is_directed_acyclic_graph(cq):
        assert len(set(lab.tolist())) == len(comps)
    # every subgraph is connected (a split only cuts along stages)
    for k in set(lab.tolist()):
        members = np.nonzero(lab == k)[0]
        assert nx.is_connected(u.subgraph(members))


@settings(max_examples=60, deadline=None, database=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 25), st.integers(1, 3))
def test_terms_match_a_direct_count_and_parallel_never_exceeds_sequential(seed, n, n_dev):
    rng = np.random.default_rng(seed)
    m = random_module(rng, n, n_dev)
    sim = Simulator(m)
    g = m.graph
    dev = rng.integers(0, n_dev, g.n_ops)
    eff = dev.copy()
    eff[sim.res_src >= 0] = dev[sim.res_src[sim.res_src >= 0]]
    types = [op.type for op in g.ops]
    t = m.costs.op_time.numpy()
    comp = sum(t[i, eff[i]] for i in range(g.n_ops) if types[i] not in ("Parameter", "Constant", "Result"))
    cl = constant_like(m)
    indptr, idx, eb, sp = (g.indptr.numpy(), g.indices.numpy(), g.edge_bytes.numpy(), g.src_port.numpy())
    copies = {}
    for u in range(g.n_ops):
        for k in range(indptr[u], indptr[u + 1]):
            v = idx[k]
            if cl[u] or types[v] == "Result" or eff[v] == eff[u]:
                continue
            copies[(u, sp[k], eff[v])] = 0.05 + eb[k] / 1e3
    c, cp, nsub = sim.terms(dev)
    assert c == pytest.approx(comp)
    assert cp == pytest.approx(sum(copies.values()))
    assert sim.latency_parallel(dev) <= sim.latency(dev) + 1e-9
    if n_dev == 1:
        assert cp == 0

"""random, heft and optimal: support, determinism, and optimal against brute force over tie groups."""

from __future__ import annotations

import itertools

import msgspec
import numpy as np
import pytest
from placement_helpers import make_module, problem, random_module

from hdp.base.errors import InputError
from hdp.ir.types import Array, Coarse, Support
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import method_from


def run(name, m, seed=0, arg="", **options):
    """Run method ``name[:arg]`` on ``m`` (its problem on the cost table's devices)."""
    opts = method_from(f"{name}:{arg}" if arg else name, options)
    return place(opts, PlaceContext(module=m, problem=problem(m), seed=seed))


def with_support(m, rng, p_drop=0.3):
    """Random support: each op loses some devices, but every tie group keeps at least one device
    all its members support (otherwise the problem is an InputError, tested elsewhere)."""
    n, nd = m.graph.n_ops, len(m.costs.devices)
    mask = rng.random((n, nd)) > p_drop
    st = problem(m).structure
    for g in range(st.n_groups):
        mask[st.members(g), rng.integers(0, nd)] = True
    mask[st.group_of < 0] = True  # constant data: support is not asked (tested in test_placement)
    return m.replace(support=Support(m.costs.devices, Array.of(mask)))


def penalised(m, penalty):
    """The module whose copy time includes the per-copy penalty and whose subgraphs are free
    (its simulated latency is optimal's objective: compute + penalised copies)."""
    return m.replace(costs=msgspec.structs.replace(m.costs, link_latency=m.costs.link_latency + penalty,
                                                   subgraph_overhead=0.0))


def brute_force(m, penalty):
    """Best compute + penalised copy time over every allowed device per tie group."""
    p = problem(penalised(m, penalty))
    options = [np.nonzero(p.allowed[g])[0] for g in range(p.n_groups)]
    allp = np.array(list(itertools.product(*options)), np.int64).reshape(-1, p.n_groups)
    return float(Simulator(p).latencies(allp).min())


def objective(m, gd, penalty):
    c, cp, _ = Simulator(problem(penalised(m, penalty))).terms(gd)
    return c + cp


def small_graph(rng, n, nd, n_ties=0):
    """At most 12 ops; copies sometimes dear (up to 2 s), sometimes cheap (up to 0.25 s)."""
    m = random_module(rng, n, nd, p_edge=0.3, const_frac=0.15, n_ties=n_ties)
    while m.graph.n_ops > 12:
        m = random_module(rng, n, nd, p_edge=0.3, const_frac=0.15, n_ties=n_ties)
    if rng.random() < 0.5:
        m = m.replace(costs=msgspec.structs.replace(m.costs, link_bandwidth=1e4))
    return with_support(m, rng, p_drop=0.2)


@pytest.mark.parametrize("seed", range(16))
def test_mincut_equals_brute_force_two_devices(seed):
    rng = np.random.default_rng(seed)
    m = small_graph(rng, int(rng.integers(3, 9)), 2)
    for penalty in (0.0, 0.2):
        p = run("optimal", m, boundary_penalty=penalty)
        assert p.info["solver"] == "mincut"
        best = brute_force(m, penalty)
        got = objective(m, p.group_device, penalty)
        assert got == pytest.approx(best, rel=1e-6)
        assert p.info["objective"] == pytest.approx(got, rel=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_ilp_equals_brute_force_three_devices(seed):
    rng = np.random.default_rng(100 + seed)
    m = small_graph(rng, int(rng.integers(3, 8)), 3)
    for penalty in (0.0, 0.2):
        p = run("optimal", m, boundary_penalty=penalty, mip_gap=0.0)
        assert p.info["solver"] == "ilp"
        got = objective(m, p.group_device, penalty)
        assert got == pytest.approx(brute_force(m, penalty), rel=1e-6)
        assert p.info["gap"] <= 1e-6


def test_ilp_and_mincut_agree_on_a_larger_graph():
    rng = np.random.default_rng(7)
    m = with_support(random_module(rng, 120, 2, p_edge=0.04, n_ties=4), rng)
    a = run("optimal", m, boundary_penalty=0.0)
    b = run("optimal", m, arg="ilp", boundary_penalty=0.0, mip_gap=0.0)
    assert a.info["solver"] == "mincut" and b.info["solver"] == "ilp"
    assert a.info["objective"] == pytest.approx(b.info["objective"], rel=1e-6)


@pytest.mark.parametrize("nd", [2, 3])
def test_optimal_beats_every_single_device_placement(nd):
    rng = np.random.default_rng(nd)
    m = random_module(rng, 150, nd, p_edge=0.03)
    pr = problem(m)
    sim = Simulator(pr)
    p = run("optimal", m, boundary_penalty=0.0, mip_gap=0.0)
    comp, cp, _ = sim.terms(p.group_device)
    for d in range(nd):
        assert comp + cp <= sum(sim.terms(pr.single(d))[:2]) + 1e-9
    assert comp + cp >= p.info["lower_bound"] - 1e-9
    assert comp + cp < min(sum(sim.terms(pr.single(d))[:2]) for d in range(nd)) - 1e-6  # a real split


@pytest.mark.parametrize("name", ["random", "heft", "optimal"])
def test_placers_respect_support(name):
    for seed in range(4):
        rng = np.random.default_rng(seed)
        nd = 2 + seed % 2
        m = with_support(random_module(rng, 60, nd, n_ties=2), rng, p_drop=0.5)
        pr = problem(m)
        gd = run(name, m, seed=seed).group_device
        assert pr.allowed[np.arange(pr.n_groups), gd].all()
        dev = pr.op_devices(gd)
        types = np.array([op.type for op in m.graph.ops])
        # support is asked of the ops that run (not of constant data, Parameters, Results)
        compute = (pr.structure.group_of >= 0) & ~np.isin(types, ["Parameter", "Result"])
        mask = m.support.mask.numpy()
        assert mask[np.arange(dev.shape[0]), dev][compute].all()
        # inf in the cost table forbids a device too
        t = m.costs.op_time.numpy().copy()
        t[:, 0] = np.inf
        m2 = m.replace(costs=msgspec.structs.replace(m.costs, op_time=Array.of(t)))
        try:
            pr2 = problem(m2)
        except InputError:  # some tie group could only run on D0: the placer is never asked
            with pytest.raises(InputError, match="can run op"):
                run(name, m2, seed=seed)
            continue
        dev2 = pr2.op_devices(run(name, m2, seed=seed).group_device)
        assert (dev2[compute] != 0).all()


def test_unrunnable_op_is_an_input_error():
    m = make_module(["X", "X"], [(0, 1)], [[1, 1], [np.inf, np.inf]])
    for name in ("random", "heft", "optimal"):
        with pytest.raises(InputError, match="op1"):
            run(name, m)


def test_random_is_seeded_and_uniform():
    rng = np.random.default_rng(0)
    m = random_module(rng, 300, 3, p_edge=0.01)
    a, b, c = (run("random", m, seed=s).group_device for s in (1, 1, 2))
    assert (a == b).all() and not (a == c).all()
    counts = np.bincount(a, minlength=3)
    assert counts.min() > 0.25 * a.shape[0]
    assert float(run("random", m).info["simulated"]) > 0


def test_random_per_coarse_group():
    rng = np.random.default_rng(3)
    m = random_module(rng, 40, 2, p_edge=0.05)
    n = m.graph.n_ops
    gof = (np.arange(n) // 5).astype(np.int32)
    ng = int(gof.max()) + 1
    co = Coarse(group_of=Array.of(gof), n_groups=ng, indptr=Array.of(np.zeros(ng + 1, np.int64)),
                indices=Array.of(np.zeros(0, np.int32)), edge_bytes=Array.of(np.zeros(0, np.int64)))
    p = run("random", m.replace(coarse=co), seed=5)
    assert "coarse_groups" in p.info  # drawn per coarse group, not per tie group
    st = problem(m).structure
    first = st.m_ops[st.m_ptr[:-1]]
    # every tie group takes the device of the coarse group of its first member, and both devices occur
    for c in range(ng):
        assert len(set(p.group_device[gof[first] == c].tolist())) <= 1
    assert len(set(p.group_device.tolist())) == 2


def test_heft_parallelises_cheap_links_and_keeps_expensive_ones_local():
    # s -> a, s -> b, a -> j, b -> j with a and b heavy, two identical devices
    t = [[1, 1], [10, 10], [10, 10], [1, 1]]
    edges = [(0, 1), (0, 2), (1, 3), (2, 3)]
    cheap = make_module(["X"] * 4, edges, t, lat=0.0, bw=1e12)
    dev = run("heft", cheap).group_device
    assert dev[1] != dev[2]
    dear = make_module(["X"] * 4, edges, t, lat=100.0, bw=1e12)
    dev = run("heft", dear).group_device
    assert len(set(dev.tolist())) == 1
    p = run("heft", cheap)
    assert p.info["makespan"] == pytest.approx(12.0)  # s, then a || b, then j


def test_heft_schedules_a_tie_group_as_one_unit():
    # the same fork-join with a and b tied: they cannot run in parallel on two devices
    t = [[1, 1], [10, 10], [10, 10], [1, 1]]
    edges = [(0, 1), (0, 2), (1, 3), (2, 3)]
    m = make_module(["X"] * 4, edges, t, lat=0.0, bw=1e12, ties=[(1, 2)])
    p = run("heft", m)
    dev = problem(m).op_devices(p.group_device)
    assert dev[1] == dev[2]
    assert p.info["makespan"] == pytest.approx(22.0)


def test_optimal_prefers_the_faster_device_and_pays_copies_only_when_worth_it():
    # chain of 4: op 2 is 100x faster on D1; a copy costs 1e-3 + 1e-3 s
    t = [[1, 1], [1, 1], [1, 0.01], [1, 1]]
    m = make_module(["X"] * 4, [(0, 1), (1, 2), (2, 3)], t)
    p = run("optimal", m, boundary_penalty=0.0)
    assert p.group_device[2] == 1
    expensive = make_module(["X"] * 4, [(0, 1), (1, 2), (2, 3)], t, lat=1.0)
    p = run("optimal", expensive, boundary_penalty=0.0)
    assert len(set(p.group_device.tolist())) == 1


def test_optimal_options_and_trivial_cases():
    m = make_module(["X", "X"], [(0, 1)], [[1.0], [2.0]])
    p = run("optimal", m)
    assert p.group_device.tolist() == [0, 0] and p.info["solver"] == "trivial"
    m2 = make_module(["X", "X"], [(0, 1)], np.ones((2, 3)))
    with pytest.raises(InputError, match="mincut"):
        run("optimal", m2, arg="mincut")
    with pytest.raises(InputError, match="solver"):
        run("optimal", m2, arg="cplex")
    with pytest.raises(InputError, match="boundary_penalty"):
        run("optimal", m2, boundary_penalty=-1.0)


def test_constant_data_needs_no_support_and_an_unhonourable_tie_is_an_input_error():
    # K -> Convert (D0 only) -> a (D1 only), P -> a -> R. The old rule tied the Convert to its
    # consumer and then had to break the tie; now the decompression chain is constant data: it
    # folds, needs no support, and is given to a on a's device.
    types = ["Constant", "Convert", "Parameter", "X", "Result"]
    t = [[0, 0], [1, np.inf], [0, 0], [np.inf, 1], [0, 0]]
    m = make_module(types, [(0, 1), (1, 3), (2, 3), (3, 4)], t)
    for arg in ("mincut", "ilp"):
        dev = problem(m).op_devices(run("optimal", m, arg=arg).group_device)
        assert dev.tolist() == [1, 1, 1, 1, 1]
    # a ReadValue/Assign pair whose members no one device can both run
    types = ["Parameter", "ReadValue", "X", "Assign", "Result"]
    t = [[0, 0], [1, np.inf], [1, 1], [np.inf, 1], [0, 0]]
    m = make_module(types, [(0, 1), (1, 2), (2, 3), (2, 4)], t, ties=[(1, 3)])
    with pytest.raises(InputError, match=r"op[13]'.*tied with"):
        run("optimal", m)


def test_optimal_on_a_lowered_openvino_model_matches_brute_force():
    import openvino.opset13 as ops
    from openvino import Model

    from hdp.ir.openvino_frontend import lower_model
    from hdp.ir.types import Costs

    x = ops.parameter([1, 4, 8, 8], np.float32, name="x")
    w = ops.constant(np.ones((4, 4, 1, 1), np.float32), name="w")
    conv = ops.convolution(x, w, [1, 1], [0, 0], [0, 0], [1, 1], name="conv")
    relu = ops.relu(conv, name="relu")
    add = ops.add(relu, x, name="add")
    parts = ops.split(add, ops.constant(np.int64(1), name="axis"), 2, name="split")
    a = ops.sigmoid(parts.output(0), name="a")
    b = ops.tanh(parts.output(1), name="b")
    model = Model([ops.result(a, name="ra"), ops.result(b, name="rb"), ops.result(parts.output(1), name="rc")],
                  [x], "tiny")
    m = lower_model(model)
    types = [op.type for op in m.graph.ops]
    assert "Split" in types and m.graph.n_ops <= 14, types
    rng = np.random.default_rng(0)
    t = rng.uniform(1e-4, 1e-3, (m.graph.n_ops, 2))
    for bw in (1e6, 1e9):  # copies dear (a 1 KB tensor: 1 ms) and cheap
        mm = m.replace(costs=Costs(("D0", "D1"), Array.of(t), ("modeled",) * 2, 1e-5, bw, 3e-5))
        for penalty in (0.0, 3e-5):
            gd = run("optimal", mm, boundary_penalty=penalty).group_device
            assert objective(mm, gd, penalty) == pytest.approx(brute_force(mm, penalty), rel=1e-6)


# --- issue 8: optimal is exact for the legal problem (tie groups), with ties -------------------

def tied_graph(rng, nd):
    """A small random DAG with Parameters, Results, Constants and 1-3 random tie pairs, whose
    tie groups (after the convex closure) are still many enough for the placement to matter and
    few enough for brute force (every allowed device per group)."""
    lo, hi = (6, 12) if nd == 2 else (5, 8)
    while True:
        m = random_module(rng, int(rng.integers(10, 18)), nd, p_edge=0.2, const_frac=0.15,
                          n_ties=int(rng.integers(1, 4)))
        if m.graph.ties is not None and lo <= problem(m).n_groups <= hi:
            break
    if rng.random() < 0.5:
        m = m.replace(costs=msgspec.structs.replace(m.costs, link_bandwidth=1e4))
    return with_support(m, rng, p_drop=0.1)


@pytest.mark.parametrize("nd,seed", [(2, s) for s in range(10)] + [(3, s) for s in range(6)])
def test_optimal_equals_brute_force_over_tie_groups_with_ties(nd, seed):
    rng = np.random.default_rng(1000 * nd + seed)
    m = tied_graph(rng, nd)
    pr = problem(m)
    ties = m.graph.ties.numpy()
    st = pr.structure
    # the ties really constrain the problem: some tied pair was two ops before grouping
    assert any(st.group_of[a] == st.group_of[b] >= 0 for a, b in ties)
    for penalty in (0.0, 0.2):
        p = run("optimal", m, boundary_penalty=penalty, mip_gap=0.0)
        assert p.info["solver"] == ("mincut" if nd == 2 else "ilp")
        assert objective(m, p.group_device, penalty) == pytest.approx(brute_force(m, penalty), rel=1e-6)
        dev = pr.op_devices(p.group_device)
        for a, b in ties:
            assert dev[a] == dev[b]
        assert pr.allowed[np.arange(pr.n_groups), p.group_device].all()


# --- issue 21: replicated chains cost once per device, and optimal stays exact -------------------

def replicated_graph(rng, nd):
    """A small random DAG in which some compute ops are fragile, so that replicated chains feed
    several groups (units of :class:`~hdp.placement.problem.PlacementProblem`)."""
    from placement_helpers import random_types_and_edges

    while True:
        types, edges = random_types_and_edges(rng, int(rng.integers(8, 14)), 0.3, 0.1)
        n = len(types)
        fragile = (rng.random(n) < 0.35) & (np.array(types) == "X")
        m = make_module(types, edges, rng.uniform(0.5, 2.0, size=(n, nd)), edge_bytes=rng.integers(1, 2000, len(edges)),
                        lat=0.05, bw=1e3, ovh=0.2, fragile=fragile)
        p = problem(m)
        if np.diff(p.r_ptr).max(initial=0) >= 2 and 3 <= p.n_groups <= (10 if nd == 2 else 7):
            return m


@pytest.mark.parametrize("nd,seed", [(2, s) for s in range(8)] + [(3, s) for s in range(4)])
def test_optimal_equals_brute_force_with_replicated_chains(nd, seed):
    m = replicated_graph(np.random.default_rng(2100 + 10 * nd + seed), nd)
    for penalty in (0.0, 0.2):
        got = run("optimal", m, boundary_penalty=penalty, mip_gap=0.0, margin=0.0)
        assert objective(m, got.group_device, penalty) == pytest.approx(brute_force(m, penalty), rel=1e-6)
        if nd == 2:
            ilp = run("optimal", m, arg="ilp", boundary_penalty=penalty, mip_gap=0.0, margin=0.0)
            assert objective(m, ilp.group_device, penalty) == pytest.approx(brute_force(m, penalty), rel=1e-6)

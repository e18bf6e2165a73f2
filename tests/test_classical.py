"""random, heft and optimal: support, determinism, and optimal against brute force."""

from __future__ import annotations

import itertools

import msgspec
import numpy as np
import pytest

from hdp.errors import InputError
from hdp.ir.types import Array, Coarse
from hdp.passes.assign import colocate
from hdp.placers import PlaceRequest, placers
from hdp.runtime.simulate import Simulator, constant_like
from test_simulate import make_module, random_module


def run(name, m, seed=0, arg="", **options):
    fn = placers()[name][0]
    devs = m.costs.devices
    return fn(m, PlaceRequest(devices=devs, arg=arg, seed=seed, options=options))


def op_devices(placed):
    return placed.group_device[placed.group_of].astype(np.int64)


def with_support(m, rng, p_drop=0.3):
    """Random support: each compute op loses some devices but keeps at least one; ops that
    assign moves (constant chains) keep all, so every co-location is feasible."""
    n, nd = m.graph.n_ops, len(m.costs.devices)
    mask = rng.random((n, nd)) > p_drop
    mask[np.arange(n), rng.integers(0, nd, n)] = True
    types = np.array([op.type for op in m.graph.ops])
    mask[np.isin(types, ["Parameter", "Constant", "Result"]) | constant_like(m)] = True
    from hdp.ir.types import Support
    return m.replace(support=Support(m.costs.devices, Array.of(mask)))


def colocate_batch(m, devs):
    """assign's co-location applied to many placements at once (rows)."""
    g = m.graph
    indptr, idx = g.indptr.numpy(), g.indices.numpy()
    types = [op.type for op in g.ops]
    cl = constant_like(m)
    out = devs.copy()
    for i in range(g.n_ops - 1, -1, -1):
        if (cl[i] or types[i] == "Parameter") and indptr[i + 1] > indptr[i]:
            out[:, i] = out[:, idx[indptr[i]]]
    sim = Simulator(m)
    for r in np.nonzero(sim.res_src >= 0)[0]:
        out[:, r] = out[:, sim.res_src[r]]
    return out


def penalised(m, penalty):
    """The module whose copy time includes the per-copy penalty (objective = compute + copy)."""
    return m.replace(costs=msgspec.structs.replace(m.costs, link_latency=m.costs.link_latency + penalty))


def brute_force(m, penalty):
    """Best compute + penalised copy time over every placement that assign can produce."""
    n, nd = m.graph.n_ops, len(m.costs.devices)
    allp = np.array(list(itertools.product(range(nd), repeat=n)), np.int64)
    allp = np.unique(colocate_batch(m, allp), axis=0)
    sim = Simulator(penalised(m, penalty))
    return min(sum(sim.terms(d)[:2]) for d in allp)


def objective(m, dev, penalty):
    c, cp, _ = Simulator(penalised(m, penalty)).terms(dev)
    return c + cp


def small_graph(rng, n, nd):
    """At most 12 ops; copies sometimes dear (up to 2 s), sometimes cheap (up to 0.25 s)."""
    m = random_module(rng, n, nd, p_edge=0.3, const_frac=0.15)
    while m.graph.n_ops > 12:
        m = random_module(rng, n, nd, p_edge=0.3, const_frac=0.15)
    if rng.random() < 0.5:
        m = m.replace(costs=msgspec.structs.replace(m.costs, link_bandwidth=1e4))
    return with_support(m, rng, p_drop=0.2)


@pytest.mark.parametrize("seed", range(16))
def test_mincut_equals_brute_force_two_devices(seed):
    rng = np.random.default_rng(seed)
    m = small_graph(rng, int(rng.integers(3, 9)), 2)
    for penalty in (0.0, 0.2):
        p = run("optimal", m, boundary_penalty=penalty)
        dev = op_devices(p)
        assert p.info["solver"] == "mincut"
        best = brute_force(m, penalty)
        got = objective(m, dev, penalty)
        assert got == pytest.approx(best, rel=1e-6)
        assert p.info["objective"] == pytest.approx(got, rel=1e-9)
        # the placement is already what assign would produce
        assert (colocate(m, dev) == dev).all()


@pytest.mark.parametrize("seed", range(6))
def test_ilp_equals_brute_force_three_devices(seed):
    rng = np.random.default_rng(100 + seed)
    m = small_graph(rng, int(rng.integers(3, 8)), 3)
    for penalty in (0.0, 0.2):
        p = run("optimal", m, boundary_penalty=penalty, mip_gap=0.0)
        assert p.info["solver"] == "ilp"
        got = objective(m, op_devices(p), penalty)
        assert got == pytest.approx(brute_force(m, penalty), rel=1e-6)
        assert p.info["gap"] <= 1e-6


def test_ilp_and_mincut_agree_on_a_larger_graph():
    rng = np.random.default_rng(7)
    m = with_support(random_module(rng, 120, 2, p_edge=0.04), rng)
    a = run("optimal", m, boundary_penalty=0.0)
    b = run("optimal", m, arg="ilp", boundary_penalty=0.0, mip_gap=0.0)
    assert a.info["objective"] == pytest.approx(b.info["objective"], rel=1e-6)


@pytest.mark.parametrize("nd", [2, 3])
def test_optimal_beats_every_single_device_placement(nd):
    rng = np.random.default_rng(nd)
    m = random_module(rng, 150, nd, p_edge=0.03)
    sim = Simulator(m)
    p = run("optimal", m, boundary_penalty=0.0, mip_gap=0.0)
    comp, cp, _ = sim.terms(op_devices(p))
    for d in range(nd):
        single = np.full(m.graph.n_ops, d)
        assert comp + cp <= sum(sim.terms(single)[:2]) + 1e-9
    assert comp + cp >= p.info["lower_bound"] - 1e-9


@pytest.mark.parametrize("name", ["random", "heft", "optimal"])
def test_placers_respect_support(name):
    for seed in range(4):
        rng = np.random.default_rng(seed)
        nd = 2 + seed % 2
        m = with_support(random_module(rng, 60, nd), rng, p_drop=0.5)
        dev = op_devices(run(name, m, seed=seed))
        mask = m.support.mask.numpy()
        assert mask[np.arange(dev.shape[0]), dev].all()
        # inf in the cost table forbids a device too
        t = m.costs.op_time.numpy().copy()
        t[:, 0] = np.inf
        m2 = m.replace(costs=msgspec.structs.replace(m.costs, op_time=Array.of(t)))
        mask2 = mask.copy()
        mask2[:, 0] = False
        types = np.array([op.type for op in m.graph.ops])
        ok_rows = mask2.any(axis=1) | np.isin(types, ["Parameter", "Constant", "Result"])
        if ok_rows.all():
            dev2 = op_devices(run(name, m2, seed=seed))
            compute = ~np.isin(types, ["Parameter", "Constant", "Result"])
            assert (dev2[compute] != 0).all()


def test_unrunnable_op_is_an_input_error():
    m = make_module(["X", "X"], [(0, 1)], [[1, 1], [np.inf, np.inf]])
    for name in ("random", "heft", "optimal"):
        with pytest.raises(InputError, match="op1"):
            run(name, m)


def test_random_is_seeded_and_uniform():
    rng = np.random.default_rng(0)
    m = random_module(rng, 300, 3, p_edge=0.01)
    a, b, c = (op_devices(run("random", m, seed=s)) for s in (1, 1, 2))
    assert (a == b).all() and not (a == c).all()
    counts = np.bincount(a, minlength=3)
    assert counts.min() > 0.25 * a.shape[0]
    assert run("random", m).info["simulated"] > 0


def test_random_per_coarse_group():
    rng = np.random.default_rng(3)
    m = random_module(rng, 40, 2, p_edge=0.05)
    n = m.graph.n_ops
    gof = (np.arange(n) // 5).astype(np.int32)
    ng = int(gof.max()) + 1
    co = Coarse(group_of=Array.of(gof), n_groups=ng, indptr=Array.of(np.zeros(ng + 1, np.int64)),
                indices=Array.of(np.zeros(0, np.int32)), edge_bytes=Array.of(np.zeros(0, np.int64)))
    p = run("random", m.replace(coarse=co), seed=5)
    assert (p.group_of == gof).all() and p.group_device.shape == (ng,)


def test_heft_parallelises_cheap_links_and_keeps_expensive_ones_local():
    # s -> a, s -> b, a -> j, b -> j with a and b heavy, two identical devices
    t = [[1, 1], [10, 10], [10, 10], [1, 1]]
    edges = [(0, 1), (0, 2), (1, 3), (2, 3)]
    cheap = make_module(["X"] * 4, edges, t, lat=0.0, bw=1e12)
    dev = op_devices(run("heft", cheap))
    assert dev[1] != dev[2]
    dear = make_module(["X"] * 4, edges, t, lat=100.0, bw=1e12)
    dev = op_devices(run("heft", dear))
    assert len(set(dev.tolist())) == 1
    p = run("heft", cheap)
    assert p.info["makespan"] == pytest.approx(12.0)  # s, then a || b, then j


def test_optimal_prefers_the_faster_device_and_pays_copies_only_when_worth_it():
    # chain of 4: op 2 is 100x faster on D1; a copy costs 1e-3 + 1e-3 s
    t = [[1, 1], [1, 1], [1, 0.01], [1, 1]]
    m = make_module(["X"] * 4, [(0, 1), (1, 2), (2, 3)], t)
    p = run("optimal", m, boundary_penalty=0.0)
    assert op_devices(p)[2] == 1
    expensive = make_module(["X"] * 4, [(0, 1), (1, 2), (2, 3)], t, lat=1.0)
    p = run("optimal", expensive, boundary_penalty=0.0)
    assert len(set(op_devices(p).tolist())) == 1


def test_optimal_options_and_trivial_cases():
    m = make_module(["X", "X"], [(0, 1)], [[1.0], [2.0]])
    p = run("optimal", m)
    assert op_devices(p).tolist() == [0, 0] and p.info["solver"] == "trivial"
    m2 = make_module(["X", "X"], [(0, 1)], np.ones((2, 3)))
    with pytest.raises(InputError, match="mincut"):
        run("optimal", m2, arg="mincut")
    with pytest.raises(InputError, match="solver"):
        run("optimal", m2, arg="cplex")
    with pytest.raises(InputError, match="boundary_penalty"):
        run("optimal", m2, boundary_penalty=-1.0)


def test_optimal_breaks_a_tie_no_device_can_honour():
    # K -> Convert (D0 only) -> a (D1 only), P -> a: the Convert cannot follow its consumer
    types = ["Constant", "Convert", "Parameter", "X", "Result"]
    t = [[0, 0], [1, np.inf], [0, 0], [np.inf, 1], [0, 0]]
    m = make_module(types, [(0, 1), (1, 3), (2, 3), (3, 4)], t)
    for arg in ("mincut", "ilp"):
        dev = op_devices(run("optimal", m, arg=arg))
        assert dev[1] == 0 and dev[3] == 1 and dev[4] == 1


def test_optimal_on_a_lowered_openvino_model_matches_brute_force():
    import openvino.opset13 as ops
    from openvino import Model

    from hdp.ir.openvino_frontend import lower_model

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
    from hdp.ir.types import Costs
    for bw in (1e6, 1e9):  # copies dear (a 1 KB tensor: 1 ms) and cheap
        mm = m.replace(costs=Costs(("D0", "D1"), Array.of(t), ("modeled",) * 2, 1e-5, bw, 3e-5))
        for penalty in (0.0, 3e-5):
            dev = op_devices(run("optimal", mm, boundary_penalty=penalty))
            assert objective(mm, dev, penalty) == pytest.approx(brute_force(mm, penalty), rel=1e-6)

"""Simulator throughput and placer scaling on synthetic CNN-like graphs.

Run: ``python -m pytest bench/bench_simulate.py --benchmark-only -m "slow or not slow"``
(see bench/topics/simulator.md). Throughput is reported as op-evaluations
per second (ops x placements / time) in each benchmark's ``extra_info``.
"""

from __future__ import annotations

import numpy as np
import pytest

from hdp.ir.build import graph_from_edges
from hdp.ir.types import Array, Costs, Module, Op
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import method_from


def synthetic(n: int, n_dev: int = 2, seed: int = 0) -> Module:
    """About ``n`` ops: a Parameter, a backbone of compute ops with a weight Constant each,
    residual skips every 3 ops and a parallel branch every 10, a Result at the end.

    Device 0 is a CPU-like reference; device j > 0 runs heavy ops 2-4x faster and light ops
    1.5x slower, and cannot run 3% of the ops. Tensors are 50 KB - 2 MB; the link is 20 us +
    16 GB/s, 30 us per subgraph.
    """
    rng = np.random.default_rng(seed)
    types, src, dst, nbytes = ["Parameter"], [], [], []

    def add(t, preds):
        types.append(t)
        j = len(types) - 1
        for p in preds:
            src.append(p)
            dst.append(j)
            nbytes.append(int(rng.integers(50_000, 2_000_000)))
        return j

    prev, skip = 0, 0
    k = 0
    while len(types) < n - 1:
        w = add("Constant", [])
        cur = add("Conv", [prev, w])
        if k % 10 == 9:
            b1 = add("Relu", [prev])
            cur = add("Concat", [cur, b1])
        if k % 3 == 2:
            cur = add("Add", [cur, skip])
            skip = cur
        prev = cur
        k += 1
    add("Result", [prev])
    n_ops = len(types)
    heavy = np.array([t == "Conv" for t in types])
    base = np.where(heavy, rng.uniform(20e-6, 400e-6, n_ops), rng.uniform(2e-6, 20e-6, n_ops))
    t = np.empty((n_ops, n_dev))
    t[:, 0] = base
    for d in range(1, n_dev):
        t[:, d] = np.where(heavy, base / rng.uniform(2, 4, n_ops), base * 1.5)
        t[rng.random(n_ops) < 0.03, d] = np.inf
    t[np.isin(types, ["Parameter", "Constant", "Result"])] = 0.0
    ops = [Op(f"n{i}", ty, ((1,),), ("f32",)) for i, ty in enumerate(types)]
    g = graph_from_edges(ops, src, dst, nbytes)
    devs = tuple(f"D{d}" for d in range(n_dev))
    costs = Costs(devices=devs, op_time=Array.of(t), kind=("modeled",) * n_dev,
                  link_latency=20e-6, link_bandwidth=16e9, subgraph_overhead=30e-6)
    return Module(graph=g, costs=costs)


def placements(sim: Simulator, k: int, kind: str, seed: int = 0) -> np.ndarray:
    """``k`` device-per-group vectors of ``sim``'s problem."""
    rng = np.random.default_rng(seed)
    n, nd = sim.n_groups, sim.n_devices
    if kind == "random":  # every op independently: the worst case (many subgraphs, cycles)
        return rng.integers(0, nd, (k, n))
    # contiguous blocks of ~n/20 ops per device, like a learned placement
    return (np.arange(n)[None, :] * 20 // n + rng.integers(0, nd, (k, 1))) % nd


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
@pytest.mark.parametrize("kind", ["blocks", "random"])
def test_latencies_throughput(benchmark, n, kind):
    m = synthetic(n)
    sim = _sim(m)
    k = max(10, 2_000_000 // m.graph.n_ops)
    devs = placements(sim, k, kind)
    sim.latencies(devs[:1])  # compile outside the timing
    benchmark.pedantic(sim.latencies, args=(devs,), rounds=5, iterations=1)
    rate = k * m.graph.n_ops / benchmark.stats.stats.min
    benchmark.extra_info["op_evals_per_s"] = rate
    assert rate > 1e6


@pytest.mark.parametrize("n", [1_000, 10_000])
def test_parallel_throughput(benchmark, n):
    m = synthetic(n)
    sim = _sim(m)
    devs = placements(sim, 20, "blocks")
    sim.latency_parallel(devs[0])

    def run():
        for d in devs:
            sim.latency_parallel(d)

    benchmark.pedantic(run, rounds=5, iterations=1)
    benchmark.extra_info["op_evals_per_s"] = 20 * m.graph.n_ops / benchmark.stats.stats.min


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_simulator_build(benchmark, n):
    m = synthetic(n)
    benchmark.pedantic(_sim, args=(m,), rounds=3, iterations=1)  # the problem and its simulator


def _sim(m: Module) -> Simulator:
    return Simulator(build_problem(m))


def _place(name, m, **options):
    """``name``'s placement of ``m`` (options as ``--set`` gives them), through :func:`hdp.placers.place`."""
    p = build_problem(m)
    return place(method_from(name, {k: str(v) for k, v in options.items()}), PlaceContext(module=m, problem=p))


@pytest.fixture(scope="module", autouse=True)
def _compiled():
    """Compile the Numba kernels before anything is timed."""
    m = synthetic(60)
    _sim(m).latency_parallel(np.zeros(_sim(m).n_groups, np.int64))
    for name in ("heft", "optimal", "random"):
        _place(name, m)


def _best_single(sim: Simulator) -> float:
    return min(sim.singles().values())


@pytest.mark.parametrize("n", [1_000, 10_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_optimal_mincut_scaling(benchmark, n):
    m = synthetic(n)
    p = benchmark.pedantic(_place, args=("optimal", m), rounds=1, iterations=1)
    sim = _sim(m)
    benchmark.extra_info.update(ops=m.graph.n_ops, simulated=float(p.info["simulated"]),
                                lower_bound=float(p.info["lower_bound"]), best_single=_best_single(sim),
                                subgraphs=p.info["subgraphs"])
    assert float(p.info["simulated"]) >= float(p.info["lower_bound"]) * (1 - 1e-9)


@pytest.mark.parametrize("n", [1_000, pytest.param(10_000, marks=pytest.mark.slow)])
def test_optimal_ilp_three_devices(benchmark, n):
    m = synthetic(n, n_dev=3)
    p = benchmark.pedantic(_place, args=("optimal", m), kwargs={"time_limit": 60.0}, rounds=1, iterations=1)
    benchmark.extra_info.update(ops=m.graph.n_ops, gap=p.info["gap"], status=p.info["status"],
                                simulated=float(p.info["simulated"]), lower_bound=float(p.info["lower_bound"]),
                                best_single=_best_single(_sim(m)))


@pytest.mark.parametrize("n", [1_000, 10_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_heft_scaling(benchmark, n):
    m = synthetic(n)
    p = benchmark.pedantic(_place, args=("heft", m), rounds=1, iterations=1)
    benchmark.extra_info.update(ops=m.graph.n_ops, simulated=float(p.info["simulated"]),
                                makespan=float(p.info["makespan"]), best_single=_best_single(_sim(m)))

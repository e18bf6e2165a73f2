"""Serving plans (hdp.placement.plan, plan_search) against brute force on small random DAGs with
replicas, streams, caps and a shared compute resource.

The brute force knows nothing of the search's slots, options or ideals: it lists every way to
give each group a position (non-decreasing along every edge of the written model: the stages of
an acyclic plan in a topological order), and every way to give each stage a set of identical
devices that no other stage uses (nor another device of its compute resource) with one stream
count, plus the whole model on any set of devices with any streams each; every plan is priced by
:class:`~hdp.placement.plan.PlanPricer`, the definition the searches optimise.
"""

import itertools
import json

import numpy as np
import pytest

from hdp.costgraph import read
from hdp.costgraph.graph import capacities, lower
from hdp.pipeline.schedule import make_pass
from hdp.placement.objective import Throughput
from hdp.placement.plan import GroupPlan, PlanDevices, PlanPricer, Replica, shape_of, speedup
from hdp.placement.plan_milp import milp_plan, work_bound
from hdp.placement.planner import plan_throughput
from hdp.placement.problem import problem_of


def workload(rng, n, gpus=2, cap=None, npu=False):
    """``n`` ops on a random DAG (each reads one or two earlier ones), a CPU, ``gpus`` identical
    GPUs (capped at ``cap``), optionally an NPU that runs some ops only."""
    ops = []
    for i in range(n):
        t = float(rng.uniform(0.5, 3))
        time = {"CPU": t * float(rng.uniform(1.5, 4)), "GPU": t}
        if npu and rng.random() < 0.7:
            time["NPU"] = t * float(rng.uniform(0.4, 1.2))
        ops.append({"name": f"o{i}", "time": time, "bytes": int(rng.integers(1, 6))})
    tensors = []
    for v in range(1, n):
        for u in rng.choice(v, min(v, int(rng.integers(1, 3))), replace=False):
            tensors.append({"producer": f"o{u}", "consumers": [f"o{v}"], "time": float(rng.uniform(0, 0.6))})
    devices = [{"name": "CPU"}, {"name": "GPU", "count": gpus, **({"memory": cap} if cap else {})}]
    if npu:
        devices.append({"name": "NPU"})
    return {"format": "hdp-costgraph", "ops": ops, "tensors": tensors, "devices": devices}


def problem(tmp_path, doc, requests):
    f = tmp_path / "w.json"
    f.write_text(json.dumps(doc))
    m = lower(read(f))
    devices = tuple(m.costs.devices)
    return problem_of(m, objective=Throughput(requests=requests), capacity=capacities(m, devices))


def group_edges(p) -> set[tuple[int, int]]:
    st = p.structure
    g = st.group_of.astype(np.int64)
    a, b = g[st.h_src], g[st.h_dst]
    keep = (a >= 0) & (b >= 0) & (a != b)
    return set(zip(a[keep].tolist(), b[keep].tolist()))


def identical(pr, d, e) -> bool:
    p = pr.problem
    return (np.array_equal(p.allowed[:, d], p.allowed[:, e])
            and np.array_equal(np.where(p.allowed[:, d], p.time[:, d], 0), np.where(p.allowed[:, e], p.time[:, e], 0))
            and pr.caps[d] == pr.caps[e] and pr.devs.efficiency[d] == pr.devs.efficiency[e]
            and pr.devs.max_streams[d] == pr.devs.max_streams[e])


def brute_force(pr) -> tuple[float, float]:
    """(best contiguous plan's period, best of every plan's) by enumeration (module docstring)."""
    p = pr.problem
    k, nd = p.n_groups, p.n_devices
    edges = group_edges(p)
    devs = pr.devs
    best_c = np.inf
    smax = {d: int(max(1, min(pr.requests, devs.max_streams[d]))) for d in range(nd)}
    # candidate replica sets: non-empty sets of identical devices, no two of one compute resource
    sets = []
    for m in range(1, nd + 1):
        for sub in itertools.combinations(range(nd), m):
            if len({int(devs.compute[d]) for d in sub}) < m:
                continue
            if all(identical(pr, sub[0], e) for e in sub[1:]):
                sets.append(sub)
    for pos in itertools.product(range(nd), repeat=k):
        if any(pos[a] > pos[b] for a, b in edges):
            continue
        used = sorted(set(pos))
        stage_of = np.array([used.index(x) for x in pos], np.int64)
        ns = len(used)
        for choice in itertools.product(sets, repeat=ns):
            res = [int(devs.compute[d]) for s in choice for d in s]
            if len(res) != len(set(res)):
                continue
            for streams in itertools.product(*[range(1, smax[c[0]] + 1) for c in choice]):
                plan = GroupPlan(stage_of, tuple(tuple(Replica(d, s) for d in c) for c, s in zip(choice, streams)))
                if not pr.allowed(plan):
                    continue
                pp = pr.price(plan)
                if pp.feasible and pp.period < best_c:
                    best_c = pp.period
    best = best_c
    whole = [d for d in range(nd) if p.allowed[:, d].all()]
    for m in range(2, len(whole) + 1):
        for sub in itertools.combinations(whole, m):
            for streams in itertools.product(*[range(1, smax[d] + 1) for d in sub]):
                plan = GroupPlan(np.zeros(k, np.int64), (tuple(Replica(d, s) for d, s in zip(sub, streams)),))
                pp = pr.price(plan)
                if pp.feasible and pp.period < best:
                    best = pp.period
    return best_c, best


CASES = [  # (seed, ops, GPUs, GPU cap, NPU, requests, share compute CPU+NPU, dispatch)
    (0, 5, 2, None, False, 2, False, 0.05),
    (1, 5, 2, 9, False, 3, False, 0.1),
    (2, 6, 2, None, False, 4, False, 0.0),
    (3, 5, 1, 7, True, 2, False, 0.05),
    (4, 5, 2, None, True, 2, True, 0.05),
    (5, 4, 3, 6, False, 3, False, 0.2),
]


@pytest.mark.parametrize("seed,n,gpus,cap,npu,requests,share,dispatch", CASES)
def test_exact_planner_equals_brute_force(tmp_path, seed, n, gpus, cap, npu, requests, share, dispatch):
    rng = np.random.default_rng(700 + seed)
    p = problem(tmp_path, workload(rng, n, gpus, cap, npu), requests)
    nd = p.n_devices
    devs = PlanDevices.independent(nd, efficiency=0.7, max_streams=3, dispatch=dispatch)
    eff = np.array([0.6 if d.startswith("CPU") else 0.8 for d in p.devices])
    compute = np.arange(nd)
    if share:
        compute[p.devices.index("NPU")] = p.devices.index("CPU")
    devs = PlanDevices(eff, devs.max_streams, compute, devs.memory, devs.memory_capacity, dispatch)
    pr = PlanPricer(p, devs, requests)
    best_c, best = brute_force(pr)
    found = plan_throughput(p, devs, requests, time_limit=30, milp=False, tolerance=1e-9)
    assert found.best.exact
    assert found.best.value == pytest.approx(best, rel=1e-6)
    assert found.best.bound <= best * (1 + 1e-9) and found.best.gap <= 1e-6
    plan = found.best.plan
    assert pr.allowed(plan) and pr.acyclic(plan) and pr.price(plan).feasible
    assert found.contiguous.value == pytest.approx(best_c, rel=1e-6)
    m = milp_plan(pr, time_limit=30)
    assert m.plan is not None and m.value == pytest.approx(best_c, rel=1e-6)
    assert pr.allowed(m.plan) and pr.acyclic(m.plan)


def test_the_price_of_replicas_streams_and_shared_compute(tmp_path):
    """Worked by hand: one group of 4 s on two devices and of 2 s on a third that shares the
    first's compute."""
    doc = {"format": "hdp-costgraph", "ops": [{"name": "a", "time": {"A": 4.0, "B": 4.0, "C": 2.0}}],
           "devices": [{"name": "A"}, {"name": "B"}, {"name": "C"}]}
    p = problem(tmp_path, doc, 4)
    devs = PlanDevices(np.array([0.5, 0.5, 0.75]), np.array([1, 1, 4]), np.array([0, 1, 0]), np.arange(3),
                       np.full(3, np.inf), 0.1)
    pr = PlanPricer(p, devs, 4)
    L = pr.stage_loads(np.zeros(1, np.int64), 1)[0]
    assert L == pytest.approx([4.0, 4.0, 2.0])
    two = GroupPlan(np.zeros(1, np.int64), ((Replica(0), Replica(1)),))
    pp = pr.price(two)
    assert pp.period == pytest.approx(4.0 / 2 + 0.1)  # load over replicas plus the dispatch
    assert pp.latency == pytest.approx(4.0 + 0.1) and shape_of(two.replicas) == "replicas"
    streams = GroupPlan.single(1, 2, 3)
    assert pr.price(streams).period == pytest.approx(2.0 / speedup(0.75, 3))
    assert speedup(0.75, 2) == pytest.approx(1.5) and speedup(0.5, 5) == pytest.approx(1.0)
    # device 0 and 2 are one compute resource: their replicas' work adds up against its streams
    shared = GroupPlan(np.zeros(1, np.int64), ((Replica(0), Replica(2, 2)),))
    pp = pr.price(shared)
    rate0, rate2 = 1 / 4.0, speedup(0.75, 2) / 2.0
    w0, w2 = rate0 / (rate0 + rate2), rate2 / (rate0 + rate2)
    busy = (w0 * 4.0 + w2 * 2.0) / speedup(0.5, 3)  # the resource's efficiency: the lowest of its devices'
    assert pp.period == pytest.approx(max(busy, 1 / (rate0 + rate2) + 0.1, pp.latency / 4))
    assert pp.bound_by.startswith("resource")


def test_calibrated_stream_efficiency_and_dispatch_reach_the_plan_model():
    """``hdp calibrate``'s stream efficiency (two streams' rate over twice one's) and a dispatch
    cost go into the throughput objective as partition options, and from it into the plan model."""
    from hdp.runtime.costs.stream_fit import stream_efficiency
    from hdp.target.streams import plan_devices
    from hdp.target.streams import stream_efficiency as device_efficiency
    from hdp.target.target import load_target

    assert stream_efficiency([10, 10, 11], [15, 16, 15]) == pytest.approx(0.75)
    assert stream_efficiency([10], [30]) == 1.0 and stream_efficiency([10], [4]) == 0.5
    t = load_target("virtual")
    opts = {"target": t, "objective": "throughput", "requests": "4", "streams": "CPU=0.7,CPU_B=0.65", "dispatch": "1e-4"}
    ob = make_pass("partition", opts).objective
    assert ob.streams == (("CPU", 0.7), ("CPU_B", 0.65)) and ob.dispatch == 1e-4
    with pytest.raises(Exception, match="streams: expected DEVICE=EFFICIENCY"):
        make_pass("partition", {"target": t, "objective": "throughput", "streams": "CPU"})
    with pytest.raises(Exception, match=r"streams.*<= 1"):
        make_pass("partition", {"target": t, "objective": "throughput", "streams": "CPU=2"})
    with pytest.raises(Exception, match="only with objective throughput"):
        make_pass("partition", {"target": t, "dispatch": "1e-4"})
    devs = plan_devices(t, ("CPU", "CPU_B"), fitted=dict(ob.streams), dispatch=ob.dispatch)
    assert list(devs.efficiency) == [0.7, 0.65] and devs.dispatch == 1e-4
    assert devs.compute[0] == devs.compute[1]  # virtual's CPU and CPU_B are the same cores
    one = load_target("virtual-2x1")
    assert device_efficiency(one.device("CPU")) == 0.5  # a one-thread device: a second stream adds nothing
    assert list(plan_devices(one, ("CPU", "CPU_B")).max_streams) == [1, 1]


@pytest.mark.parametrize("seed", range(3))
def test_the_work_bound_holds_below_every_plan(tmp_path, seed):
    rng = np.random.default_rng(900 + seed)
    p = problem(tmp_path, workload(rng, 5, 2, None, True), 2)
    devs = PlanDevices.independent(p.n_devices, efficiency=0.7, max_streams=2)
    pr = PlanPricer(p, devs, 2)
    _, best = brute_force(pr)
    assert 0 < work_bound(pr) <= best * (1 + 1e-9)

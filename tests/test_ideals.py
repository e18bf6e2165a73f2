"""The exact optimum over contiguous splits (hdp.placement.ideals, maxload_search.contiguous_split) against brute force on small
generated cost graphs (ties, caps, identical accelerators, training graphs with backward ops),
and against the figures of msr-fiddle/dnn-partitioning's DP on their shipped workloads.

The brute force knows nothing of hdp's DAG: the order of the groups is written here from the rule
(an edge between two forward nodes orders their classes; a backward-only class is ordered by its
backward edges reversed), and a placement is contiguous when its devices can be listed so that
every prefix of their blocks is closed under that order.
"""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from hdp.costgraph import read
from hdp.costgraph.graph import lower, max_load_data
from hdp.placement import maxload as ML
from hdp.placement import maxload_search as MS
from hdp.placement.ideals import pipeline_dag
from hdp.placement.problem import build_problem

DATA = Path(__file__).parent / "data" / "dnn_partitioning"


def problem_of(tmp_path, doc):
    f = tmp_path / "w.json"
    f.write_text(json.dumps(doc))
    m = lower(read(f))
    p = build_problem(m)
    return m, p, max_load_data(p, m)


def workload(rng, n_fwd, k, cap, training=False, idle=1, classes=1, sources=0.0):
    """A random forward DAG of ``n_fwd`` nodes (each after the first a new source with probability
    ``sources``, else reading one or two earlier ones; plus ``idle`` zero-work, zero-byte sources: weights),
    k identical accelerators capped at ``cap``, one CPU, ``classes`` colour classes of two forward
    nodes; ``training``: a backward node per forward node in its class, edges reversed, a loss
    (a backward-only class), a class-less backward node and edges from forward to backward nodes."""
    nodes, edges = [], []
    ids = iter(rng.permutation(np.arange(10, 10 + 4 * n_fwd + 10)).tolist())
    fwd = []
    for i in range(n_fwd):
        t = float(rng.uniform(0.5, 3))
        fwd.append({"id": next(ids), "supportedOnFpga": bool(rng.random() > 0.1), "cpuLatency": t * float(rng.uniform(2, 6)),
                    "fpgaLatency": t, "isBackwardNode": False, "size": float(rng.integers(1, 10))})
    for i, nd in enumerate(fwd):
        nd["colorClass"] = i
    for c in range(classes):
        a, b = rng.choice(n_fwd, 2, replace=False)
        fwd[b]["colorClass"] = fwd[a]["colorClass"]
    fe = []
    for v in range(1, n_fwd):
        if rng.random() < sources:
            continue
        for u in rng.choice(v, min(v, int(rng.integers(1, 3))), replace=False):
            fe.append((fwd[u]["id"], fwd[v]["id"]))
    nodes += fwd
    for _ in range(idle):
        w = {"id": next(ids), "supportedOnFpga": True, "cpuLatency": 0.0, "fpgaLatency": 0.0, "isBackwardNode": 0,
             "size": 0.0}
        nodes.append(w)
        fe.append((w["id"], fwd[int(rng.integers(n_fwd))]["id"]))
    edges += fe
    if training:
        bwd = {}
        for nd in fwd:
            b = dict(nd, id=next(ids), isBackwardNode=True, cpuLatency=2 * nd["cpuLatency"],
                     fpgaLatency=2 * nd["fpgaLatency"])
            bwd[nd["id"]] = b
            nodes.append(b)
        loss = {"id": next(ids), "supportedOnFpga": True, "cpuLatency": 1.0, "fpgaLatency": 0.3, "isBackwardNode": 1,
                "colorClass": 10_000, "size": 1.0}
        free = {"id": next(ids), "supportedOnFpga": True, "cpuLatency": 0.5, "fpgaLatency": 0.2, "isBackwardNode": 1,
                "size": 1.0}
        nodes += [loss, free]
        for u, v in fe:
            if u in bwd and v in bwd:
                edges.append((bwd[v]["id"], bwd[u]["id"]))
        last = fwd[-1]["id"]
        edges += [(last, loss["id"]), (loss["id"], bwd[last]["id"]), (bwd[fwd[0]["id"]]["id"], free["id"])]
        edges += [(fwd[u]["id"], bwd[fwd[u + 1]["id"]]["id"]) for u in range(n_fwd - 1)]  # saved activations
    cost = {nd["id"]: float(rng.uniform(0, 1.2)) for nd in nodes}
    return {"maxSizePerFPGA": cap, "maxFPGAs": k, "maxCPUs": 1, "nodes": nodes,
            "edges": [{"sourceId": u, "destId": v, "cost": cost[u]} for u, v in edges]}


def order_edges(doc, m, p):
    """(a, b) group pairs: group a comes no later than group b in a contiguous split (see the
    module docstring), written from the workload's JSON."""
    st = p.structure
    group = {int(op.name): int(st.group_of[i]) for i, op in enumerate(m.graph.ops)}
    back = {nd["id"]: bool(nd["isBackwardNode"]) for nd in doc["nodes"]}
    has_fwd = {group[i] for i, b in back.items() if not b}
    out = set()
    for e in doc["edges"]:
        u, v = e["sourceId"], e["destId"]
        gu, gv = group[u], group[v]
        if gu == gv:
            continue
        if not back[u] and not back[v]:
            out.add((gu, gv))
        elif back[u] and back[v] and (gu not in has_fwd or gv not in has_fwd):
            out.add((gv, gu))
    return out


def contiguous(gd, edges) -> bool:
    used = sorted(set(gd.tolist()))
    for perm in itertools.permutations(used):
        inside = set()
        ok = True
        for d in perm:
            inside |= set(np.flatnonzero(gd == d).tolist())
            if any(b in inside and a not in inside for a, b in edges):
                ok = False
                break
        if ok:
            return True
    return False


def brute_force(p, ml, edges):
    """(best max-load over all placements, over contiguous ones) within the caps."""
    best, best_c = np.inf, np.inf
    for gd in itertools.product(*[np.flatnonzero(p.allowed[g]) for g in range(p.n_groups)]):
        gd = np.array(gd)
        load, mem = ML.loads(p, ml, gd)
        if (mem > ml.capacity).any():
            continue
        v = load.max()
        best = min(best, v)
        if v < best_c and contiguous(gd, edges):
            best_c = v
    return best, best_c


CASES = [  # (seed, forward nodes, accelerators, cap, training, share of new sources)
    (0, 6, 2, 1e9, False, 0.0), (1, 6, 3, 14.0, False, 0.0), (2, 7, 2, 1e9, False, 0.5), (3, 7, 3, 18.0, False, 0.4),
    (4, 7, 2, 16.0, False, 0.3), (5, 3, 2, 1e9, True, 0.0), (6, 3, 2, 20.0, True, 0.0), (7, 4, 3, 1e9, True, 0.5),
    (8, 4, 2, 24.0, True, 0.3),
]


@pytest.mark.parametrize("seed,n,k,cap,training,sources", CASES)
def test_contiguous_optimum_equals_brute_force(tmp_path, seed, n, k, cap, training, sources):
    rng = np.random.default_rng(300 + seed)
    doc = workload(rng, n, k, cap, training=training, sources=sources)
    m, p, ml = problem_of(tmp_path, doc)
    assert p.n_groups <= 8
    edges = order_edges(doc, m, p)
    best, best_c = brute_force(p, ml, edges)
    for bound in (np.inf, MS.contiguous_bound(p, ml)):
        r = MS.contiguous_split(p, ml, bound=bound)
        if not np.isfinite(best_c):
            assert r.group_device is None and r.exact
            continue
        assert r.exact and r.value == pytest.approx(best_c, rel=1e-9)
        assert ML.feasible(p, ml, r.group_device) and contiguous(r.group_device, edges)
        assert ML.max_load(p, ml, r.group_device) == pytest.approx(r.value, rel=1e-12)
    assert bound >= best_c * (1 - 1e-12)  # the pipeline of one order is a contiguous split
    if np.isfinite(best):
        s = MS.optimize(p, ml, time_limit=20)
        assert s.value <= best_c * (1 + 1e-12) and s.value == pytest.approx(best, rel=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_several_device_classes_and_no_free_device(tmp_path, seed):
    """hdp's format: two GPUs (capped), one NPU that runs some ops only, and a CPU that pays for
    its transfers like the others: states count the devices of each class."""
    rng = np.random.default_rng(500 + seed)
    n = 7
    ops = []
    for i in range(n):
        t = float(rng.uniform(0.5, 3))
        time = {"CPU": 4 * t, "GPU": t}
        if rng.random() < 0.6:
            time["NPU"] = float(rng.uniform(0.3, 2))
        ops.append({"name": f"o{i}", "time": time, "bytes": int(rng.integers(1, 8)), "tie": i % 6})
    tensors = []
    for v in range(1, n):
        us = rng.choice(v, min(v, int(rng.integers(1, 3))), replace=False)
        tensors += [{"producer": f"o{u}", "consumers": [f"o{v}"], "time": float(rng.uniform(0, 1))} for u in us]
    doc = {"format": "hdp-costgraph", "ops": ops, "tensors": tensors,
           "devices": [{"name": "CPU"}, {"name": "GPU", "count": 2, "memory": 14}, {"name": "NPU", "memory": 10}]}
    f = tmp_path / "w.json"
    f.write_text(json.dumps(doc))
    m = lower(read(f))
    p = build_problem(m)
    ml = max_load_data(p, m)
    assert not ml.free_comm.any() and ML.symmetry_classes(p, ml) == [[1, 2]]
    st = p.structure
    g = {op.name: int(st.group_of[i]) for i, op in enumerate(m.graph.ops)}
    edges = {(g[t["producer"]], g[c]) for t in tensors for c in t["consumers"] if g[t["producer"]] != g[c]}
    best, best_c = brute_force(p, ml, edges)
    r = MS.contiguous_split(p, ml)
    assert r.exact
    if not np.isfinite(best_c):
        assert r.group_device is None
        return
    assert r.value == pytest.approx(best_c, rel=1e-9) and contiguous(r.group_device, edges)
    assert ML.feasible(p, ml, r.group_device)


def test_the_order_of_a_training_graph(tmp_path):
    """Backward ops do not order their groups; a backward-only class sits where its backward
    edges put it, read in reverse; an idle weight joins the op it feeds."""
    rng = np.random.default_rng(9)
    doc = workload(rng, 4, 2, 1e9, training=True, idle=1, classes=0)
    m, p, ml = problem_of(tmp_path, doc)
    dag = pipeline_dag(p, ml)
    assert dag.merged["idle leaves"] == 1 and dag.merged["cycles"] == 0
    edges = order_edges(doc, m, p)
    node = dag.node_of
    preds = {(int(dag.pred_idx[i]), v) for v in range(dag.n_nodes)
             for i in range(dag.pred_ptr[v], dag.pred_ptr[v + 1])}
    assert {(int(node[a]), int(node[b])) for a, b in edges if node[a] != node[b]} == preds
    st = p.structure
    loss = next(nd["id"] for nd in doc["nodes"] if nd.get("colorClass") == 10_000)
    g_loss = int(st.group_of[[op.name for op in m.graph.ops].index(str(loss))])
    assert any(b == g_loss for a, b in edges) or any(a == g_loss for a, b in edges)  # the loss is ordered


def test_too_many_ideals_gives_no_split(tmp_path):
    rng = np.random.default_rng(4)
    doc = workload(rng, 8, 2, 1e9, idle=0, classes=0)
    doc["edges"] = []  # 8 independent nodes: 256 ideals
    m, p, ml = problem_of(tmp_path, doc)
    r = MS.contiguous_split(p, ml, max_ideals=100)
    assert r.group_device is None and not r.exact and "more than" in str(r.info["ideals"])
    r = MS.contiguous_split(p, ml)
    assert r.exact and r.info["ideals"] == 256


#: Their DP's max-load (their own scorer, /work/notes/peer/REPORT.md §8): the best chain-contiguous
#: split after their contractions, a subset of the splits hdp's DAG allows.
THEIR_DP = {"bert24_inference": 17.7899, "bert24_training": 41.7458, "bert_l-3_inference": 27.9186,
            "gnmt_inference": 32.9107}


@pytest.mark.parametrize("name", sorted(THEIR_DP))
def test_never_worse_than_their_dp(name):
    m = lower(read(DATA / f"{name}.json"))
    p = build_problem(m)
    ml = max_load_data(p, m)
    r = MS.contiguous_split(p, ml)
    assert r.exact and ML.feasible(p, ml, r.group_device)
    assert r.value <= THEIR_DP[name] + 5e-5

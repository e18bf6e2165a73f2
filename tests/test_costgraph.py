"""Cost graphs as a frontend (hdp.costgraph), the max-load objective with the peer's communication
rule and caps (hdp.placement.maxload), and the placement of msr-fiddle/dnn-partitioning's workloads.

The shipped workloads and splits in tests/data/dnn_partitioning are theirs (MIT, LICENSE.txt
there): four small throughput inputs, the splits their DP wrote for them (dp/) and two human-expert
splits (expert/). tests/peer_scoring.py is an independent scorer of their rule, written without hdp.
"""

import itertools
import json
from pathlib import Path

import numpy as np
import peer_scoring
import pytest
from click.testing import CliRunner

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.costgraph import read
from hdp.costgraph.graph import lower, max_load_data, problem_for
from hdp.costgraph.peer import read_split, split_json
from hdp.placement import maxload as ML
from hdp.placement import maxload_search as MS
from hdp.placement.problem import build_problem

DATA = Path(__file__).parent / "data" / "dnn_partitioning"

#: Their DP's and the human experts' max-load on the shipped workloads, as their own scorer printed it
#: (dp.exe -expert, /work/notes/peer/REPORT.md §8), to the digits it printed.
THEIR_FIGURES = {("bert24_inference", "dp"): 17.7899, ("bert24_training", "dp"): 41.7458,
                 ("gnmt_inference", "dp"): 32.9107, ("bert_l-3_inference", "dp"): 27.9186,
                 ("bert24_inference", "expert"): 20.0840, ("bert24_training", "expert"): 49.4049,
                 ("gnmt_inference", "expert"): 46.2085}


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def problem_of_file(path, fmt="auto"):
    m = lower(read(path, fmt))
    p = build_problem(m)
    return m, p, max_load_data(p, m)


def write(tmp_path, name, doc) -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc))
    return f


HAND = {  # ids not dense nor in topological order; flags as ints and booleans; an int latency
    "maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1, "extraKey": "ignored",
    "nodes": [
        {"id": 10, "name": "sink", "supportedOnFpga": True, "cpuLatency": 4.0, "fpgaLatency": 1.0,
         "isBackwardNode": False, "size": 30.0},
        {"id": 3, "name": "src", "supportedOnFpga": 1, "cpuLatency": 2, "fpgaLatency": 0.5,
         "isBackwardNode": 0, "colorClass": 7, "size": 50},
        {"id": 7, "name": "mid", "supportedOnFpga": 0, "cpuLatency": 1.0, "fpgaLatency": 0.1,
         "isBackwardNode": 0, "size": 0.0},
        {"id": 5, "name": "mate", "supportedOnFpga": 1, "cpuLatency": 3.0, "fpgaLatency": 0.2,
         "isBackwardNode": True, "colorClass": 7, "size": 40.0},
    ],
    "edges": [
        {"sourceId": 3, "destId": 7, "cost": 0.25, "size": 8.0},
        {"sourceId": 3, "destId": 10, "cost": 0.25, "size": 8.0},
        {"sourceId": 7, "destId": 10, "cost": 0.5},
        {"sourceId": 10, "destId": 5, "cost": 0.125},
    ],
}


def test_peer_reader_on_a_hand_made_file(tmp_path):
    f = write(tmp_path, "hand.json", HAND)
    m, p, ml = problem_of_file(f, "dnn-partitioning")
    g = m.graph
    assert [op.name for op in g.ops] == ["3", "7", "10", "5"]  # topological order
    assert g.renamed == {"3": "src", "7": "mid", "10": "sink", "5": "mate"}
    assert m.costs.devices == ("CPU", "FPGA1", "FPGA2")
    assert m.costs.device_class == ("cpu", "fpga", "fpga")
    mask = m.support.mask.numpy()
    assert mask[1].tolist() == [True, False, False] and mask[[0, 2, 3]].all()  # 'mid' is CPU-only
    assert [op.weight_bytes for op in g.ops] == [50, 0, 30, 40]
    assert m.costs.edge_time.numpy().tolist() == [0.25, 0.25, 0.5, 0.125]  # edges (3,7) (3,10) (7,10) (10,5)
    assert max_load_data(p, m).capacity.tolist() == [np.inf, 100.0, 100.0]
    assert ml.free_comm.tolist() == [True, False, False]
    # the colour class (src, mate) is one group although 'sink' lies on a path between them
    assert p.n_groups == 3 and p.structure.group_of[0] == p.structure.group_of[3]
    assert not p.allowed[p.structure.group_of[1], 1:].any()
    assert ml.group_bytes[p.structure.group_of[0]] == 90


def test_split_roundtrip_and_scoring_on_the_hand_made_file(tmp_path):
    f = write(tmp_path, "hand.json", HAND)
    m, p, ml = problem_of_file(f)
    # src+mate on FPGA1, mid on the CPU, sink on FPGA2
    gd = np.zeros(p.n_groups, np.int64)
    st = p.structure
    gd[st.group_of[0]], gd[st.group_of[1]], gd[st.group_of[2]] = 1, 0, 2
    load, mem = ML.loads(p, ml, gd)
    # FPGA1: 0.5 + 0.2 compute, sends 3's output (0.25), receives 10's (0.125)
    # FPGA2: 1.0 compute, receives 3's (0.25) and 7's (0.5), sends its own (0.125); the CPU pays nothing
    assert load == pytest.approx([1.0, 1.075, 1.875])
    assert mem.tolist() == [0, 90, 30]
    doc = split_json(m, p.devices, p.op_devices(gd), load)
    assert doc["cpus"] == [{"load": 1.0, "nodes": [7]}]
    assert [x["nodes"] for x in doc["fpgas"]] == [[3, 5], [10]]
    s = write(tmp_path, "split.json", doc)
    assert peer_scoring.score(f, s)[0] == pytest.approx(1.875)
    # a split that lists one member of a colour class gives the class its device
    write(tmp_path, "part.json", {"cpus": [{"nodes": [7]}], "fpgas": [{"nodes": [3]}, {"nodes": [10]}]})
    assert read_split(str(tmp_path / "part.json"), m, p.devices).tolist() == p.op_devices(gd).tolist()


def test_hdp_format_reader(tmp_path):
    doc = {"format": "hdp-costgraph", "version": 1,
           "devices": [{"name": "CPU", "free_comm": True}, {"name": "GPU", "count": 2, "memory": 10}],
           "ops": [{"name": "a", "time": {"CPU": 2.0, "GPU": 0.5}, "bytes": 4, "tie": "t"},
                   {"name": "b", "time": {"CPU": 1.0}},
                   {"name": "c", "time": {"CPU": 1.0, "GPU": None}, "tie": "t"},
                   {"name": "d", "time": {"CPU": 3.0, "GPU": 1.0}, "bytes": 6}],
           "tensors": [{"producer": "a", "consumers": ["b", "d"], "bytes": 1000, "time": 0.5},
                       {"producer": "a", "consumers": ["c"], "bytes": 2000},
                       {"producer": "b", "consumers": ["d"]}],
           "link": {"latency": 0.1, "bandwidth": 1000}}
    f = write(tmp_path, "g.json", doc)
    m, p, ml = problem_of_file(f)
    assert p.devices == ("CPU", "GPU1", "GPU2") and m.costs.device_class == ("CPU", "GPU", "GPU")
    assert ml.capacity.tolist() == [np.inf, 10, 10] and ml.free_comm.tolist() == [True, False, False]
    # 'a' is tied to 'c', which no GPU runs: the class is CPU-only
    ga = p.structure.group_of[0]
    assert p.allowed[ga].tolist() == [True, False, False]
    # a's two outputs are two tensors: port 0 costs its own time, port 1 the link's 0.1 + 2000 / 1000
    assert sorted(p.t_cost.tolist()) == pytest.approx([0.1, 0.5])  # port 1 stays inside a's group
    assert [op.name for op in m.graph.ops] == ["a", "b", "c", "d"]
    assert m.graph.ops[0].out_types == ("opaque", "opaque")


def _bad_peer(**change):
    doc = json.loads(json.dumps(HAND))
    for k, v in change.items():
        doc[k] = v
    return doc


BAD = [
    ("missing-id", _bad_peer(nodes=[{k: v for k, v in HAND["nodes"][0].items() if k != "id"}] + HAND["nodes"][1:]),
     "nodes[0]", "id"),
    ("unknown-node", _bad_peer(edges=HAND["edges"] + [{"sourceId": 3, "destId": 99, "cost": 0.25}]),
     "edges[4].destId", "node 99"),
    ("two-costs", _bad_peer(edges=HAND["edges"] + [{"sourceId": 3, "destId": 5, "cost": 0.75}]),
     "node 3", "different costs"),
    ("class-no-device-holds", _bad_peer(maxCPUs=0, maxSizePerFPGA=60.0), "'3'", "no device can hold the tie class"),
    ("cycle", _bad_peer(edges=HAND["edges"] + [{"sourceId": 10, "destId": 7, "cost": 0.125}]), "cycle", "op '"),
    ("duplicate-id", _bad_peer(nodes=HAND["nodes"] + [dict(HAND["nodes"][0])]), "nodes[4]", "node id 10 appears twice"),
    ("negative-time", _bad_peer(nodes=[dict(HAND["nodes"][0], cpuLatency=-1)] + HAND["nodes"][1:]),
     "nodes[0].cpuLatency", "got -1"),
]


@pytest.mark.parametrize("case,doc,where,what", BAD, ids=[b[0] for b in BAD])
def test_bad_workloads_are_one_line_errors(tmp_path, case, doc, where, what):
    f = write(tmp_path, "bad.json", doc)
    with pytest.raises(InputError) as e:
        lower(read(f))
    msg = str(e.value)
    assert str(f) in msg and where in msg and what in msg and "\n" not in msg, msg
    r = run("lower", f, "-o", tmp_path / "m.hdp")
    assert r.exit_code == 2 and r.output.strip().splitlines() == [f"hdp: error: {msg}"]
    assert not (tmp_path / "m.hdp").exists()


def test_hdp_format_errors_name_the_field(tmp_path):
    base = {"format": "hdp-costgraph", "devices": [{"name": "CPU"}],
            "ops": [{"name": "a", "time": {"CPU": 1.0}}], "tensors": []}
    cases = [({"ops": [{"name": "a", "time": {"NPU": 1.0}}]}, "ops[0].time: 'NPU' is not a device"),
             ({"tensors": [{"producer": "a", "consumers": ["z"]}]}, "tensors[0].consumers: op 'z' is not in ops"),
             ({"devices": [{"name": "CPU", "count": 0}]}, "devices[0].count"),
             ({"ops": [{"name": "a", "time": {"CPU": None}}]}, "no device can hold the op 'a'")]
    for change, what in cases:
        f = write(tmp_path, "bad.json", base | change)
        with pytest.raises(InputError, match=None) as e:
            lower(read(f))
        assert what in str(e.value) and str(f) in str(e.value), str(e.value)
    f = write(tmp_path, "junk.json", {"nodes": []})
    with pytest.raises(InputError, match="not a cost graph I know"):
        read(f)
    (tmp_path / "trunc.json").write_text('{"format": "hdp-costgraph", ')
    with pytest.raises(InputError, match="not valid JSON"):
        read(tmp_path / "trunc.json")


@pytest.mark.parametrize("name", ["bert24_inference", "bert24_training", "gnmt_inference", "bert_l-3_inference"])
def test_max_load_agrees_with_the_independent_scorer_on_their_splits(name):
    wf = DATA / f"{name}.json"
    m, p, ml = problem_of_file(wf)
    kinds = [("dp", DATA / "dp" / f"{name}.json")]
    expert = DATA / "expert" / f"{name.replace('_training', '_inference')}_expert.json"
    if expert.exists():  # the inference split applied to training through colour classes, as they do
        kinds.append(("expert", expert))
    for kind, split in kinds:
        dev = read_split(str(split), m, p.devices)
        gd = p.structure.group_devices(dev)
        assert (p.op_devices(gd) == dev).all()
        ours = ML.max_load(p, ml, gd)
        theirs, _ = peer_scoring.score(wf, split, strict=True)
        assert ours == pytest.approx(theirs, rel=1e-12, abs=1e-9)
        assert round(ours, 4) == pytest.approx(THEIR_FIGURES[name, kind], abs=1e-4)


def random_workload(rng, n, k, cap, classes=2, cpus=1, unsupported=0.1):
    """A random DAG in the peer's format: n nodes, k accelerators, a few colour classes."""
    nodes, edges = [], []
    ids = rng.permutation(np.arange(100, 100 + n)).tolist()  # not dense, not ordered
    for i in range(n):
        fpga = float(rng.uniform(0.5, 3))
        nodes.append({"id": ids[i], "supportedOnFpga": bool(rng.random() > unsupported),
                      "cpuLatency": fpga * float(rng.uniform(2, 8)), "fpgaLatency": fpga,
                      "isBackwardNode": 0, "size": float(rng.integers(1, 10))})
    for c in range(classes):
        a, b = rng.choice(n, 2, replace=False)
        nodes[a]["colorClass"] = nodes[b]["colorClass"] = c
    for v in range(1, n):
        for u in rng.choice(v, min(v, int(rng.integers(1, 3))), replace=False):
            edges.append({"sourceId": ids[u], "destId": ids[v]})
    cost = {u: float(rng.uniform(0, 1.5)) for u in ids}
    for e in edges:
        e["cost"] = cost[e["sourceId"]]
    return {"maxSizePerFPGA": cap, "maxFPGAs": k, "maxCPUs": cpus, "nodes": nodes, "edges": edges}


def test_max_load_agrees_with_the_independent_scorer_on_random_splits(tmp_path):
    rng = np.random.default_rng(3)
    for t in range(20):
        doc = random_workload(rng, int(rng.integers(4, 12)), int(rng.integers(1, 4)), 1e9)
        f = write(tmp_path, f"w{t}.json", doc)
        m, p, ml = problem_of_file(f)
        for _ in range(5):
            gd = np.array([rng.choice(np.flatnonzero(p.allowed[g])) for g in range(p.n_groups)])
            load, _ = ML.loads(p, ml, gd)
            s = write(tmp_path, "s.json", split_json(m, p.devices, p.op_devices(gd), load))
            assert ML.max_load(p, ml, gd) == pytest.approx(peer_scoring.score(f, s)[0], rel=1e-12)


def brute_force(p, ml):
    best, arg = np.inf, None
    choices = [np.flatnonzero(p.allowed[g]) for g in range(p.n_groups)]
    for gd in itertools.product(*choices):
        gd = np.array(gd)
        load, mem = ML.loads(p, ml, gd)
        if (mem <= ml.capacity).all() and load.max() < best:
            best, arg = load.max(), gd
    return best, arg


@pytest.mark.parametrize("seed", range(6))
def test_milp_equals_brute_force_with_ties_caps_and_identical_devices(tmp_path, seed):
    rng = np.random.default_rng(100 + seed)
    doc = random_workload(rng, 7, 3, cap=12.0, classes=2)  # ~35 bytes in all: the caps bind
    f = write(tmp_path, "w.json", doc)
    m, p, ml = problem_of_file(f)
    assert ML.symmetry_classes(p, ml) == [[1, 2, 3]]
    want, _ = brute_force(p, ml)
    assert ML.balance_bound(p, ml) <= want * (1 + 1e-9)
    s = MS.optimize(p, ml, time_limit=30)
    assert s.status == "optimal" and s.value == pytest.approx(want, rel=1e-6) and ML.feasible(p, ml, s.group_device)
    for symmetry in (True, False):
        s = ML.solve(p, ml, time_limit=30, symmetry=symmetry)
        assert s.status == "optimal" and ML.feasible(p, ml, s.group_device)
        assert s.value == pytest.approx(want, rel=1e-6)
        assert s.bound == pytest.approx(want, rel=1e-5)


def test_milp_reports_infeasible_caps(tmp_path):
    rng = np.random.default_rng(7)
    doc = random_workload(rng, 6, 2, cap=10.0, classes=0, cpus=0, unsupported=0)
    for nd in doc["nodes"]:
        nd["size"] = 4.0  # 24 bytes, 20 fit
    f = write(tmp_path, "w.json", doc)
    m, p, ml = problem_of_file(f)
    with pytest.raises(InputError, match="no placement fits"):
        ML.solve(p, ml, time_limit=10)


def test_cli_lower_and_place_write_a_split_their_scorer_accepts(tmp_path):
    rng = np.random.default_rng(11)
    f = write(tmp_path, "w.json", random_workload(rng, 12, 3, cap=20.0, classes=3))
    r = run("lower", f, "--format", "dnn-partitioning", "-o", tmp_path / "m.hdp")
    assert r.exit_code == 0, r.output
    for src in (f, tmp_path / "m.hdp"):
        r = run("place", src, "--objective", "throughput", "-o", tmp_path / "split.json")
        assert r.exit_code == 0, r.output
        assert "optimal: max-load" in r.output and "gap 0.00 %" in r.output
        split = json.loads((tmp_path / "split.json").read_text())
        score, _ = peer_scoring.score(f, split, strict=True)  # caps, classes and support hold
        assert split["maxLoad"] == pytest.approx(score)
    r = run("place", f, "--split-format", "hdp", "-o", tmp_path / "own.json")
    own = json.loads((tmp_path / "own.json").read_text())
    assert r.exit_code == 0 and own["format"] == "hdp-split" and own["value"] == pytest.approx(score)
    assert sum(len(d["ops"]) for d in own["devices"]) == 12
    # a chain with costly copies: one accelerator would hold it all, over its cap
    chain = {"maxSizePerFPGA": 25.0, "maxFPGAs": 2, "maxCPUs": 1,
             "nodes": [{"id": i, "supportedOnFpga": 1, "cpuLatency": 10.0, "fpgaLatency": 1.0, "isBackwardNode": 0,
                        "size": 10.0} for i in range(6)],
             "edges": [{"sourceId": i, "destId": i + 1, "cost": 5.0} for i in range(5)]}
    f2 = write(tmp_path, "chain.json", chain)
    r = run("place", f2, "--method", "single:FPGA1", "-o", tmp_path / "one.json")
    assert r.exit_code == 2 and "over its memory of 25 bytes" in r.output and not (tmp_path / "one.json").exists()
    assert len(r.output.strip().splitlines()) == 1
    r = run("place", f2, "--method", "heft", "-o", tmp_path / "heft.json")  # memory-aware on this problem
    assert r.exit_code == 0 and peer_scoring.score(f2, tmp_path / "heft.json", strict=True)[0] > 0
    r = run("place", f2, "-o", tmp_path / "opt.json")
    assert r.exit_code == 0 and peer_scoring.score(f2, tmp_path / "opt.json", strict=True)[0] > 0


@pytest.mark.parametrize("seed", range(4))
def test_chain_split_is_the_best_pipeline(tmp_path, seed):
    """chain_split against every placement whose devices each hold one consecutive block of the
    given order (caps and ties included), and the heuristic never worse than it."""
    rng = np.random.default_rng(200 + seed)
    f = write(tmp_path, "w.json", random_workload(rng, 8, 2, cap=25.0, classes=1))
    m, p, ml = problem_of_file(f)
    order = rng.permutation(p.n_groups)
    pos = np.empty(p.n_groups, np.int64)
    pos[order] = np.arange(p.n_groups)
    want = np.inf
    for gd in itertools.product(*[np.flatnonzero(p.allowed[g]) for g in range(p.n_groups)]):
        gd = np.array(gd)
        blocks = [np.sort(pos[gd == d]) for d in range(p.n_devices)]
        if all(b.size == 0 or b[-1] - b[0] + 1 == b.size for b in blocks):
            load, mem = ML.loads(p, ml, gd)
            if (mem <= ml.capacity).all():
                want = min(want, load.max())
    got = MS.chain_split(p, ml, order=order)
    if not np.isfinite(want):
        assert got is None
        return
    assert ML.feasible(p, ml, got) and ML.max_load(p, ml, got) == pytest.approx(want, rel=1e-9)
    gd, v = MS.heuristic(p, ml, restarts=2)
    assert ML.feasible(p, ml, gd) and v <= ML.max_load(p, ml, MS.chain_split(p, ml)) * (1 + 1e-12)


@pytest.mark.parametrize("name", ["bert24_training", "gnmt_inference", "bert_l-3_inference"])
def test_the_simulator_prices_their_throughput_rule(name, tmp_path):
    """hdp's simulator under the cost graph's throughput objective (send 1, receive 1, the CPU
    free) gives their scorer's max-load, and its memory estimate is the sum of the nodes' sizes."""
    from hdp.placement.simulate import Simulator

    wf = DATA / f"{name}.json"
    m = lower(read(wf))
    p = problem_for(m)
    ml = max_load_data(p, m)
    sim = Simulator(p)
    rng = np.random.default_rng(5)
    splits = [read_split(str(DATA / "dp" / f"{name}.json"), m, p.devices)]
    splits += [p.op_devices(np.array([rng.choice(np.flatnonzero(p.allowed[g])) for g in range(p.n_groups)]))
               for _ in range(3)]
    for dev in splits:
        gd = p.structure.group_devices(dev)
        load, mem = ML.loads(p, ml, gd)
        doc = split_json(m, p.devices, dev, load)
        theirs = peer_scoring.score(wf, doc, strict=False)[0]
        assert sim.cost(gd) == pytest.approx(theirs, rel=1e-9)
        assert sim.loads(gd) == pytest.approx(load, rel=1e-9, abs=1e-12)
        assert sim.memory(gd) == pytest.approx(mem, rel=1e-12)
        assert sim.feasible(gd) == ML.feasible(p, ml, gd)


def test_the_partition_pass_places_a_cost_graph_under_its_own_caps_and_rule(tmp_path):
    """hdp pass partition on a lowered cost graph: --set objective=throughput takes the graph's
    communication rule and caps; the optimal MILP of the pass reaches the brute-force optimum."""
    from hdp.ir.serde import load

    rng = np.random.default_rng(21)
    f = write(tmp_path, "w.json", random_workload(rng, 7, 2, cap=14.0, classes=1))
    m, p, ml = problem_of_file(f)
    assert run("lower", f, "-o", tmp_path / "m.hdp").exit_code == 0
    want, _ = brute_force(p, ml)
    # with --devices, and without: a lowered cost graph's own devices are the target
    for devices in (["--devices", ",".join(p.devices)], []):
        r = run("pass", "partition", tmp_path / "m.hdp", *devices, "--set", "method=optimal",
                "--set", "objective=throughput", "--no-cache", "-o", tmp_path / "p.hdp")
        assert r.exit_code == 0, r.output
        part = load(tmp_path / "p.hdp").partition
        assert part.devices == p.devices
        gd = part.group_device.numpy().astype(np.int64)
        assert ML.feasible(p, ml, gd) and ML.max_load(p, ml, gd) == pytest.approx(want, rel=1e-3)
    r = run("pass", "partition", tmp_path / "m.hdp", "--devices", "CPU", "--no-cache", "-o", tmp_path / "q.hdp")
    assert r.exit_code == 2 and "support was computed for devices" in r.output  # a target given is the target


def test_times_print_in_the_cost_graphs_unit(tmp_path):
    """The peer's README gives its latencies and costs no unit: hdp show prints them bare, not as
    milliseconds; hdp's own format is in seconds (milliseconds shown)."""
    f = write(tmp_path, "hand.json", HAND)
    assert run("lower", f, "-o", tmp_path / "m.hdp").exit_code == 0
    r = run("show", tmp_path / "m.hdp")
    assert r.exit_code == 0 and "CPU: 10 time units (modeled)" in r.output and " ms" not in r.output, r.output
    doc = {"format": "hdp-costgraph", "devices": [{"name": "CPU"}], "ops": [{"name": "a", "time": {"CPU": 0.002}}]}
    g = write(tmp_path, "own.json", doc)
    assert run("lower", g, "-o", tmp_path / "own.hdp").exit_code == 0
    assert "CPU: 2.000 ms (modeled)" in run("show", tmp_path / "own.hdp").output


def test_backward_ops_reach_the_max_load_data(tmp_path):
    """isBackwardNode (theirs) and "backward" (hdp's format) mark a training graph's backward ops."""
    m, p, ml = problem_of_file(write(tmp_path, "hand.json", HAND))
    assert ml.backward.tolist() == [False, False, False, True]  # ops 3, 7, 10, 5: 'mate' is backward
    doc = {"format": "hdp-costgraph", "devices": [{"name": "CPU"}],
           "ops": [{"name": "f", "time": {"CPU": 1.0}, "tie": 1}, {"name": "b", "time": {"CPU": 1.0}, "tie": 1,
                                                                   "backward": True}],
           "tensors": [{"producer": "f", "consumers": ["b"]}]}
    m, p, ml = problem_of_file(write(tmp_path, "own.json", doc))
    assert ml.backward.tolist() == [False, True]
    m, p, ml = problem_of_file(write(tmp_path, "fwd.json", doc | {"ops": [dict(o, backward=False) for o in doc["ops"]]}))
    assert ml.backward is None

"""The profile pass: roofline on modeled devices, PERF_COUNT attribution on real ones."""

import json
import os
import warnings

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.ir.build import graph_from_edges
from hdp.ir.op_identity import layer_names_to_positions
from hdp.ir.openvino_frontend import lower, lower_model
from hdp.ir.types import Array, Op, Support
from hdp.passes.manager import PassManager
from hdp.passes.registry import registry
from hdp.pipeline.schedule import make_pass
from hdp.runtime.costs.profile import (
    attribute,
    coverage,
    node_seconds,
    op_bytes,
    profile_costs,
    roofline,
    zero_cost_ops,
)
from hdp.target.target import Device, Link, Target, load_target


def _save(model, path):
    import openvino as ov

    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def _matmul_model():
    """x[1,64] @ W[64,32] -> Result: 4096 FLOPs, 256 + 8192 bytes in, 128 bytes out (f32)."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 64], np.float32, name="x")
    w = ops.constant(np.ones((64, 32), np.float32), name="w")
    return ov.Model([ops.result(ops.matmul(x, w, False, False, name="mm"), name="out")], [x], "mm")


def _conv_model():
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 4, 16, 16], np.float32, name="x")
    c = ops.convolution(x, ops.constant(rng.standard_normal((8, 4, 3, 3)).astype(np.float32), name="w"),
                        [1, 1], [1, 1], [1, 1], [1, 1], name="conv")
    a = ops.add(c, ops.constant(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), name="bias"), name="add")
    r = ops.relu(a, name="relu")
    p = ops.max_pool(r, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2], name="pool").output(0)
    f = ops.reshape(p, ops.constant(np.array([1, -1], np.int64), name="shape"), False, name="flat")
    m = ops.matmul(f, ops.constant(rng.standard_normal((512, 10)).astype(np.float32), name="fc_w"),
                   False, False, name="fc")
    s = ops.softmax(m, 1, name="prob")
    return ov.Model([ops.result(s, name="out")], [x], "conv")


@pytest.fixture(scope="module")
def mm(tmp_path_factory):
    return lower(_save(_matmul_model(), tmp_path_factory.mktemp("mm") / "mm.xml"))


@pytest.fixture(scope="module")
def conv(tmp_path_factory):
    return lower(_save(_conv_model(), tmp_path_factory.mktemp("conv") / "conv.xml"))


def _modeled(**kw):
    d = dict(name="M", kind="modeled", peak_flops={"f32": 1e9, "f16": 4e9}, precision="f32",
             memory_bandwidth=1e9, op_overhead=1e-6, efficiency=0.5)
    d.update(kw)
    return Device(**d)


def test_roofline_of_a_known_matmul(mm):
    names = [op.name for op in mm.graph.ops]
    i = names.index("mm")
    assert mm.graph.ops[i].flops == 4096
    assert op_bytes(mm.graph)[i] == 256 + 64 * 32 * 4 + 128
    t = roofline(mm.graph, _modeled())
    # memory bound: 8576 B / 1 GB/s = 8.576 us > 4096 / 0.5 GFLOP/s = 8.192 us; + 1 us overhead
    assert t[i] == pytest.approx(8.576e-6 + 1e-6)
    assert t[[names.index(n) for n in ("x", "w", "out")]].tolist() == [0, 0, 0]
    # f16: float tensors count 2 bytes (4288 B -> 4.288 us); compute 4096 / 2e9 = 2.048 us
    assert roofline(mm.graph, _modeled(precision="f16"))[i] == pytest.approx(4.288e-6 + 1e-6)
    # compute bound with a slow ALU: 4096 / (1e8 * 0.5) = 81.92 us
    slow = _modeled(peak_flops={"f32": 1e8})
    assert roofline(mm.graph, slow)[i] == pytest.approx(81.92e-6 + 1e-6)


def test_zero_cost_ops_include_folded_constants():
    ops = [Op("w", "Constant", ((4,),), ("f16",)), Op("cvt", "Convert", ((4,),), ("f32",), flops=4),
           Op("x", "Parameter", ((4,),), ("f32",)), Op("shape", "ShapeOf", ((1,),), ("i64",)),
           Op("add", "Add", ((4,),), ("f32",), flops=4), Op("out", "Result", (), ())]
    g = graph_from_edges(ops, [0, 1, 2, 2, 4], [1, 4, 4, 3, 5], [8, 16, 16, 16, 16])
    assert zero_cost_ops(g).tolist() == [True, True, True, True, False, True]


def _graph(*specs):
    """Ops (name, type, flops, n_out) chained in order."""
    ops = [Op(n, t, ((k,),), ("f32",), flops=f) for n, t, f, k in specs]
    n = len(ops)
    return graph_from_edges(ops, list(range(n - 1)), list(range(1, n)), [16] * (n - 1))


def _node(original, t, preds=(), executed=True, graph=None):
    """A runtime node as the worker reports it: ``ops`` are the positions it maps the names to."""
    index = {op.name: [i] for i, op in enumerate(graph.ops)} if graph is not None else {}
    return {"name": original or "reorder", "original": original, "preds": list(preds),
            "ops": layer_names_to_positions(original, index), "avg_warm": 0.0, "avg_all": t,
            "executed": executed}


def test_attribution_splits_fused_nodes_by_flops_and_follows_reorders():
    g = _graph(("x", "Parameter", 0, 4), ("conv", "Convolution", 900, 4), ("relu", "Relu", 100, 4),
               ("mul", "Multiply", 10, 4), ("fc", "MatMul", 1000, 4), ("out", "Result", 0, 4))
    nodes = [_node("x", 0.0, executed=False, graph=g),
             _node("", 10e-6, [0], graph=g),                   # an input Reorder: goes to its consumer
             _node("conv,relu", 100e-6, [1], graph=g),         # fused: split 900:100
             _node("mul", 20e-6, [2], graph=g),                # a MatMul fused into a node named after mul
             _node("out", 0.0, [3], executed=False, graph=g)]
    t, lost = attribute(g, nodes, warmup=0, runs=1)
    half = 0.5e-6  # truncation of each run's microseconds
    assert lost == 0
    assert t[1] == pytest.approx((110e-6 + 2 * half) * 0.9)
    assert t[2] == pytest.approx((110e-6 + 2 * half) * 0.1)
    assert t[3] + t[4] == pytest.approx(20e-6 + half) and t[4] > 50 * t[3]  # fc absorbed by mul's node
    assert t[0] == 0 and t[5] == 0


def test_node_seconds_removes_the_warmup_from_running_averages():
    # warm-up took 1000 us; then 10 runs of 20 us: the counter reads 1000 and then (1000+200)/11
    node = {"avg_warm": 1000e-6, "avg_all": int(1200 / 11) * 1e-6, "executed": True}
    assert node_seconds([node], warmup=1, runs=10)[0] == pytest.approx(20e-6, abs=1.5e-6)


def test_a_kernel_that_reads_0_us_counts_as_run():
    """The CPU plugin reports NOT_RUN for a node whose average reads 0 us: a fused node of a tiny
    Relu/Add chain did so in warm-up and timed runs alike (tests/test_chunks.py's whole-model
    profile then gave some of its ops no time, now and then). A kernel counts as run; an in-place
    node (``unknown_*``) and an optimised-out one do not."""
    import openvino as ov

    from hdp.runtime.measure.worker import _counters

    def info(name, status, exec_type, us=0):
        p = ov.ProfilingInfo()
        p.node_name, p.status, p.exec_type = name, getattr(ov.ProfilingInfo.Status, status), exec_type
        p.real_time = __import__("datetime").timedelta(microseconds=us)
        return p

    class Req:
        profiling_info = [info("fused", "NOT_RUN", "jit_avx512_f32"), info("ran", "EXECUTED", "jit_avx512_f32", 3),
                          info("reshape", "NOT_RUN", "unknown_f32"), info("gone", "OPTIMIZED_OUT", "undef"),
                          info("x", "NOT_RUN", "unknown_f32")]

    got = _counters(Req())
    assert got == {"fused": (0.0, True), "ran": (3e-6, True), "reshape": (0.0, False), "gone": (0.0, False),
                   "x": (0.0, False)}
    half = 0.5e-6  # the truncation floor of a run node: the fused node's ops get time again
    nodes = [{"avg_warm": got["fused"][0], "avg_all": got["fused"][0], "executed": got["fused"][1]}]
    assert node_seconds(nodes, warmup=1, runs=3)[0] == pytest.approx(half)


def test_modeled_profile_and_support_inf(conv):
    t = load_target("i9-flex170")
    mask = np.ones((conv.graph.n_ops, 2), bool)
    i = [op.name for op in conv.graph.ops].index("pool")
    mask[i, 1] = False
    m = conv.replace(support=Support(devices=t.device_names, mask=Array.of(mask)))
    out = PassManager([make_pass("profile", {"target": t})]).run(m)
    c = out.costs
    assert c.kind == ("modeled", "modeled") and c.devices == ("CPU", "GPU")
    tt = c.op_time.numpy()
    assert np.isinf(tt[i, 1]) and np.isfinite(tt[i, 0])
    assert (c.link_latency, c.link_bandwidth, c.subgraph_overhead) == (t.link.latency, t.link.bandwidth,
                                                                        t.link.subgraph_overhead)
    assert c.measured_total[0] == pytest.approx(tt[:, 0].sum())
    assert "profile" in registry()


def test_measured_profile_on_the_virtual_target(conv):
    t = load_target("virtual")
    out = PassManager([make_pass("support", {"target": t}),
                       make_pass("profile", {"target": t, "runs": 5})]).run(conv)
    c = out.costs
    assert c.kind == ("measured", "measured") and len(c.measured_total) == 2
    tt = c.op_time.numpy()
    free = zero_cost_ops(conv.graph)
    for i, op in enumerate(conv.graph.ops):
        if op.flops > 0:
            assert np.all(np.isfinite(tt[i])) and np.all(tt[i] > 0), op.name
        if free[i]:
            assert np.all(tt[i] == 0), op.name
    assert all(t > 0 for t in c.measured_total)
    assert coverage(c) == tuple(tt[:, j].sum() / c.measured_total[j] for j in range(2))


def test_profile_info_and_unsupported_device(conv):
    raw, raw_info = profile_costs(conv, load_target("virtual"), runs=3, denoise=False)
    assert raw.op_se is None and [raw_info[d]["sum"] for d in raw.devices] == pytest.approx(
        raw.op_time.numpy().sum(axis=0).tolist())
    costs, info = profile_costs(conv, load_target("virtual"), runs=3)
    t = costs.op_time.numpy()
    for j, d in enumerate(("CPU", "CPU_B")):
        i = info[d]
        # the profile's own correction: every op on one device simulates at the median wall time
        # of the profile's runs (pooled over the devices of one kind)
        wall = costs.measured_total[j]
        assert t[:, j].sum() == pytest.approx(max(wall - costs.subgraph_overhead, wall / 2))
        assert costs.measured_total[j] == i["total"] or i["pooled"]
        assert i["unattributed"] == 0 and i["coverage"] == pytest.approx(i["sum"] / i["mean"])
        # every counted microsecond lies inside an inference, so the per-op sum cannot exceed the
        # mean wall time (up to the 0.5 us rounding per node). The lower side is not asserted: on
        # a loaded 2-core host the wall time swings far more than the counters (module docstring)
        assert 0 < i["coverage"] <= 1.2
    npu = Target(name="npu", devices=[Device(name="NPU")], link=Link())
    with pytest.raises(Exception, match="'NPU' of target 'npu' is not present on this host"):
        profile_costs(conv, npu)


def test_profile_command(conv, tmp_path):
    out = tmp_path / "costs.json"
    r = CliRunner().invoke(main, ["profile", conv.meta["source"], "--target", "i9-flex170", "-o", str(out),
                                  "--no-cache"])
    assert r.exit_code == 0, r.output
    doc = json.loads(out.read_text())
    assert [d["name"] for d in doc["devices"]] == ["CPU", "GPU"]
    fc = next(o for o in doc["ops"] if o["name"] == "fc")
    assert fc["type"] == "MatMul" and fc["time"]["GPU"] > 0
    assert "costliest ops" in r.output and "fc" in r.output


def test_modeled_supported_ops_without_a_support_table(mm):
    t = Target(name="t", devices=[_modeled(), _modeled(name="N", supported_ops=["Add"])])
    costs, _ = profile_costs(mm, t)
    tt = costs.op_time.numpy()
    i = [op.name for op in mm.graph.ops].index("mm")
    assert np.isfinite(tt[i, 0]) and np.isinf(tt[i, 1])
    assert np.isfinite(tt[:, 1]).sum() == mm.graph.n_ops - 1  # Parameter/Constant/Result stay free


# --------------------------------------------------------------------------- one request, rounds, budget


def test_one_request_profiles_every_device_in_interleaved_rounds(conv):
    from hdp.runtime.measure.measurer import Measurer

    with Measurer(conv, load_target("virtual"), cache=False) as m:
        full = m.profile(["CPU", "CPU_B"], runs=4, warmup=1)  # no time budget: every round
        quick = m.profile(["CPU", "CPU_B"], runs=10, warmup=1, seconds=1e-9, min_runs=2)
        capped = m.profile(["CPU_B"], runs=3, warmup=2, seconds=1e-9, min_runs=5)  # min_runs capped by runs
    assert [d["device"] for d in full["devices"]] == ["CPU", "CPU_B"]
    assert [len(d["times"]) for d in full["devices"]] == [4, 4]
    assert [len(d["times"]) for d in quick["devices"]] == [2, 2]
    assert [len(d["times"]) for d in capped["devices"]] == [3] and capped["devices"][0]["warmup"] == 2
    assert set(full["seconds"]) == {"prepare", "timed", "nodes", "outputs"}
    for d in full["devices"]:
        assert d["compile_seconds"] > 0 and d["nodes"] and all(t > 0 for t in d["times"])
    # rounds alternate the order (CPU, CPU_B), (CPU_B, CPU), ...: each device sees the same load
    runs = sorted((t, d["device"]) for d in full["devices"] for t in d["starts"])
    assert [name for _, name in runs] == ["CPU", "CPU_B", "CPU_B", "CPU", "CPU", "CPU_B", "CPU_B", "CPU"]


def test_profile_costs_budget_stages_and_bad_options(conv):
    t = load_target("virtual")
    stages = {}
    costs, info = profile_costs(conv, t, runs=10, seconds=0.0, stages=stages)
    assert [info[d]["runs"] for d in ("CPU", "CPU_B")] == [10, 10]
    assert set(stages) == {"start", "prepare", "timed", "nodes", "outputs", "close", "attribute", "total"}
    assert stages["total"] >= stages["start"] + stages["prepare"] + stages["timed"]
    _, info = profile_costs(conv, t, runs=10, seconds=1e-9, min_runs=3)
    assert [info[d]["runs"] for d in ("CPU", "CPU_B")] == [3, 3]
    for bad in ({"seconds": -1.0}, {"min_runs": 0}, {"runs": 0}):
        with pytest.raises(InputError, match="profile: runs and min_runs must be >= 1"):
            profile_costs(conv, t, **bad)


def test_profile_failure_names_the_device(conv, monkeypatch):
    from hdp.runtime.measure.protocol import FAULT_ENV

    monkeypatch.setenv(FAULT_ENV, "raise")
    with pytest.raises(InputError, match="profiling on CPU, CPU_B: .*injected fault"):
        profile_costs(conv, load_target("virtual"))


def test_two_processes_profiling_one_model_share_a_cache_safely(conv, tmp_path):
    """Two ``hdp profile`` at once on the same model and cache: both succeed, every cache entry is
    whole, and a third run reads what one of them wrote."""
    import subprocess
    import sys
    from pathlib import Path

    import hdp
    from hdp.passes.cache import PassCache

    root = str(Path(hdp.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=root)
    cache = tmp_path / "cache"

    def run(k):
        return subprocess.Popen([sys.executable, "-m", "hdp", "profile", conv.meta["source"], "--target", "virtual",
                                 "-o", str(tmp_path / f"c{k}.json"), "--cache-dir", str(cache), "--runs", "3",
                                 "--top", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    procs = [run(0), run(1)]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out.decode()
    entries = sorted(cache.glob("??/*.hdp"))
    assert entries and not list(cache.glob("??/.*.tmp"))  # no leftovers of the atomic writes
    pc = PassCache(cache)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a corrupt entry would warn
        assert all(pc.get(e.stem) is not None for e in entries)
    third = run(2)
    out, _ = third.communicate(timeout=300)
    assert third.returncode == 0, out.decode()
    docs = [json.loads((tmp_path / f"c{k}.json").read_text()) for k in range(3)]
    assert docs[2] in (docs[0], docs[1])  # read from the cache, not profiled again
    assert sorted(cache.glob("??/*.hdp")) == entries


def test_worker_exits_cleanly_at_end_of_input(conv):
    from hdp.runtime.measure import protocol as P
    from hdp.runtime.measure.worker_client import WorkerProcess
    from hdp.target.target import Target

    w = WorkerProcess()
    w.start()
    reply = w.call(P.Load(xml=conv.meta["source"], spec=conv.meta["specialisation"],
                          target=Target(name="virtual", devices=[])), 60)
    assert isinstance(reply, P.Loaded)
    proc = w.proc
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    w.close()


def test_attribution_of_homeless_nodes_orphans_and_duplicates():
    g = _graph(("x", "Parameter", 0, 4), ("a", "Relu", 10, 4), ("b", "MatMul", 1000, 4), ("c", "Relu", 10, 4),
               ("out", "Result", 0, 4))
    # node 0 names a twice (counted once); b is named by no node and has no named consumer's node
    # before its producer's: c's node names c, so b joins c's node (its consumer)
    nodes = [_node("a,a", 10e-6, graph=g),
             _node("c", 30e-6, [0], graph=g),
             _node("", 5e-6, [1], graph=g),      # after every named node: goes upstream, to c's node
             _node("", 7e-6, [], graph=g)]       # connected to nothing: lost
    t, lost = attribute(g, nodes, warmup=0, runs=1)
    half = 0.5e-6
    assert t[1] == pytest.approx(10e-6 + half)
    assert t[2] + t[3] == pytest.approx(30e-6 + 5e-6 + 2 * half) and t[2] / t[3] == pytest.approx(100)
    assert lost == pytest.approx(7e-6 + half)
    # an orphan whose consumers nobody names joins its producer's node
    nodes = [_node("a", 10e-6, graph=g), _node("", 0.0, [0], executed=False, graph=g)]
    t, lost = attribute(g, nodes, warmup=0, runs=1)
    assert lost == 0 and t[1:4].sum() == pytest.approx(10e-6 + half) and t[2] > t[1]
    assert attribute(g, [], 0, 1)[0].tolist() == [0.0] * 5


def test_modeled_gather_reads_only_the_rows_it_gathers():
    """An embedding lookup of 3 tokens reads 3 rows of its table, not the table (a mixture of experts'
    top-k experts likewise); gathering more rows than the table has reads the table once."""
    import openvino as ov
    from openvino import opset13 as ops

    table = ops.constant(np.zeros((1000, 64), np.float32))
    for tokens, read in ((3, 3 * 64 * 4), (4000, 1000 * 64 * 4)):
        ids = ops.parameter([1, tokens], ov.Type.i64, name="ids")
        g = ops.gather(table, ids, ops.constant(np.int64(0)))
        m = lower_model(ov.Model([ops.result(g)], [ids], "emb"))
        i = next(k for k, op in enumerate(m.graph.ops) if op.type == "Gather")
        assert op_bytes(m.graph)[i] == read + tokens * 8 + 8 + tokens * 64 * 4  # data, indices, axis; output

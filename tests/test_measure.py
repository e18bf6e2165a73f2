"""Measuring placements with real HETERO compiles on the virtual target (CPU + CPU_B)."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Array, Placement
from hdp.runtime.measure import protocol as P
from hdp.runtime.measure.cache import MeasureCache, cache_scope, measure_cache_dir
from hdp.runtime.measure.measurement import Candidate, MeasureError, Measurement, placed, unplaced
from hdp.runtime.measure.measurer import Measurer, measure_plain
from hdp.runtime.measure.protocol import FAULT_ENV
from hdp.runtime.measure.stats import SequentialPlan
from hdp.runtime.placed.model import write_placed
from hdp.runtime.serve.report import compare_with_plain, plain_from_heads, plain_report
from hdp.target.target import Device, Target, load_target

RUNS = 3
#: short interleaved comparisons for tests (no timing is asserted)
QUICK = SequentialPlan(min_rounds=6, max_rounds=40, max_seconds=5.0)


def _tiny_model():
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, 8, 8], np.float32, name="x")
    w = ops.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), name="w")
    c = ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1], name="conv")
    r = ops.relu(c, name="relu")
    f = ops.reshape(r, ops.constant(np.array([1, -1], np.int64), name="shape"), False, name="flat")
    w2 = ops.constant(rng.standard_normal((512, 16)).astype(np.float32), name="w2")
    m = ops.matmul(f, w2, False, False, name="fc")
    s = ops.softmax(m, 1, name="prob")
    return ov.Model([ops.result(s, name="out")], [x], "tiny")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    import openvino as ov

    d = tmp_path_factory.mktemp("tiny")
    xml = d / "tiny.xml"
    ov.save_model(_tiny_model(), str(xml), compress_to_fp16=False)
    return lower(xml)


@pytest.fixture(scope="module")
def virtual():
    return load_target("virtual")


def _split(module):
    """First half of the ops on CPU, the rest on CPU_B."""
    n = module.graph.n_ops
    dev = np.zeros(n, np.int16)
    dev[n // 2:] = 1
    return dev


def test_measurement_statistics():
    m = Measurement(what="x", target="t", runs=5, warmup=0, times=(5.0, 1.0, 3.0, 2.0, 4.0))
    assert (m.median, m.min, m.max, m.q1, m.q3) == (3.0, 1.0, 5.0, 2.0, 4.0)
    assert m.stdev == pytest.approx(np.std([1, 2, 3, 4, 5], ddof=1))
    d = m.to_dict()
    assert d["ok"] and d["iqr"] == 2.0 and "latency median 3000.000 ms" in m.summary()
    bad = Measurement(what="x", target="t", runs=5, warmup=0, error="boom")
    assert not bad.ok and np.isnan(bad.median) and "error: boom" == bad.summary()


def test_measure_split_and_plain_reuse_one_worker(tiny, virtual, tmp_path):
    with Measurer(tiny, virtual, runs=RUNS, warmup=1, cache=tmp_path) as m:
        a = m.measure(_split(tiny))
        pid = m._worker.proc.pid
        b = m.measure(np.zeros(tiny.graph.n_ops, np.int16))
        p = m.measure_unplaced("CPU_B")
        assert m._worker.proc.pid == pid  # one process served every request
        lat = m.latency(["CPU_B"] * tiny.graph.n_ops)
    again = measure_plain(tiny, virtual, "CPU_B", runs=RUNS, warmup=1, cache=tmp_path)
    assert again.cached and again.times == p.times
    assert a.ok and a.what == "HETERO:CPU,CPU_B" and len(a.times) == RUNS
    assert a.min <= a.median <= a.max and a.compile_seconds > 0
    assert b.ok and b.what == "HETERO:CPU"
    assert p.ok and p.what == "plain:CPU_B"
    assert lat > 0


def test_cache_hits_and_key(tiny, virtual, tmp_path):
    dev = _split(tiny)
    with Measurer(tiny, virtual, runs=RUNS, warmup=0, cache=tmp_path) as m:
        first = m.measure(dev)
    assert not first.cached
    with Measurer(tiny, virtual, runs=RUNS, warmup=0, cache=tmp_path) as m:
        again = m.measure(dev)
        assert m._worker is None  # served from the cache, no process started
    assert again.cached and again.times == first.times
    assert len(list(tmp_path.rglob("*.json"))) == 1
    with Measurer(tiny, virtual, runs=RUNS + 1, warmup=0, cache=tmp_path) as m:
        other = m.measure(dev)
    assert not other.cached and len(other.times) == RUNS + 1
    assert len(list(tmp_path.rglob("*.json"))) == 2


def test_cache_discards_corrupt_and_never_stores_errors(tmp_path):
    c = MeasureCache(tmp_path)
    good = Measurement(what="x", target="t", runs=1, warmup=0, times=(1e-3,))
    c.put("ab12", good)
    c.put("cd34", Measurement(what="x", target="t", runs=1, warmup=0, error="boom"))
    assert c.get("ab12").cached and c.get("cd34") is None
    path = next(tmp_path.rglob("ab12.json"))
    path.write_bytes(b"{corrupt")
    assert c.get("ab12") is None and not path.exists()


@pytest.mark.parametrize("fault, expect", [("crash", "SIGSEGV"), ("hang", "timed out after 0.5 s")])
def test_crash_or_hang_is_an_error_sample_then_recovers(tiny, virtual, monkeypatch, fault, expect):
    dev = _split(tiny)
    with Measurer(tiny, virtual, runs=RUNS, warmup=0, timeout=0.5, cache=False) as m:
        monkeypatch.setenv(FAULT_ENV, fault)
        bad = m.measure(dev)
        assert not bad.ok and expect in bad.error and "HETERO:CPU,CPU_B" in bad.error
        assert not m._worker.alive
        monkeypatch.delenv(FAULT_ENV)
        m.timeout = 120.0
        good = m.measure(dev)  # a fresh worker takes over
    assert good.ok and len(good.times) == RUNS


def test_compile_error_keeps_the_worker(tiny, virtual, monkeypatch):
    with Measurer(tiny, virtual, runs=RUNS, warmup=0, cache=False) as m:
        monkeypatch.setenv(FAULT_ENV, "raise")
        m.loaded()  # the worker starts with the fault armed
        pid = m._worker.proc.pid
        bad = m.measure_unplaced("CPU")
        assert not bad.ok and "injected fault" in bad.error
        with pytest.raises(MeasureError, match="injected fault"):
            m.latency(_split(tiny))
        assert m._worker.alive and m._worker.proc.pid == pid


def test_absent_and_unknown_and_modeled_devices(tiny):
    npu = Target(name="npu-box", devices=[Device(name="CPU", config={"INFERENCE_PRECISION_HINT": "f32"}),
                                          Device(name="NPU")])
    n = tiny.graph.n_ops
    with Measurer(tiny, npu, runs=1, warmup=0, cache=False) as m:
        assert m.measure(np.zeros(n, np.int16)).ok  # the CPU alone is fine
        with pytest.raises(InputError, match="'NPU' of target 'npu-box' is not present on this host"):
            m.measure(np.ones(n, np.int16))
        with pytest.raises(InputError, match="has no device 'GPU'"):
            m.measure(["GPU"] * n)
        with pytest.raises(InputError, match="device index 5"):
            m.measure(np.full(n, 5, np.int16))
        with pytest.raises(InputError, match="placement has 3 ops"):
            m.measure(np.zeros(3, np.int16))
    with Measurer(tiny, "i9-flex170", cache=False) as m:
        with pytest.raises(InputError, match="modeled"):
            m.measure(np.zeros(n, np.int16))


def test_ov_model_source(virtual):
    model = _tiny_model()
    n = len(model.get_ordered_ops())
    with Measurer(model, virtual, runs=RUNS, warmup=0, cache=False) as m:
        r = m.measure(["CPU"] * (n - 2) + ["CPU_B"] * 2)
        tmp = m._tmp
    assert r.ok and r.what == "HETERO:CPU,CPU_B" and not os.path.exists(tmp)


def _placed(tiny, virtual, path):
    pl = Placement(method="test", devices=virtual.device_names, device_of=Array.of(_split(tiny), np.int16))
    return write_placed(tiny.replace(placement=pl), path, virtual), tiny.replace(placement=pl)


def test_evaluate_command(tiny, virtual, tmp_path):
    xml, _ = _placed(tiny, virtual, tmp_path / "placed.xml")
    run = CliRunner().invoke
    r = run(main, ["evaluate", str(xml), "--runs", "6", "--warmup", "0", "--plain", "CPU", "--json",
                   "--max-seconds", "3", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    placed_ = out["placed"]
    assert placed_["ok"] and placed_["what"] == "HETERO:CPU,CPU_B" and len(placed_["times"]) >= 6
    assert out["plain"]["what"] == "plain:CPU" and len(out["plain"]["times"]) == len(placed_["times"])
    c = out["comparison"]
    assert c["verdict"] in ("faster", "slower", "equal") and c["a"] == "plain CPU" and c["b"] == "placement"
    assert c["rounds"] == len(placed_["times"]) and not c["same_graph"]
    assert out["speedup_vs_plain"] == pytest.approx(1 / c["ratio"])
    assert not (tmp_path / "c").exists()  # interleaved comparisons are never cached
    r = run(main, ["evaluate", str(xml), "--runs", "3", "--warmup", "0", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0 and "HETERO:CPU,CPU_B on virtual: latency median" in r.output
    assert len(list((tmp_path / "c" / "measure").rglob("*.json"))) == 1
    r = run(main, ["evaluate", str(xml), "--runs", "3", "--warmup", "0", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0 and "[cached]" in r.output
    r = run(main, ["evaluate", str(xml), "--runs", "6", "--warmup", "0", "--plain", "CPU_B",
                   "--max-seconds", "2", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "placement vs plain CPU_B: " in r.output and "interleaved over" in r.output
    r = run(main, ["evaluate", str(xml), "--devices", "CPU"])
    assert r.exit_code == 2 and "placed on 'CPU_B', which target 'CPU' does not have" in r.output
    r = run(main, ["evaluate", str(xml), "--target", "i9-flex170"])
    assert r.exit_code == 2 and "CPU_B" in r.output
    src = tiny.meta["source"]
    r = run(main, ["evaluate", src, "--target", "virtual"])
    assert r.exit_code == 2 and "not a placed model" in r.output
    r = run(main, ["evaluate", src, "--target", "virtual", "--plain", "CPU_B", "--runs", "2", "--no-cache"])
    assert r.exit_code == 0 and "plain:CPU_B on virtual: latency median" in r.output


def test_evaluate_single_device_placement_says_same_graph(tiny, virtual, tmp_path):
    pl = Placement(method="t", devices=virtual.device_names,
                   device_of=Array.of(np.ones(tiny.graph.n_ops, np.int16), np.int16))
    xml = write_placed(tiny.replace(placement=pl), tmp_path / "all_b.xml", virtual)
    r = CliRunner().invoke(main, ["evaluate", str(xml), "--runs", "6", "--warmup", "1", "--plain", "CPU_B",
                                  "--max-seconds", "3", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "(all ops on CPU_B: same graph as the plain CPU_B compile)" in r.output
    assert "placement vs plain CPU_B: faster" not in r.output


# --------------------------------------------------------------------------- head to head


def test_head_to_head_interleaves_in_one_worker(tiny, virtual):
    n = tiny.graph.n_ops
    with Measurer(tiny, virtual, warmup=1, cache=False) as m:
        m.loaded()
        pid = m._worker.proc.pid
        h = m.head_to_head([unplaced("CPU"), unplaced("CPU_B"), placed(_split(tiny), name="split"),
                            placed(["CPU"] * n, name="all on CPU")], QUICK)
        assert m._worker.proc.pid == pid and not m._worker.alive is False
        gone = m._worker.call(P.Rounds(handles=[0], orders=[[0]]), 10)
        assert isinstance(gone, P.Failed) and "no prepared candidate 0" in gone.error  # released
    assert h.names == ("plain CPU", "plain CPU_B", "split", "all on CPU") and h.ok == [0, 1, 2, 3]
    assert 6 <= h.rounds <= 40 and h.reason and h.seconds > 0
    assert [x.what for x in h.measurements] == ["plain:CPU", "plain:CPU_B", "HETERO:CPU,CPU_B", "HETERO:CPU"]
    assert all(len(x.times) == h.rounds and x.compile_seconds > 0 and x.warmup == 1 for x in h.measurements)
    assert h.same_graph("plain CPU", "all on CPU") and not h.same_graph("plain CPU", "plain CPU_B")
    assert not h.same_graph("split", "plain CPU")
    c = h.compare("plain CPU", "all on CPU")
    assert c.same_graph and c.verdict != "faster" and c.rounds == h.rounds
    sel = h.select(preference=["plain CPU_B", "plain CPU"])
    assert sel.winner in sel.tied and sel.fastest in sel.tied and len(sel.comparisons) == 3
    assert h.header().startswith(f"measured interleaved, {h.rounds} rounds in ")


def test_compare_and_best_of(tiny, virtual, tmp_path):
    n = tiny.graph.n_ops
    cands = [unplaced("CPU"), unplaced("CPU_B"), placed(_split(tiny), name="split"),
             placed(["CPU_B"] * n, name="all on CPU_B")]
    with Measurer(tiny, virtual, runs=RUNS, warmup=1, cache=tmp_path) as m:
        c = m.compare(unplaced("CPU"), unplaced("CPU_B"), QUICK)
        assert c.a == "plain CPU" and c.b == "plain CPU_B" and c.rounds >= 6
        best = m.best_of(cands, preference=[1, 0], top=1, plan=QUICK)  # screens, then 2 finalists
        given = m.best_of(cands, preference=[1], top=1, plan=QUICK, estimates=[3.0, 9.0, 1.0, 9.0])
    assert len(best.estimates) == 4 and all(np.isfinite(best.estimates))
    assert 1 in best.finalists and len(best.finalists) <= 2 and best.winner in best.finalists
    assert given.finalists == (2, 1) and given.winner in (1, 2)
    assert given.selection.reason and "kept " in given.text()
    assert len(list(tmp_path.rglob("*.json"))) == 4  # the screening measurements are cached


def test_head_to_head_failures_and_mistakes(tiny, virtual, monkeypatch):
    with Measurer(tiny, virtual, warmup=0, cache=False) as m:
        with pytest.raises(InputError, match="not both or neither"):
            m.head_to_head([Candidate(name="x")])
        with pytest.raises(InputError, match="names must differ"):
            m.head_to_head([unplaced("CPU"), unplaced("CPU")])
        with pytest.raises(InputError, match="has no device 'GPU'"):
            m.head_to_head([unplaced("GPU")])
        monkeypatch.setenv(FAULT_ENV, "raise")
        m.close()
        h = m.head_to_head([unplaced("CPU"), placed(_split(tiny))], QUICK)
        assert h.ok == [] and all("injected fault" in x.error for x in h.measurements)
        with pytest.raises(MeasureError, match="injected fault"):
            h.compare(0, 1)
        with pytest.raises(MeasureError, match="injected fault"):
            h.select()
        monkeypatch.setenv(FAULT_ENV, "crash")
        m.close()
        h = m.head_to_head([unplaced("CPU"), unplaced("CPU_B")], QUICK)
        assert h.ok == [] and all("SIGSEGV" in x.error for x in h.measurements)
        monkeypatch.delenv(FAULT_ENV)
        m.close()
        h = m.head_to_head([unplaced("CPU"), unplaced("CPU_B")], QUICK)  # a fresh worker takes over
        assert h.ok == [0, 1]


# --------------------------------------------------------------------------- compare_with_plain


def test_single_device_placement_is_never_faster_than_its_plain_compile(tiny, virtual):
    n = tiny.graph.n_ops
    for dev, idx in (("CPU_B", 1), ("CPU", 0)):
        pl = Placement(method="t", devices=virtual.device_names, device_of=Array.of(np.full(n, idx), np.int16))
        res = compare_with_plain(tiny.replace(placement=pl), virtual, plan=QUICK, warmup=1)
        same = res.comparisons[dev]
        assert same.same_graph and same.verdict != "faster", res.text
        assert not res.comparisons[{"CPU": "CPU_B", "CPU_B": "CPU"}[dev]].same_graph
        assert f"all ops on {dev}: same graph as the plain {dev} compile" in res.text
        assert f"the placement is the plain {dev} compile through HETERO" in res.text
        assert "beats every plain compile" not in res.text and f"plain {dev} (the same graph) " in res.verdict
        assert "default plain CPU compile" in res.verdict and set(res.defaults) == {"CPU"}


def test_compare_with_plain_mixed_placement(tiny, virtual, tmp_path):
    _, split = _placed(tiny, virtual, tmp_path / "placed.xml")
    res = compare_with_plain(split, virtual, plan=QUICK, warmup=1)
    assert set(res.comparisons) == {"CPU", "CPU_B"} and str(res) == res.text
    lines = res.text.splitlines()
    assert lines[0].startswith("measured interleaved,") and "medians: placement" in lines[0]
    for dev, c in res.comparisons.items():
        assert f"placement vs plain {dev}: {c.describe(level=False)}" in lines and not c.same_graph
    # the one verdict: against this host's default plain compile, beside the target's own devices
    assert lines[-1] == res.verdict and res.verdict.startswith("verdict: ")
    assert "the default plain CPU compile (" in res.verdict and "beside the target's devices: plain CPU " in res.verdict
    assert any(x.startswith("default plain CPU compile: OpenVINO's defaults (") for x in lines)
    if res.head.loaded:
        assert "no claim" in res.verdict and "consider --method" not in res.verdict
    elif all(c.verdict == "faster" for c in res.comparisons.values()):
        assert "the placement beats every plain compile beyond the threshold" in res.text
    else:
        assert "does not beat plain" in res.text and "consider --method single:" in res.verdict
    assert "not measured" in compare_with_plain(split.replace(placement=Placement(
        method="t", devices=("CPU", "GPU"), device_of=Array.of(np.zeros(tiny.graph.n_ops), np.int16))),
        "i9-flex170").text


def test_compare_with_plain_runs_a_concurrent_placement_by_the_executor(tiny, virtual, tmp_path):
    """compile --execution concurrent compares the placement as the executor runs it, not HETERO."""
    _, split = _placed(tiny, virtual, tmp_path / "placed.xml")
    res = compare_with_plain(split, virtual, plan=QUICK, warmup=1, execution="concurrent")
    assert res.head.measurements[0].what.startswith("concurrent:"), res.head.measurements[0].what
    assert compare_with_plain(split, virtual, plan=QUICK, warmup=1).head.measurements[0].what.startswith("HETERO:")


def test_plain_comparison_is_taken_from_a_head_to_head_that_measured_it(tiny, virtual):
    """auto's head-to-head runs every op on each device (the plain graphs) beside the placement it
    keeps: `hdp compile` reports that comparison instead of measuring the same candidates again."""
    n = tiny.graph.n_ops
    split = _split(tiny)
    one = {d: np.full(n, k) for k, d in enumerate(virtual.device_names)}
    with Measurer(tiny, virtual, warmup=1, cache=False) as m:
        head = m.head_to_head([placed(one["CPU"], virtual.device_names, "single:CPU"),
                               placed(one["CPU_B"], virtual.device_names, "single:CPU_B"),
                               placed(split, virtual.device_names, "optimal")], QUICK)

    def module(device_of):
        return tiny.replace(placement=Placement(method="t", devices=virtual.device_names,
                                                device_of=Array.of(device_of, np.int16)))

    res = plain_from_heads([head], module(split), virtual)
    assert set(res.comparisons) == {"CPU", "CPU_B"}
    # the placer's report stated these comparisons: the verdict refers to them, without restating them
    assert "CI" not in res.text and res.comparisons["CPU"] == head.compare(0, 2, family=2)
    assert res.text.splitlines()[-1] == res.verdict and res.verdict.startswith("verdict: beside the target's devices")
    restated = plain_report(head, 2, stand_ins=True)  # measured for this report: each pair once
    assert "placement vs plain CPU (as single:CPU): " in restated.text and restated.text.count("CI ") == 2
    kept = plain_from_heads([head], module(one["CPU_B"]), virtual)  # the placement is itself a stand-in
    assert set(kept.comparisons) == {"CPU"} and kept.comparisons["CPU"] == head.compare(0, 1, family=2)
    assert "all ops on CPU_B: same graph as the plain CPU_B compile" in kept.text
    assert "the placement is the plain CPU_B compile through HETERO (measured only as such)" in kept.text
    assert "beats every plain compile" not in kept.text  # whatever it did against CPU: not its own graph
    other = split.copy()
    other[0] = 1 - other[0]
    assert plain_from_heads([head], module(other), virtual) is None  # not measured: compare measures it
    with Measurer(tiny, virtual, warmup=1, cache=False) as m:
        partial = m.head_to_head([placed(one["CPU"], virtual.device_names, "single:CPU"),
                                  placed(split, virtual.device_names, "optimal")], QUICK)
    assert plain_from_heads([partial], module(split), virtual) is None  # CPU_B's whole graph not measured


# --------------------------------------------------------------------------- one worker through a pipeline


def test_measurers_share_a_worker_inside_worker_reuse(tiny, virtual, monkeypatch):
    """`hdp compile`'s support, profile and placer measure one model on one target: inside
    worker_reuse the worker (model loaded) passes from one Measurer to the next; a Measurer of
    another target or environment starts its own; the spare stops when the block ends."""
    from hdp.runtime.measure.worker_client import current_pool, prestart_worker, worker_reuse

    with worker_reuse() as pool:
        prestart_worker()
        started = pool.spare.proc.pid
        with Measurer(tiny, virtual, runs=1, warmup=0, cache=False) as a:
            both = a.support_of(["CPU", "CPU_B"])  # the two devices queried in parallel
            assert a._worker.proc.pid == started  # the prestarted worker, loaded now
            assert both == {"CPU": a.support("CPU"), "CPU_B": a.support("CPU_B")} and all(both["CPU"])
        spare = pool.spare
        assert spare.proc.pid == started and spare.alive
        with Measurer(tiny, virtual, runs=1, warmup=0, cache=False) as c:
            assert c.loaded().n_ops == tiny.graph.n_ops
            assert c._worker.proc.pid == started  # handed over, model loaded: no new process
        other = Target(name="cpu-only", devices=[virtual.devices[0]], link=virtual.link)
        with Measurer(tiny, other, runs=1, warmup=0, cache=False) as b:
            b.loaded()
            assert b._worker.proc.pid != started and spare.alive  # another target: its own worker
            mine = b._worker.proc.pid
        assert pool.spare.proc.pid == mine and not spare.alive  # the last one closed is kept
        monkeypatch.setenv("HDP_TEST_UNRELATED", "1")
        with Measurer(tiny, virtual, runs=1, warmup=0, cache=False) as d:
            d.loaded()
            assert d._worker.proc.pid != mine  # another environment (a fault injected, say)
        with worker_reuse() as inner:
            assert inner is pool  # a nested block shares the outer pool
        kept = pool.spare
        assert kept.alive
    assert pool.spare is None and not kept.alive  # stopped with the block
    prestart_worker()
    assert current_pool() is None  # outside a block: nothing to hand over, nothing started
    with pytest.raises(InputError, match="modeled"):
        Measurer(tiny, "i9-flex170", cache=False).support_of(["CPU", "GPU"])


def test_a_prestarted_worker_reads_the_model_ahead(tiny, virtual):
    """`hdp compile` starts its worker with the model and shape request before lowering: the first
    load then takes the model read and specialised ahead. A request lowering would refuse is left for
    lowering to report (the load reads the model itself)."""
    from hdp.ir.openvino_frontend import checked_source
    from hdp.ir.shapes import ShapeRequest
    from hdp.runtime.measure.worker_client import prestart_worker, worker_reuse

    xml, _ = checked_source(tiny)
    with worker_reuse():
        prestart_worker(xml, ShapeRequest())
        with Measurer(tiny, virtual, runs=1, warmup=0, cache=False) as m:
            assert m.loaded().read_ahead is True
            assert all(m.support("CPU"))
    with worker_reuse():
        prestart_worker(xml, ShapeRequest(shapes={"nonexistent": (1, 2)}))
        with Measurer(tiny, virtual, runs=1, warmup=0, cache=False) as m:
            got = m.loaded()
            assert got.read_ahead is False and got.n_ops == tiny.graph.n_ops


# --------------------------------------------------------------------------- cache location


def test_cache_scope_decides_where_measurements_go(tiny, virtual, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "home-cache"))
    assert measure_cache_dir() == tmp_path / "home-cache" / "hdp" / "measure"
    with cache_scope(tmp_path / "mine"):
        assert measure_cache_dir() == tmp_path / "mine" / "measure"
        with Measurer(tiny, virtual, runs=1, warmup=0) as m:
            assert m.cache.dir == tmp_path / "mine" / "measure"
            m.measure_unplaced("CPU")
        with cache_scope(enabled=False):
            assert measure_cache_dir() is None and Measurer(tiny, virtual).cache is None
    assert len(list((tmp_path / "mine").rglob("*.json"))) == 1
    assert not (tmp_path / "home-cache").exists()


def test_cli_writes_nothing_outside_cache_dir(tiny, virtual, tmp_path, monkeypatch, mlp_xml):
    """compile with measured-reward hsdag, evaluate and profile, with --cache-dir or --no-cache:
    the user cache stays empty (with --no-cache, hsdag's Measurer has no cache: see
    test_cache_scope_decides_where_measurements_go). Numba's compiled kernels are code, not data:
    they stay where hdp.base.jit put them (set here, or a first kernel in this process would follow
    the patched XDG_CACHE_HOME)."""
    from hdp.base.jit import ENV, cache_dir

    monkeypatch.setenv(ENV, cache_dir())
    home = tmp_path / "home-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    cache = tmp_path / "c"
    xml, _ = _placed(tiny, virtual, tmp_path / "placed.xml")
    run = CliRunner().invoke
    r = run(main, ["compile", str(mlp_xml), "-o", str(tmp_path / "p.xml"), "--target", "virtual",
                   "--method", "hsdag", "--reward", "measure", "--set", "placements=3", "--set", "episodes=1",
                   "--set", "samples=2", "--set", "measure_runs=1", "--set", "warm_start=none",
                   "--no-compare", "-q", "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert list((cache / "measure").rglob("*.json"))  # hsdag's measurements follow --cache-dir
    n_measured = len(list((cache / "measure").rglob("*.json")))
    r = run(main, ["evaluate", str(xml), "--runs", "2", "--warmup", "0", "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert len(list((cache / "measure").rglob("*.json"))) == n_measured + 1
    r = run(main, ["evaluate", str(xml), "--runs", "2", "--warmup", "0", "--no-cache"])
    assert r.exit_code == 0 and "[cached]" not in r.output
    r = run(main, ["profile", str(mlp_xml), "-o", str(tmp_path / "costs.json"), "--target", "virtual",
                   "--runs", "2", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert not home.exists() or not any(p.is_file() for p in home.rglob("*")), list(home.rglob("*"))


def test_replies_read_together_are_all_kept(monkeypatch):
    """A reply to a request sent ahead (``preload``) can arrive in the same read as the next reply:
    the bytes past the first reply belong to the second (once dropped, the caller waited forever)."""
    import subprocess
    import sys

    from hdp.runtime.measure.worker_client import WorkerProcess

    script = ("import sys; from hdp.runtime.measure import protocol as P\n"
              "a = P.decode_request(P.read_frame(sys.stdin.buffer)); b = P.decode_request(P.read_frame(sys.stdin.buffer))\n"
              "loaded = P.Loaded(n_ops=1, names=[b.xml], affinity=[''], spec='')\n"
              "sys.stdout.buffer.write(P.frame(P.encode(P.Done())) + P.frame(P.encode(loaded)))\n"
              "sys.stdout.flush(); P.read_frame(sys.stdin.buffer)\n")

    def start(self):
        self.proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, bufsize=0)

    monkeypatch.setattr(WorkerProcess, "start", start)
    w = WorkerProcess()
    w.send(P.Preload(xml="m.xml"))
    assert w.call(P.Load(xml="m.xml", target=Target(name="t", devices=[])), timeout=30) == \
        P.Loaded(n_ops=1, names=["m.xml"], affinity=[""], spec="")
    w.close()

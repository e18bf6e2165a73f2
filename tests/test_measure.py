"""Measuring placements with real HETERO compiles on the virtual target (CPU + CPU_B)."""

import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.cli import main
from hdp.errors import InputError
from hdp.ir.openvino_backend import write_placed
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Array, Placement
from hdp.runtime.measure import (FAULT_ENV, MeasureCache, MeasureError, Measurement, Measurer,
                                 compare_with_plain, measure_plain)
from hdp.runtime.target import Device, Target, load_target

RUNS = 3


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
    assert d["ok"] and d["iqr"] == 2.0 and "median 3000.000 ms" in m.summary()
    bad = Measurement(what="x", target="t", runs=5, warmup=0, error="boom")
    assert not bad.ok and np.isnan(bad.median) and "error: boom" == bad.summary()


def test_measure_split_and_plain_reuse_one_worker(tiny, virtual, tmp_path):
    with Measurer(tiny, virtual, runs=RUNS, warmup=1, cache=tmp_path) as m:
        a = m.measure(_split(tiny))
        pid = m._worker.proc.pid
        b = m.measure(np.zeros(tiny.graph.n_ops, np.int16))
        p = m.plain("CPU_B")
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
        bad = m.plain("CPU")
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
    r = run(main, ["evaluate", str(xml), "--runs", "3", "--warmup", "0", "--plain", "CPU", "--json",
                   "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["placed"]["ok"] and out["placed"]["what"] == "HETERO:CPU,CPU_B" and len(out["placed"]["times"]) == 3
    assert out["plain"]["what"] == "plain:CPU" and out["speedup_vs_plain"] > 0
    r = run(main, ["evaluate", str(xml), "--runs", "3", "--warmup", "0", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0 and "HETERO:CPU,CPU_B on virtual: median" in r.output and "[cached]" in r.output
    r = run(main, ["evaluate", str(xml), "--devices", "CPU"])
    assert r.exit_code == 2 and "placed on 'CPU_B', which target 'CPU' does not have" in r.output
    r = run(main, ["evaluate", str(xml), "--target", "i9-flex170"])
    assert r.exit_code == 2 and "CPU_B" in r.output
    src = tiny.meta["source"]
    r = run(main, ["evaluate", src, "--target", "virtual"])
    assert r.exit_code == 2 and "not a placed model" in r.output
    r = run(main, ["evaluate", src, "--target", "virtual", "--plain", "CPU_B", "--runs", "2", "--no-cache"])
    assert r.exit_code == 0 and "plain:CPU_B on virtual: median" in r.output


def test_compare_with_plain(tiny, virtual, tmp_path):
    _, placed = _placed(tiny, virtual, tmp_path / "placed.xml")
    msg = compare_with_plain(placed, virtual, runs=RUNS, warmup=0, cache=False)
    assert "placement" in msg and "plain" in msg and ("beats" in msg or "does not beat" in msg)
    assert "not measured" in compare_with_plain(placed.replace(placement=Placement(
        method="t", devices=("CPU", "GPU"), device_of=Array.of(np.zeros(tiny.graph.n_ops), np.int16))),
        "i9-flex170")

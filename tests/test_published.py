"""Published figures as data (hdp.target.published) and modeled devices fitted to them
(hdp.runtime.costs.fitting): issue 32, items 1 to 3."""

from pathlib import Path

import msgspec
import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.ir.build import graph_from_edges
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Op
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import make_pass
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.runtime.costs.fitting import ModelTerms, fit_device, leave_one_model_out, predict, row_key
from hdp.runtime.costs.profile import op_bytes, roofline
from hdp.target.published import COLUMNS, load_published, parse_published
from hdp.target.target import Device, Target, load_target

DATA = Path(__file__).resolve().parent.parent / "bench" / "data" / "published"
HEAD = ",".join(COLUMNS)
GOOD = "resnet50,i8,core-ultra-155h:NPU,1,latency,1.56,ms,,docs@003f03dd,some/file.json,resnet-50 | NPU"


def test_the_published_files_load():
    rows = load_published(DATA / "openvino.csv")
    assert len(rows) > 60
    r = next(r for r in rows if r.device == "core-ultra-155h:NPU" and r.model == "bert_base" and r.mode == "throughput"
             and r.precision == "f16")
    assert r.value == 73.98 and r.seconds == pytest.approx(1 / 73.98)
    llm = [r for r in rows if r.mode in ("first-token", "second-token")]
    assert llm and all(r.seq_len in (32, 1024) and r.unit == "ms" for r in llm)
    paper = load_published(DATA / "hsdag-paper.csv")
    assert {(r.model, r.device_name): r.value for r in paper}[("resnet50", "GPU")] == 7.8


def test_a_good_row_and_its_line():
    (r,) = parse_published(f"# a comment\n{HEAD}\n\n{GOOD}\n", "p.csv")
    assert (r.line, r.target, r.device_name, r.seconds) == (4, "core-ultra-155h", "NPU", pytest.approx(1.56e-3))


@pytest.mark.parametrize("row,message", [
    (GOOD.replace(",1.56,", ",,"), r"^p\.csv:2: field 'value' is missing$"),
    (GOOD.replace(",1.56,", ",-3,"), r"^p\.csv:2: field 'value' must be a number in \(0, 1e\+09\], got -3.0$"),
    (GOOD.replace("core-ultra-155h:NPU", "core-ultra-155h:VPU"),
     r"^p\.csv:2: field 'device': target 'core-ultra-155h' has no device 'VPU' \(has CPU, GPU, NPU\)$"),
    (GOOD.replace("core-ultra-155h:NPU", "nowhere:GPU"), r"^p\.csv:2: field 'device': unknown target 'nowhere'"),
    (GOOD.replace("core-ultra-155h:NPU", "NPU"), r"^p\.csv:2: field 'device' must be TARGET:DEVICE"),
    (GOOD.replace(",ms,", ",fps,"), r"^p\.csv:2: field 'unit' must be ms for mode latency, got fps$"),
    (GOOD.replace(",latency,", ",fastest,"), r"^p\.csv:2: field 'mode' must be one of 'latency'"),
    (GOOD.replace(",ms,,", ",ms,32,"), r"^p\.csv:2: field 'seq_len' is only for first-token/second-token rows"),
    (GOOD.replace(",1,latency", ",0,latency"), r"^p\.csv:2: field 'batch' must be an integer in \[1, 4096\], got 0$"),
    (GOOD + ",extra", r"^p\.csv:2: 12 fields, the header has 11$"),
])
def test_a_bad_row_is_one_line_naming_the_field(row, message):
    with pytest.raises(InputError, match=message) as e:
        parse_published(f"{HEAD}\n{row}\n", "p.csv")
    assert "\n" not in str(e.value)


def test_a_bad_header_and_a_missing_file(tmp_path):
    with pytest.raises(InputError, match=r"^p\.csv:1: missing column\(s\) row "):
        parse_published(HEAD.replace(",row", "") + "\n", "p.csv")
    with pytest.raises(InputError, match="no such published-data file"):
        load_published(tmp_path / "none.csv")


# --- the roofline's precisions and streams ---------------------------------------------------


def _chain(n_mm: int = 3, n_add: int = 4, width: int = 64) -> ModelTerms:
    """A chain of MatMul-like ops (compute) and Add-like ops (bytes) of known flops and bytes."""
    ops = [Op("x", "Parameter", ((1, width),), ("f32",))]
    for i in range(n_mm):
        ops.append(Op(f"mm{i}", "MatMul", ((1, width),), ("f32",), flops=2.0 * width * width * 64))
    for i in range(n_add):
        ops.append(Op(f"add{i}", "Add", ((1, width),), ("f32",), flops=width))
    ops.append(Op("out", "Result", (), ()))
    n = len(ops)
    g = graph_from_edges(ops, list(range(n - 1)), list(range(1, n)), [width * 4] * (n - 1))
    return ModelTerms.of(g)


def _device(**kw) -> Device:
    d = dict(name="D", kind="modeled", peak_flops={"f32": 1e11, "f16": 4e11, "i8": 8e11}, precision="f16",
             memory_bandwidth=1e9, op_overhead=2e-6, efficiency=0.5)
    d.update(kw)
    return Device(**d)


def test_roofline_at_another_precision_and_in_throughput_mode():
    t = _chain()
    g = t.graph
    d = _device(precision_efficiency={"i8": 0.25}, stream_efficiency=4.0)
    mm = [i for i, op in enumerate(g.ops) if op.type == "MatMul"]
    add = [i for i, op in enumerate(g.ops) if op.type == "Add"]
    flops = g.ops[mm[0]].flops
    # at i8: 0.25 of 8e11; at f16 (the device's): 0.5 of 4e11
    assert roofline(g, d, "i8")[mm[0]] == pytest.approx(max(flops / 2e11, op_bytes(g, "i8")[mm[0]] / 1e9) + 2e-6)
    assert roofline(g, d)[mm[0]] == pytest.approx(max(flops / 2e11, op_bytes(g, "f16")[mm[0]] / 1e9) + 2e-6)
    # throughput mode: compute and overhead / 4 (the efficiency capped at 1), memory-bound work not
    thr = roofline(g, d, "i8", streams=True)
    assert thr[mm[0]] == pytest.approx(max(flops / 8e11, op_bytes(g, "i8")[mm[0]] / 1e9) + 0.5e-6)
    assert thr[add[0]] == pytest.approx(op_bytes(g, "i8")[add[0]] / 1e9 + 0.5e-6)


def test_a_gather_reads_the_rows_it_gathers_not_its_table():
    ops = [Op("table", "Parameter", ((1000, 64),), ("f32",)), Op("ids", "Parameter", ((1, 4),), ("i64",)),
           Op("g", "Gather", ((1, 4, 64),), ("f32",)), Op("out", "Result", (), ())]
    g = graph_from_edges(ops, [0, 1, 2], [2, 2, 3], [1000 * 64 * 4, 32, 4 * 64 * 4], dst_port=[0, 1, 0])
    assert op_bytes(g)[2] == 4 * 64 * 4 + 32 + 4 * 64 * 4  # gathered rows + indices in, the rows out


def test_predict_is_what_the_simulator_gives_the_device_alone(tmp_path):
    """A latency row at the device's precision is hdp's simulated single-device latency (roofline + one
    subgraph overhead): the fit and the simulator price the same model."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 64], np.float32, name="x")
    h = ops.relu(ops.matmul(x, ops.constant(np.ones((64, 128), np.float32)), False, False))
    y = ops.matmul(h, ops.constant(np.ones((128, 16), np.float32)), False, False)
    xml = tmp_path / "m.xml"
    ov.save_model(ov.Model([ops.result(y)], [x], "m"), str(xml), compress_to_fp16=False)
    m0 = lower(xml)
    tgt = load_target("core-ultra-155h")
    m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m0)
    p = build_problem(m, tgt.device_names)
    sim = Simulator(p)
    for j, dev in enumerate(tgt.devices):
        row = parse_published(f"{HEAD}\n" + GOOD.replace(",i8,", f",{dev.precision},")
                              .replace(":NPU", f":{dev.name}"), "p.csv")[0]
        want = sim.latency(p.single(j))
        assert predict(row, ModelTerms.of(m0.graph), dev, tgt.link.subgraph_overhead) == pytest.approx(want, rel=1e-9)


# --- fitting and the leave-one-model-out check -----------------------------------------------


def _rows_from(device: Device, models: dict[str, ModelTerms], ovh: float):
    """Published rows of every model in latency (i8) and throughput (i8, f16) mode, made by ``device``."""
    text = [HEAD]
    for name in models:
        for prec, mode in (("i8", "latency"), ("i8", "throughput"), ("f16", "throughput")):
            unit = "ms" if mode == "latency" else "fps"
            row = parse_published(f"{HEAD}\n{name},{prec},core-ultra-155h:GPU,1,{mode},1,{unit},,x,y,z", "p")[0]
            s = predict(row, models[name], device, ovh)
            text.append(f"{name},{prec},core-ultra-155h:GPU,1,{mode},{s * 1e3 if unit == 'ms' else 1 / s!r},"
                        f"{unit},,x,y,z")
    return parse_published("\n".join(text), "synthetic.csv")


def test_the_fit_recovers_a_device_and_predicts_the_model_left_out():
    truth = _device(precision_efficiency={"i8": 0.2, "f16": 0.3}, efficiency=0.3, op_overhead=5e-6,
                    stream_efficiency=2.5)
    models = {"a": _chain(3, 2, 64), "b": _chain(1, 6, 128), "c": _chain(6, 1, 32), "d": _chain(2, 3, 256)}
    rows = _rows_from(truth, models, 3e-5)
    terms = {row_key(r): models[r.model] for r in rows}
    start = _device()  # efficiency 0.5 everywhere, 2 us, no streams
    fit = fit_device(start, rows, terms, 3e-5).device
    assert fit.precision_efficiency["i8"] == pytest.approx(0.2, rel=1e-3)
    assert fit.precision_efficiency["f16"] == pytest.approx(0.3, rel=1e-3)
    assert fit.efficiency == pytest.approx(0.3, rel=1e-3)  # the device's own precision
    assert fit.op_overhead == pytest.approx(5e-6, rel=1e-3)
    assert fit.stream_efficiency == pytest.approx(2.5, rel=1e-3)
    checks = leave_one_model_out(start, rows, terms, 3e-5)
    assert len(checks) == len(rows) and all(c.how == "leave-one-model-out" for c in checks)
    assert max(abs(c.error) for c in checks) < 1e-3
    # a device that is no roofline of one efficiency (model a runs at half speed) is off, and says so
    slow = [msgspec.structs.replace(r, value=r.value * (2 if r.unit == "ms" else 0.5)) if r.model == "a" else r
            for r in rows]
    off = leave_one_model_out(start, slow, terms, 3e-5)
    assert max(abs(c.error) for c in off if c.row.model == "a") > 0.3


def test_a_row_no_other_model_informs_is_not_predicted():
    truth = _device()
    models = {"a": _chain(3, 2, 64), "b": _chain(1, 6, 128)}
    rows = [r for r in _rows_from(truth, models, 0.0) if not (r.model == "b" and r.mode == "throughput")]
    terms = {row_key(r): models[r.model] for r in rows}
    checks = {(c.row.model, c.row.mode, c.row.precision): c for c in leave_one_model_out(truth, rows, terms)}
    c = checks[("a", "throughput", "f16")]
    assert c.predicted is None and c.why == "no other row at f16"
    assert checks[("a", "latency", "i8")].predicted is not None


def test_the_target_files_hold_their_fitted_parameters_as_declared():
    """Fitted fields obey their bounds and declare a peak at every precision they are fitted at."""
    for name in ("core-ultra-155h", "core-ultra-288v", "i9-13900k-flex170", "i9-13900k-b580"):
        t: Target = load_target(name)
        for d in t.devices:
            assert d.kind == "modeled" and d.power_active is not None and d.power_idle <= d.power_active
            assert d.precision_efficiency and d.efficiency == d.precision_efficiency[d.precision]
            assert 1 <= d.stream_efficiency <= 64
    npu = load_target("core-ultra-155h").device("NPU")
    assert {"Gather", "Select", "Convert", "MVN", "Gelu", "BitwiseAnd", "Broadcast"} <= set(npu.supported_ops)
    shares = load_target("core-ultra-155h").shares
    assert [(s.resource, s.devices, s.bandwidth) for s in shares] == [("memory", ["CPU", "GPU", "NPU"], 119.5e9)]


@pytest.mark.slow
def test_bench_fit_matches_the_target_files():
    """The target files' fitted parameters are what bench/published_check.py fits on all rows (within 2 %)."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parent.parent / "bench" / "published_check.py"
    r = subprocess.run([sys.executable, str(script), "--check-targets", "--paper", ""], capture_output=True, text=True,
                       timeout=1800)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "DIFFERS" not in r.stdout

"""``hdp evaluate``: it measures what ``hdp compile`` checked and wrote (one path: the placed model as
the file has it, dynamic shapes kept, run at the recorded shapes), several placed files head to head
with a verdict per pair, and a cached figure said to be cached. No timing is asserted."""

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.cli.main import main
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Array, Placement
from hdp.runtime.placed.model import write_placed
from hdp.target.target import load_target


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _compiled_split(model, out, seed):
    """``hdp compile --method random --seed`` on virtual; the written model must use both devices."""
    r = run("compile", model, "-o", out, "--target", "virtual", "--method", "random", "--seed", seed,
            "--no-compare", "--no-cache", "-q")
    assert r.exit_code == 0, r.output
    shown = run("show", out).output
    assert "CPU: 0," not in shown and "CPU_B: 0" not in shown, shown  # a split, not a fallback
    return out


def _evaluates(xml):
    r = run("evaluate", xml, "--runs", "2", "--warmup", "0", "--no-cache", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["check"]["passed"] and out["placed"]["ok"] and len(out["placed"]["times"]) == 2
    assert out["placed"]["what"] == "HETERO:CPU,CPU_B" and out["cached"] is False
    return out


def test_evaluate_measures_a_random_split_of_a_dynamic_bert(bert_dynamic_xml, tmp_path):
    # Before: evaluate specialised the written (dynamic) model to static shapes before compiling it,
    # a graph neither compile's check nor its measurements ran: "Can't set the input tensor with
    # index: 0, because the model input (shape=[128,1]) and the tensor (shape=(0.0)) are incompatible"
    _evaluates(_compiled_split(bert_dynamic_xml, tmp_path / "p.xml", 1))


@pytest.mark.slow
def test_evaluate_measures_splits_of_dynamic_and_stateful_llamas(zoo_export, llama_stateful_xml, tmp_path):
    from hdp.placement.problem import problem_of
    from hdp.runtime.serve.verify import PlacementChecker

    int4 = zoo_export("llama-tiny:dynamic,int4")
    for seed in (4, 5):  # before: (index 7) "the model input (shape=[1,1,1,128]) and the tensor (shape=(0.1.1.128))"
        _evaluates(_compiled_split(int4, tmp_path / f"int4_{seed}.xml", seed))
    # a stateful split: the first half of the groups (in their order) on CPU, the rest on CPU_B;
    # before: "the model input (shape=[1,2,128..,16]) and the tensor (shape=(1.2.0.16))"
    m = lower(llama_stateful_xml)
    t = load_target("virtual")
    p = problem_of(m, t.device_names)
    gd = np.zeros(p.n_groups, np.int16)
    gd[p.n_groups // 2:] = 1
    mod = m.replace(placement=Placement(method="test", devices=t.device_names,
                                        device_of=Array.of(p.op_devices(gd), np.int16)))
    with PlacementChecker(mod, t) as c:
        xml = write_placed(mod, tmp_path / "stateful.xml", t, check=lambda tmp: c.check_file(tmp, list(t.device_names)))
    out = _evaluates(xml)
    assert out["check"]["runs"] == 3  # prefill and two generation steps


# --------------------------------------------------------------------------- head to head


def _tiny_placed(tmp_path):
    """Three placed files of one tiny model: a split, all on CPU_B, and a byte copy of the split."""
    import openvino as ov
    from test_measure import _tiny_model

    src = tmp_path / "tiny.xml"
    ov.save_model(_tiny_model(), str(src), compress_to_fp16=False)
    m = lower(src)
    t = load_target("virtual")
    n = m.graph.n_ops
    split = np.zeros(n, np.int16)
    split[n // 2:] = 1
    files = []
    for name, dev in (("split", split), ("all_b", np.ones(n, np.int16))):
        pl = Placement(method="test", devices=t.device_names, device_of=Array.of(dev, np.int16))
        files.append(write_placed(m.replace(placement=pl), tmp_path / f"{name}.xml", t))
    copy = tmp_path / "copy.xml"
    shutil.copyfile(files[0].with_suffix(".bin"), copy.with_suffix(".bin"))
    shutil.copyfile(files[0], copy)
    return files + [copy], src


def test_evaluate_several_placements_head_to_head(tmp_path):
    (split, all_b, copy), src = _tiny_placed(tmp_path)
    r = run("evaluate", split, all_b, copy, "--plain", "CPU_B", "--runs", "6", "--warmup", "1",
            "--max-seconds", "2", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["cached"] is False and all(c["passed"] for c in out["check"].values())
    assert out["identical"] == {str(copy): str(split)}
    measured = out["measurements"]
    assert set(measured) == {str(split), str(all_b), "plain CPU_B"}  # the copy is not run again
    assert len({len(m["times"]) for m in measured.values()}) == 1 and out["rounds"] >= 6  # same rounds
    pairs = {(p["a"], p["b"]): p for p in out["pairs"]}
    assert pairs[(str(split), str(copy))]["identical"] and "comparison" not in pairs[(str(split), str(copy))]
    c = pairs[(str(split), str(all_b))]["comparison"]
    assert c["verdict"] in ("faster", "slower", "equal") and c["level"] == 0.95 and c["low"] <= c["ratio"] <= c["high"]
    same = pairs[(str(all_b), "plain CPU_B")]["comparison"]
    assert same["same_graph"] and same["verdict"] != "faster"  # all ops on CPU_B is the plain CPU_B graph
    assert len(out["pairs"]) == 4  # 3 measured -> 3 pairs, plus the identical one

    r = run("evaluate", split, all_b, "--runs", "6", "--warmup", "0", "--max-seconds", "1")
    assert r.exit_code == 0, r.output
    assert "measured interleaved" in r.output
    line = [ln for ln in r.output.splitlines() if ln.startswith(f"{all_b} vs {split}: ")]
    assert len(line) == 1 and ("95 % CI" in line[0] or "within noise" in line[0] or "not resolved" in line[0])


def test_evaluate_several_refuses_what_cannot_be_compared(tmp_path, bert_dynamic_xml):
    (split, all_b, _), src = _tiny_placed(tmp_path)
    r = run("evaluate", split, split, "--runs", "6")
    assert r.exit_code == 2 and "given twice" in r.output
    r = run("evaluate", split, src)
    assert r.exit_code == 2 and "not a placed model" in r.output
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    for out, seq in ((a, 16), (b, 24)):
        r = run("compile", bert_dynamic_xml, "-o", out, "--target", "virtual", "--method", "single:CPU",
                "--seq-len", seq, "--no-compare", "--no-check", "--no-cache", "-q")
        assert r.exit_code == 0, r.output
    r = run("evaluate", a, b, "--runs", "6")
    assert r.exit_code == 2 and "placed at" in r.output and "same shapes" in r.output
    assert len(r.output.strip().splitlines()) == 1
    r = run("evaluate", a, split, "--runs", "6")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1


def test_evaluate_says_when_a_figure_is_cached(tmp_path):
    (split, _, _), _ = _tiny_placed(tmp_path)
    cache = tmp_path / "cache"
    args = ("evaluate", split, "--runs", "2", "--warmup", "0", "--cache-dir", cache)
    first = json.loads(run(*args, "--json").output)
    assert first["cached"] is False
    again = run(*args, "--json")
    assert again.exit_code == 0 and json.loads(again.output)["cached"] is True
    text = run(*args)
    assert text.exit_code == 0 and "[cached]" in text.output and "cached: this figure was measured" in text.output


# --------------------------------------------------------------------------- modeled targets


@pytest.mark.parametrize("method", ["single:GPU", "random"])
def test_every_method_prints_its_simulated_latency_on_a_modeled_target(branchy_xml, tmp_path, method):
    r = run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", "i9-flex170", "--method", method,
            "--no-cache")
    assert r.exit_code == 0, r.output
    verdict = [ln for ln in r.output.splitlines() if ln.startswith("verdict (simulated, nothing run): latency ")]
    assert len(verdict) == 1 and "best single device" in verdict[0] and len(r.output.splitlines()) <= 6
    r = run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", "i9-flex170", "--method", method,
            "--no-cache", "-v")
    line = [ln for ln in r.output.splitlines() if ln.startswith("simulated: this placement")]
    assert len(line) == 1 and "best single device" in line[0] and "lower bound" in line[0]

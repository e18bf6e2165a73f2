"""What hdp tells a user, and that its next command never contradicts it (issue 34): the verdict of
``compile``, ``auto``'s choice and ``hdp evaluate`` on one pair of files agree; ``evaluate`` runs
each file on the target it was placed for; a device that cannot hold the model is never the best
single device; one op count in compile, show and evaluate; a short report; the pass chain ends
in the file ``compile`` writes."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner

from hdp.cli.main import main
from hdp.passes.cache import PassCache
from hdp.pipeline.compile import compile_model


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def claim(verdict: str) -> int:
    """-1: A faster than B, +1: slower, 0: no claim (equal, identical, loaded, not resolved)."""
    return {"faster": -1, "slower": 1}.get(verdict, 0)


def agree(claims: list[int]) -> bool:
    """Verdicts agree when none says faster where another says slower (equal is no claim)."""
    return not ({-1, 1} <= set(claims))


@pytest.mark.slow
def test_compile_auto_and_evaluate_agree_on_one_pair(branchy_xml, tmp_path):
    """The placement auto keeps, compile's verdict against plain CPU_B and `hdp evaluate` of that
    file against the all-CPU_B file: never one saying faster and another slower; a loaded host
    makes every one of them say so instead of claiming."""
    cache = PassCache(tmp_path / "cache")
    a = tmp_path / "auto.xml"
    res = compile_model(branchy_xml, a, "virtual", cache=cache, compare=True, options={"budget": "20"})
    b = tmp_path / "cpub.xml"
    compile_model(branchy_xml, b, "virtual", method="single:CPU_B", cache=cache)
    chosen = res.module.placement.info["chosen"]
    # auto keeps a candidate over the preferred single device only when it beats it beyond the threshold
    picked = -1 if chosen != "single:CPU_B" and not chosen.startswith("single:") else 0
    said = res.comparison.comparisons.get("CPU_B")
    by_compile = claim(said.verdict) if said is not None else 0
    r = run("evaluate", a, b, "--json", "--max-seconds", "6")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    pair = got["pairs"][0]
    if pair["identical"]:
        by_evaluate = 0
    else:  # b vs a in the JSON: the placement's time against CPU_B's is the inverse claim
        by_evaluate = -claim(pair["comparison"]["verdict"]) if pair["b"] == str(b) else claim(
            pair["comparison"]["verdict"])
    assert agree([picked, by_compile, by_evaluate]), (chosen, said and said.describe(), pair)
    if got["loaded"]:
        assert by_evaluate == 0 and "no claim" in pair.get("text", "")
    if res.comparison.head is not None and res.comparison.head.loaded:
        assert "no claim" in res.comparison.verdict and by_compile == 0


def test_evaluate_refuses_files_of_two_targets_in_one_line_unless_asked(branchy_xml, tmp_path):
    """A virtual placement beside a virtual-2x1 one: refused in one line; with --across-targets each
    runs on the devices it was placed for and is checked at its own tolerance (virtual-2x1 is f32:
    1e-3; virtual's CPU_B computes in bf16: 5e-2)."""
    v, x = tmp_path / "v.xml", tmp_path / "x.xml"
    for out, tgt, method in ((v, "virtual", "single:CPU_B"), (x, "virtual-2x1", "heft")):
        r = run("compile", branchy_xml, "-o", out, "--target", tgt, "--method", method, "--no-compare", "-q",
                "--cache-dir", tmp_path / "c")
        assert r.exit_code == 0, r.output
    r = run("evaluate", v, x)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith(f"hdp: error: {x} was placed for target 'virtual-2x1', {v} for 'virtual': give "
                               f"--across-targets")
    r = run("evaluate", v, x, "--across-targets", "--json", "--max-seconds", "2")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["targets"] == {str(v): "virtual", str(x): "virtual-2x1"}
    assert got["check"][str(x)]["tolerance"] == pytest.approx(1e-3)
    assert got["check"][str(v)]["tolerance"] >= 5e-2
    assert got["measurements"][str(x)]["what"].endswith("(virtual-2x1)")


def test_evaluate_of_two_different_models_says_so(branchy_xml, mlp_xml, tmp_path):
    a, b = tmp_path / "a.xml", tmp_path / "b.xml"
    for src, out in ((branchy_xml, a), (mlp_xml, b)):
        assert run("compile", src, "-o", out, "--devices", "CPU", "--no-compare", "-q", "--no-cache").exit_code == 0
    r = run("evaluate", a, b)
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "these are different models" in r.output and "same shapes" not in r.output
    assert str(branchy_xml) in r.output and str(mlp_xml) in r.output


def test_a_device_that_cannot_hold_the_model_is_never_the_best_single_device(tmp_path):
    """`--memory GPU=...` on i9-flex170 below the model's weights: no "best single device GPU", the
    candidates list says why single:GPU is missing, and the capped compile prints its memory line."""
    from conftest import _save
    from test_objectives import build_tower

    xml = _save(build_tower(), tmp_path / "tower.xml")
    r = run("compile", xml, "-o", tmp_path / "p.xml", "--target", "i9-flex170", "--memory", "GPU=4KiB",
            "--no-cache")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert len(lines) <= 6 and any(x.startswith("memory (estimated): ") for x in lines)
    assert "best single device GPU" not in r.output and "GPU cannot hold the model" in r.output
    v = run("compile", xml, "-o", tmp_path / "p.xml", "--target", "i9-flex170", "--memory", "GPU=4KiB",
            "--no-cache", "-v")
    cands = next(x for x in v.output.splitlines() if x.startswith("auto: candidates"))
    assert "single:GPU" in cands and re.search(r"not candidates: single:GPU \(GPU cannot hold the model: needs .+, "
                                               r"holds 4\.0 KiB\)", cands), cands
    assert "best single device GPU" not in v.output and "memory (estimated): " in v.output


def test_compile_prints_at_most_six_lines_and_the_next_command(branchy_xml, tmp_path):
    out = tmp_path / "p.xml"
    r = run("compile", branchy_xml, "-o", out, "--target", "virtual", "--method", "heft", "--cache-dir",
            tmp_path / "c")
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert 4 <= len(lines) <= 6, r.output
    assert re.match(r"\d+ ops placed \(CPU \d+, CPU_B \d+\) on virtual with heft -> ", lines[0])
    assert lines[1].startswith("checked: ")
    verdict = next(x for x in lines if x.startswith("verdict: "))
    assert "default plain CPU compile" in verdict and "beside the target's devices" in verdict
    assert lines[-2].startswith("time: ") and lines[-1].startswith("next: ")
    assert f"hdp evaluate {out} --plain default" in lines[-1] and "hdp export" in lines[-1]
    assert max(len(x) for x in lines) <= 400 and not re.search(r"by [\d.]+ %", verdict), verdict  # a ratio, not "by 73.6 %"
    assert "inferences/s" not in r.output and "load average" not in r.output
    detail = run("compile", branchy_xml, "-o", out, "--target", "virtual", "--method", "heft", "--cache-dir",
                 tmp_path / "c", "-v")
    assert len(detail.output.splitlines()) > len(lines) and "measured interleaved" in detail.output


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2-tiny", "densenet-tiny", "bert-tiny", "mobilenet_v2-tiny", "vit-tiny",
                                  "llama-tiny:stateful", "qwen2-tiny", "phi3-tiny"])
def test_one_op_count_in_compile_show_and_evaluate(zoo_export, tmp_path, name):
    """A mixed placement (heft on virtual) writes copies of constants for each device that reads
    them: compile, show and evaluate still give one count, the ops placed."""
    xml = zoo_export(name)
    out = tmp_path / "p.xml"
    c = run("compile", xml, "-o", out, "--target", "virtual", "--method", "heft", "--no-compare",
            "--cache-dir", tmp_path / "c")
    assert c.exit_code == 0, c.output
    count = re.match(r"(\d+ ops placed \([^)]*\))", c.output).group(1)
    s = run("show", out)
    assert s.exit_code == 0 and f": {count}; the file holds " in s.output, (count, s.output)
    e = run("evaluate", out, "--runs", "3", "--cache-dir", tmp_path / "c")
    assert e.exit_code == 0 and f"{out}: {count}; checked" in e.output, (count, e.output)


def test_the_pass_chain_ends_in_the_file_compile_writes(branchy_xml, tmp_path):
    """`hdp lower`, `hdp pass` each pass, `hdp pass raise`: the placed model is the one `hdp compile`
    writes with the same passes (one cache: the profile measured once), byte for byte; `hdp
    compile` on the Module says which command to run instead."""
    cache = tmp_path / "c"
    m = [tmp_path / f"m{i}.hdp" for i in range(5)]
    steps = [("lower", branchy_xml, "-o", m[0], "--cache-dir", cache)]
    for i, (name, extra) in enumerate((("support", ()), ("profile", ()), ("partition", ("--set", "method=heft")),
                                       ("assign", ()))):
        steps.append(("pass", name, m[i], "-o", m[i + 1], "--target", "virtual", "--cache-dir", cache, *extra))
    chain = tmp_path / "chain.xml"
    steps.append(("pass", "raise", m[4], "-o", chain, "--target", "virtual", "--cache-dir", cache))
    for step in steps:
        r = run(*step)
        assert r.exit_code == 0, (step, r.output)
    assert "checked: runs under HETERO" in r.output
    compiled = tmp_path / "compiled.xml"
    r = run("compile", branchy_xml, "-o", compiled, "--target", "virtual", "--passes",
            "support,profile,partition{method=heft},assign", "--cache-dir", cache, "--no-compare")
    assert r.exit_code == 0, r.output
    assert chain.read_bytes() == compiled.read_bytes()
    assert chain.with_suffix(".bin").read_bytes() == compiled.with_suffix(".bin").read_bytes()
    r = run("compile", m[4], "-o", tmp_path / "x.xml", "--target", "virtual")
    assert r.exit_code == 2 and f"hdp pass raise {m[4]} -o placed.xml" in r.output
    assert "raise" in run("passes").output
    r = run("pass", "raise", m[3], "-o", tmp_path / "y.xml", "--target", "virtual")
    assert r.exit_code == 2 and "no placement" in r.output  # before assign: nothing to write
    assert not (tmp_path / "y.xml").exists()


def _head(placement_ms, default_ms, plain_ms, others):
    """A head-to-head of a placement, the target's plain CPU and the host's default plain CPU compile
    (fabricated times: two blocks of 20 rounds, 1 % noise) with ``others`` cores busy elsewhere."""
    import numpy as np

    from hdp.runtime.measure.load import HostLoad
    from hdp.runtime.measure.measurement import HeadToHead, Measurement
    from hdp.runtime.measure.stats import SequentialPlan

    rng = np.random.default_rng(0)
    drift = np.exp(rng.normal(0, 0.02, 40))
    ms = []
    for what, t in (("concurrent:CPU,CPU_B", placement_ms), ("plain:CPU", plain_ms), ("default:CPU", default_ms)):
        times = tuple(float(x) for x in t * 1e-3 * drift * np.exp(rng.normal(0, 0.01, 40)))
        ms.append(Measurement(what=what, target="virtual-2x1", runs=40, warmup=1, times=times,
                              properties={"INFERENCE_PRECISION_HINT": "bf16", "INFERENCE_NUM_THREADS": "2"}
                              if what.startswith("default") else {}))
    return HeadToHead(names=("placement", "plain CPU", "default CPU"), measurements=tuple(ms),
                      graphs=(("concurrent", "x"), ("one", "CPU"), ("default", "CPU")), rounds=40, seconds=4.0,
                      reason="resolved", plan=SequentialPlan(), blocks=(0,) * 20 + (1,) * 20,
                      load=HostLoad(others=others, cores=2, seconds=4.0))


def test_the_verdict_names_the_default_plain_compile_faster_with_the_ratio():
    """issue 30 item 5: Inception-V3's concurrent placement on virtual-2x1 (81 ms) against OpenVINO's
    default CPU compile (11.3 ms, bf16 on both cores): the verdict says the default is faster, by how
    much, and what to do; on a loaded host the same figures claim nothing."""
    from hdp.runtime.serve.report import plain_report

    res = plain_report(_head(81.5, 11.3, 76.4, others=0.01), 0)
    assert res.verdict.startswith("verdict: the default plain CPU compile (bf16, 2 threads) is faster: the placement "
                                  "takes 7.2") and "its time (latency 81." in res.verdict and "vs 11." in res.verdict
    assert "without hdp, compile the unplaced model on CPU with OpenVINO's defaults" in res.verdict
    assert res.defaults["CPU"].verdict == "slower" and "2 blocks" in res.verdict
    assert "beside the target's devices: plain CPU 1.07× slower" in res.verdict
    loaded = plain_report(_head(81.5, 11.3, 76.4, others=1.2), 0)
    assert loaded.verdict.startswith("verdict: no claim against the default plain CPU compile")
    assert "consider --method" not in loaded.verdict and loaded.defaults["CPU"].withheld == "slower"
    faster = plain_report(_head(9.0, 11.3, 30.0, others=0.0), 0)
    assert faster.verdict.startswith("verdict: the placement is faster than the default plain CPU compile")

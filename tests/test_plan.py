"""Serving plans written and run (hdp.ir.plan, hdp.runtime.serve.plan_write, plan_run, hdp serve/show/
evaluate): every shape on the two-CPU bed, its outputs against the unsplit model, and bad input as
one-line errors naming the field or the file."""

from __future__ import annotations

import json
import shutil

import msgspec
import numpy as np
import openvino as ov
import openvino.opset13 as op
import pytest
from click.testing import CliRunner

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.ir.plan import PLAN_FILE, PlanReplica, PlanStage, ServingPlan, encode_plan, plan_shape, read_plan
from hdp.pipeline.compile import compile_model
from hdp.placement.plan import GroupPlan, Replica
from hdp.runtime.placed.model import read_placed
from hdp.runtime.serve.plan_run import load_plan
from hdp.runtime.serve.plan_serve import serve_plan, served_lines
from hdp.runtime.serve.plan_write import write_plan
from hdp.target.target import load_target


def tiny_cnn(path, layers: int = 6):
    """A residual stack of 3x3 convolutions (8 channels, 16x16), seeded."""
    rng = np.random.default_rng(0)
    x = op.parameter([1, 8, 16, 16], np.float32, name="x")
    h = x
    for i in range(layers):
        w = op.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2)
        h2 = op.relu(op.convolution(h, w, [1, 1], [1, 1], [1, 1], [1, 1]))
        h = op.add(h, h2) if i % 2 else h2
    ov.save_model(ov.Model([op.result(h)], [x], "tiny"), str(path))
    return path


@pytest.fixture(scope="module")
def placed_module(tmp_path_factory):
    d = tmp_path_factory.mktemp("plan")
    xml = tiny_cnn(d / "tiny.xml")
    tgt = load_target("virtual-2x1")
    r = compile_model(xml, d / "p.xml", tgt, method="single:CPU", check=False, compare=False)
    return r.module, tgt, xml


def plans_of(k: int) -> dict[str, GroupPlan]:
    half = np.array([0 if g < k // 2 else 1 for g in range(k)], np.int64)
    return {"single": GroupPlan.single(k, 0, 1),
            "pipeline": GroupPlan(half, ((Replica(0),), (Replica(1),))),
            "replicas": GroupPlan(np.zeros(k, np.int64), ((Replica(0), Replica(1)),)),
            "mixed": GroupPlan(half, ((Replica(0),), (Replica(0), Replica(1))))}


@pytest.mark.parametrize("shape", ["single", "replicas", "pipeline", "mixed"])
def test_every_shape_is_written_all_or_none_and_serves_the_unsplit_outputs(tmp_path, placed_module, shape):
    module, tgt, _ = placed_module
    k = module.partition.group_device.shape[0]
    out = tmp_path / f"{shape}.plan"
    written = write_plan(module, out, tgt, requests=2, plan=plans_of(k)[shape])
    assert written.shape == shape and read_plan(out) == written
    files = sorted(p.name for p in out.iterdir())
    assert PLAN_FILE in files and "check.npz" in files
    if shape == "pipeline":  # today's placed model, each stage's ops on its device
        assert "placed.xml" in files and not any(f.endswith(".blob") for f in files)
        assert set(read_placed(out / "placed.xml").used) == {"CPU", "CPU_B"}
    else:
        assert sum(len(st.replicas) for st in written.stages) == sum(f.endswith(".blob") for f in files)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left
    if shape == "mixed":
        assert len(written.stages) == 2 and written.edges() and written.edges()[0][:2] == (0, 1)
    s = serve_plan(out, batches=2, per_batch=8, warmup=1)
    assert s.ok and s.checked == 2 and s.check_passed and s.check_error <= 1e-5
    assert len(s.rates) == 2 and len(s.utilisation[0]) == (1 if shape == "pipeline" else len(written.stages))
    text = "\n".join(served_lines(s))
    assert "requests/s" in text and "p99" in text and "stage 0" in text and "match the unsplit model" in text
    # the runtime runs requests with ids, several in flight, outputs those of the unsplit model
    if shape == "pipeline":
        return
    loaded = load_plan(out)
    runner = loaded.runner.start()
    try:
        ids = {runner.submit(x, keep=True): r for r, x in enumerate(loaded.check_inputs)}
        for _ in ids:
            job = runner.finished.get()
            np.testing.assert_allclose(job.outputs[0], loaded.check_outputs[ids[job.rid]][0], rtol=1e-5, atol=1e-6)
    finally:
        runner.close()


@pytest.mark.parametrize("shape", ["pipeline", "replicas"])
def test_a_written_plan_names_each_replicas_host(tmp_path, placed_module, shape):
    """On a target of several hosts every replica of plan.json names its device's host (what
    ``hdp serve --ray`` pins its actor to); on one host none does."""
    from importlib import resources

    from hdp.target.target import parse_target

    module, tgt, _ = placed_module
    text = (resources.files("hdp.target") / "targets" / "virtual-2x1.toml").read_text()
    hosts = parse_target(text + '\n[[hosts]]\nname = "a"\ndevices = ["CPU"]\n[[hosts]]\nname = "b"\n'
                                'devices = ["CPU_B"]\n[[links]]\nhosts = ["a", "b"]\nbandwidth = 1e9\n'
                                'latency = 1e-4\n', "two-hosts.toml")
    k = module.partition.group_device.shape[0]
    written = write_plan(module, tmp_path / "h", hosts, requests=2, plan=plans_of(k)[shape])
    assert [[(r.device, r.host) for r in st.replicas] for st in read_plan(tmp_path / "h").stages] == \
        [[(r.device, {"CPU": "a", "CPU_B": "b"}[r.device]) for r in st.replicas] for st in written.stages]
    alone = write_plan(module, tmp_path / "one", tgt, requests=2, plan=plans_of(k)[shape])
    assert {r.host for st in alone.stages for r in st.replicas} == {None}


def test_a_written_plan_is_replaced_only_where_hdp_wrote_one(tmp_path, placed_module):
    module, tgt, _ = placed_module
    k = module.partition.group_device.shape[0]
    out = tmp_path / "p.plan"
    write_plan(module, out, tgt, requests=2, plan=plans_of(k)["single"])
    write_plan(module, out, tgt, requests=4, plan=plans_of(k)["replicas"])  # an earlier plan: replaced whole
    assert read_plan(out).shape == "replicas" and read_plan(out).requests == 4
    assert sorted(p.name for p in out.iterdir() if p.suffix == ".blob") == ["stage0.CPU.blob", "stage0.CPU_B.blob"]
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("a user's file")
    with pytest.raises(InputError, match="not a directory hdp wrote"):
        write_plan(module, other, tgt, requests=2, plan=plans_of(k)["single"])
    assert (other / "notes.txt").read_text() == "a user's file"


def _plan_dict(out) -> dict:
    return json.loads((out / PLAN_FILE).read_text())


def _rewrite(out, d) -> None:
    (out / PLAN_FILE).write_text(json.dumps(d))


def test_bad_plans_are_one_line_errors_naming_the_field_or_file(tmp_path, placed_module):
    module, tgt, _ = placed_module
    k = module.partition.group_device.shape[0]
    good = tmp_path / "good.plan"
    write_plan(module, good, tgt, requests=2, plan=plans_of(k)["replicas"])
    cases = [
        (lambda d: d["stages"][0]["replicas"][0].update(streams=0), r"stages\[0\]\.replicas\[0\]\.streams"),
        (lambda d: d["stages"][0].update(replica=[]), r"stages\[0\]"),
        (lambda d: d.update(shape="pipeline"), r"shape: 'pipeline' does not match its stages \(a replicas plan\)"),
        (lambda d: d.update(version=7), r"version: an hdp plan of version 7"),
        (lambda d: d["stages"][0]["replicas"][1].update(device="GPU.3"), r"replicas\[1\]\.device: 'GPU.3' is not in"),
    ]
    for i, (edit, pattern) in enumerate(cases):
        bad = tmp_path / f"bad{i}.plan"
        shutil.copytree(good, bad)
        d = _plan_dict(bad)
        edit(d)
        _rewrite(bad, d)
        with pytest.raises(InputError, match=pattern) as e:
            read_plan(bad)
        assert "\n" not in str(e.value) and str(bad / PLAN_FILE) in str(e.value)
    # a device this host lacks
    bad = tmp_path / "gpu.plan"
    shutil.copytree(good, bad)
    d = _plan_dict(bad)
    d["devices"].append({"name": "GPU", "plugin": "GPU"})
    d["stages"][0]["replicas"][1]["device"] = "GPU"
    d["stages"][0]["blobs"][1]["device"] = "GPU"
    _rewrite(bad, d)
    with pytest.raises(InputError, match=r"stages\[0\]\.replicas\[1\]\.device: 'GPU' is not present on this host"):
        load_plan(bad)
    # a blob of another OpenVINO version, and one that is not the blob recorded
    bad = tmp_path / "version.plan"
    shutil.copytree(good, bad)
    d = _plan_dict(bad)
    d["openvino"] = "2024.0.0-0000-abcdef"
    _rewrite(bad, d)
    with pytest.raises(InputError, match=r"stage0\.CPU\.blob: compiled by OpenVINO 2024\.0\.0-0000-abcdef, this host"):
        load_plan(bad)
    bad = tmp_path / "swapped.plan"
    shutil.copytree(good, bad)
    blob = bad / "stage0.CPU_B.blob"
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"stage0\.CPU_B\.blob: its contents are not the ones plan\.json records"):
        load_plan(bad)
    with pytest.raises(InputError, match="--requests 0: must be at least 1"):
        load_plan(good, requests=0)


def test_the_ir_round_trips_and_names_its_shapes():
    st = {"replicas": [{"device": "CPU"}], "blobs": [{"device": "CPU", "file": "s.blob", "bytes": 1,
                                                       "digest": "0" * 32}]}
    p = msgspec.convert({"shape": "single", "requests": 2, "stages": [st],
                         "devices": [{"name": "CPU", "plugin": "CPU"}]}, ServingPlan)
    assert msgspec.json.decode(encode_plan(p), type=ServingPlan) == p
    assert p.stages[0].replicas[0].host is None  # room for a replica's host (a runtime across hosts)
    one, two = PlanReplica(device="CPU"), PlanReplica(device="CPU_B", streams=2)
    assert plan_shape([PlanStage(replicas=[one])]) == "single"
    assert plan_shape([PlanStage(replicas=[one, two])]) == "replicas"
    assert plan_shape([PlanStage(replicas=[one]), PlanStage(replicas=[one])]) == "pipeline"
    assert plan_shape([PlanStage(replicas=[one]), PlanStage(replicas=[two])]) == "mixed"


def test_hdp_show_serve_and_evaluate_a_plan(tmp_path, placed_module):
    module, tgt, xml = placed_module
    k = module.partition.group_device.shape[0]
    out = tmp_path / "r.plan"
    write_plan(module, out, tgt, requests=2, plan=plans_of(k)["replicas"])
    r = CliRunner().invoke(main, ["show", str(out / PLAN_FILE)])
    assert r.exit_code == 0, r.output
    assert "serving plan (replicas): CPU+CPU_B for 2 requests in flight" in r.output
    assert "this host can run it" in r.output
    r = CliRunner().invoke(main, ["serve", str(out / PLAN_FILE), "--seconds", "1"])
    assert r.exit_code == 0, r.output
    assert "requests/s" in r.output and "p50" in r.output and "stage 0" in r.output
    r = CliRunner().invoke(main, ["serve", str(out / PLAN_FILE), "--requests", "0"])
    assert r.exit_code == 2 and "--requests: must be an integer in [1, 4096], got 0" in r.output
    r = CliRunner().invoke(main, ["evaluate", str(out / PLAN_FILE), "--objective", "throughput", "--runs", "2",
                                  "--plain", "CPU"])
    assert r.exit_code == 0, r.output
    assert "plan vs plain CPU" in r.output and "verdict:" in r.output


def test_compile_refuses_a_plan_directory_it_cannot_write(tmp_path):
    xml = tiny_cnn(tmp_path / "t.xml", layers=2)
    run = lambda *a: CliRunner().invoke(main, ["compile", str(xml), *a, "--no-check", "-q"])  # noqa: E731
    r = run("-o", str(tmp_path / "a.plan"), "--target", "virtual-2x1")
    assert r.exit_code == 2 and "a directory holds a serving plan: with --objective throughput" in r.output
    r = run("-o", str(tmp_path / "b.plan"), "--target", "i9-flex170", "--objective", "throughput")
    assert r.exit_code == 2 and "target 'i9-flex170' has modeled devices" in r.output
    mine = tmp_path / "mine"
    mine.mkdir()
    r = run("-o", str(mine), "--target", "virtual-2x1", "--objective", "throughput")
    assert r.exit_code == 2 and "not a plan directory hdp wrote" in r.output
    r = run("-o", str(tmp_path / "c.plan"), "--target", "virtual-2x1", "--objective", "throughput", "--requests", "0")
    assert r.exit_code == 2 and "--requests: must be an integer in [1, 4096], got 0" in r.output
    assert not (tmp_path / "a.plan").exists() and not (tmp_path / "c.plan").exists()


@pytest.mark.slow
def test_compile_writes_the_plan_it_kept_and_serves_it_beside_the_plain_compile(tmp_path):
    """``hdp compile -o DIR --objective throughput`` on the two-CPU bed: auto searches every shape,
    serves the candidates, writes the plan it kept, and serves that beside the plain CPU compile with
    its own streams; the written plan runs and matches the unsplit model."""
    xml = tiny_cnn(tmp_path / "t.xml")
    out = tmp_path / "t.plan"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "virtual-2x1", "--objective",
                                  "throughput", "--requests", "2", "--budget", "20", "--no-cache", "-v"])
    assert r.exit_code == 0, r.output
    plan = read_plan(out)
    assert f"-> {out / PLAN_FILE}" in r.output and "planned" in r.output
    assert "auto: plans (simulated requests/s with 2 in flight)" in r.output
    assert f"auto: kept the {plan.shape} plan" in r.output and "verdict:" in r.output
    s = serve_plan(out, batches=2, per_batch=8, warmup=1)
    assert s.ok and s.check_passed

"""A placement that travels: ``hdp export`` / ``compile --export-blob`` write the compiled HETERO model
and the record of what importing it needs; a fresh process with plain OpenVINO (no hdp) imports it
and runs the split; bad blobs are one-line errors."""

import json
import os
import subprocess
import sys

import numpy as np
from click.testing import CliRunner

from hdp.cli.main import main
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Array, Placement
from hdp.runtime.placed.model import write_placed
from hdp.target.target import load_target

#: Run in a fresh interpreter, as a user of ``virtual`` would: plain OpenVINO, the aliased device
#: registered by hand from OpenVINO's own CPU plugin library, configured from the record.
IMPORT_SCRIPT = r'''
import json, os, sys
import numpy as np
import openvino as ov

blob, feeds_path, out_path = sys.argv[1:4]
record = json.load(open(blob + ".json"))
core = ov.Core()
libs = os.path.join(os.path.dirname(ov.__file__), "libs")
core.register_plugin(os.path.join(libs, "libopenvino_intel_cpu_plugin.so"), "CPU_B")
for d in record["devices"]:
    core.set_property(d["name"], d["config"])
with open(blob, "rb") as f:
    compiled = core.import_model(f.read(), record["device"])
feeds = np.load(feeds_path, allow_pickle=True)["steps"]
req = compiled.create_infer_request()
req.reset_state()
outs = []
for step in feeds:  # one inference per step; a stateful model carries its state across them
    req.infer({k: v for k, v in step.items()})
    outs.append(np.array(req.get_output_tensor(0).data))
np.savez(out_path, *outs, devices=np.array(compiled.get_property("EXECUTION_DEVICES")))
assert not any(m == "hdp" or m.startswith("hdp.") for m in sys.modules), "hdp was imported"
'''


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _import_fresh(blob, steps, tmp_path):
    """Outputs of each step and the execution devices, from a fresh process without hdp."""
    feeds = tmp_path / "feeds.npz"
    arr = np.empty(len(steps), object)
    arr[:] = steps
    np.savez(feeds, steps=arr)
    out = tmp_path / "out.npz"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    p = subprocess.run([sys.executable, "-c", IMPORT_SCRIPT, str(blob), str(feeds), str(out)], env=env,
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    got = np.load(out)
    return [got[f"arr_{k}"] for k in range(len(steps))], [str(d) for d in got["devices"]]


def _reference(xml, steps):
    """The original model's outputs per step on the plain CPU plugin in f32 (f32 KV cache)."""
    import openvino as ov

    req = ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                   "KV_CACHE_PRECISION": "f32"}).create_infer_request()
    outs = []
    for step in steps:
        req.infer(step)
        outs.append(np.array(req.get_output_tensor(0).data))
    return outs


def _rel(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b))


def _half_split(xml, out, target):
    """The first half of the tie groups (in their order) on CPU, the rest on CPU_B, written and
    checked as hdp compile writes it."""
    from hdp.placement.problem import problem_of
    from hdp.runtime.serve.verify import PlacementChecker

    m = lower(xml)
    p = problem_of(m, target.device_names)
    gd = np.zeros(p.n_groups, np.int16)
    gd[p.n_groups // 2:] = 1
    mod = m.replace(placement=Placement(method="test", devices=target.device_names,
                                        device_of=Array.of(p.op_devices(gd), np.int16)))
    with PlacementChecker(mod, target) as c:
        return write_placed(mod, out, target, check=lambda tmp: c.check_file(tmp, list(target.device_names)))


def test_exported_blob_runs_the_split_in_a_fresh_process_without_hdp(branchy_xml, tmp_path):
    t = load_target("virtual")
    placed = _half_split(branchy_xml, tmp_path / "placed.xml", t)
    shown = run("show", placed)
    assert shown.exit_code == 0 and "plain OpenVINO drops this placement" in shown.output
    assert "user_dataaffinity" in shown.output and "hdp export" in shown.output
    blob = tmp_path / "placed.blob"
    r = run("export", placed, "-o", blob)
    assert r.exit_code == 0, r.output
    assert "HETERO:CPU,CPU_B" in r.output and "CPU_B (alias of CPU)" in r.output
    rec = json.loads((tmp_path / "placed.blob.json").read_text())
    assert rec["device"] == "HETERO:CPU,CPU_B" and rec["bytes"] == blob.stat().st_size
    cpu_b = [d for d in rec["devices"] if d["name"] == "CPU_B"][0]
    assert cpu_b["alias"] and cpu_b["library"] == "libopenvino_intel_cpu_plugin.so"
    assert cpu_b["config"] == dict(t.device("CPU_B").config)

    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got, devices = _import_fresh(blob, [{"x": x}], tmp_path)
    assert set(devices) == {"CPU", "CPU_B"}  # the split itself, not HETERO's own placement
    ref = _reference(branchy_xml, [{"x": x}])
    assert _rel(got[0], ref[0]) < 5e-2  # CPU_B computes in bf16

    r = run("show", blob)
    assert r.exit_code == 0, r.output
    assert 'core.import_model(data, "HETERO:CPU,CPU_B")' in r.output
    assert "core.register_plugin(<openvino>/libs/libopenvino_intel_cpu_plugin.so, \"CPU_B\")" in r.output
    assert "[present on this host]" in r.output


def test_compile_export_blob_and_bad_blobs(branchy_xml, tmp_path):
    blob = tmp_path / "p.blob"
    r = run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", "virtual", "--method", "single:CPU_B",
            "--no-compare", "--no-cache", "--export-blob", blob)
    assert r.exit_code == 0, r.output
    assert f"exported the compiled placement -> {blob}" in r.output
    r = run("evaluate", blob, "--runs", "2", "--warmup", "0", "--json")
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)["blob"]
    assert m["ok"] and len(m["times"]) == 2 and m["what"].startswith("HETERO:CPU_B")

    def refused(result, *words):
        assert result.exit_code == 2, result.output
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in result.output, result.output
        assert all(w in lines[0] for w in words), lines[0]

    # a blob is timed one request at a time: a throughput question is refused, not answered with a latency
    r = run("evaluate", blob, "--objective", "throughput", "--requests", "2")
    assert r.exit_code == 2 and "one request at a time" in r.output and "Traceback" not in r.output, r.output
    # a truncated blob
    cut = tmp_path / "cut.blob"
    cut.write_bytes(blob.read_bytes()[: blob.stat().st_size // 3])
    (tmp_path / "cut.blob.json").write_bytes((tmp_path / "p.blob.json").read_bytes())
    refused(run("show", cut), "cut.blob", "truncated")
    refused(run("evaluate", cut), "cut.blob", "truncated")
    # a blob whose record names a device this host lacks (as if exported where a GPU is)
    gpu = tmp_path / "gpu.blob"
    gpu.write_bytes(blob.read_bytes())
    rec = json.loads((tmp_path / "p.blob.json").read_text())
    rec["device"] = "HETERO:GPU"
    rec["devices"] = [{"name": "GPU", "plugin": "GPU", "alias": False, "library": "", "config": {}}]
    (tmp_path / "gpu.blob.json").write_text(json.dumps(rec))
    refused(run("evaluate", gpu, "--runs", "2"), "gpu.blob", "'GPU'", "not present on this host")
    assert "this host lacks GPU" in run("show", gpu).output
    # no record beside it; not a placed model; modeled devices: nothing written
    bare = tmp_path / "bare.blob"
    bare.write_bytes(blob.read_bytes())
    refused(run("show", bare), "bare.blob", "bare.blob.json")
    out = tmp_path / "o.blob"
    refused(run("export", branchy_xml, "-o", out), "not a placed model")
    refused(run("compile", branchy_xml, "-o", tmp_path / "q.xml", "--target", "i9-flex170",
                "--export-blob", out), "modeled devices")
    assert not out.exists() and not (tmp_path / "o.blob.json").exists() and not (tmp_path / "q.xml").exists()
    assert sorted(f.name for f in tmp_path.iterdir() if f.name.startswith(".")) == []  # no temporaries left


def test_a_stateful_split_exported_as_a_blob_generates(llama_stateful_xml, tmp_path):
    t = load_target("virtual")
    placed = _half_split(llama_stateful_xml, tmp_path / "placed.xml", t)
    blob = tmp_path / "llm.blob"
    r = run("export", placed, "-o", blob)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "llm.blob.json").read_text())["stateful"]
    # a prefill of 8 tokens, then 4 generation steps teacher-forced, the KV cache in the state
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 100, (1, 12))
    steps, past = [], 0
    for n in (8, 1, 1, 1, 1):
        steps.append({"input_ids": ids[:, past:past + n], "attention_mask": np.ones((1, past + n), np.int64),
                      "position_ids": np.arange(past, past + n)[None], "beam_idx": np.zeros(1, np.int32)})
        past += n
    got, devices = _import_fresh(blob, steps, tmp_path)
    assert set(devices) == {"CPU", "CPU_B"}
    ref = _reference(llama_stateful_xml, steps)
    for k, (a, b) in enumerate(zip(got, ref)):
        assert a.shape == b.shape and _rel(a, b) < 5e-2, (k, _rel(a, b))

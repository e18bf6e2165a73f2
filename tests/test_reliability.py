"""Regression tests for issue 12: inputs never overwritten, inputs verified, nothing half-written,
nothing left running. One test (or parameter) per case the issue lists."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from xml.parsers import expat

import hostile
import numpy as np
import pytest
from click.testing import CliRunner
from placement_helpers import MODELED_TOML as MODELED

from hdp.base.errors import InputError
from hdp.base.fsutil import KILL_ENV, is_temp, temp_name
from hdp.cli.main import main
from hdp.ir import openvino_read as ovr
from hdp.ir import serde
from hdp.runtime.measure.protocol import FAULT_ENV
from hdp.runtime.measure.worker_client import WorkerFailure, WorkerProcess

ROOT = Path(__file__).resolve().parent.parent


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def hdp_proc(*args, env=None, **kw):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH", "")]))
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "hdp", *map(str, args)], capture_output=True, text=True,
                          env=e, **kw)


def refused(r, *needles, usage_ok=False):
    """Exit 2 with one ``hdp: error:`` line (or click's ``Error:`` usage line when ``usage_ok``)."""
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("hdp: error:") or (usage_ok and line.startswith("Error:")), r.output
    for n in needles:
        assert n in line, (n, line)
    return line


def snapshot(*paths):
    return {p: Path(p).read_bytes() for p in paths if Path(p).is_file()}


@pytest.fixture
def target(tmp_path):
    t = tmp_path / "m2.toml"
    t.write_text(MODELED)
    return t


@pytest.fixture
def module(branchy_xml, tmp_path):
    m = tmp_path / "m.hdp"
    assert run("lower", branchy_xml, "-o", m).exit_code == 0
    return m


# --------------------------------------------------------------------------- 1. never overwrite an input


@pytest.mark.parametrize("case", ["compile -o IN", "lower -o IN", "compile --timings IN", "compile --emit-ir IN",
                                  "profile -o IN", "compile --emit-ir == -o", "compile -o symlink to IN",
                                  "compile -o IN.bin's xml", "compile -o IN via ..", "compile --timings == -o.bin",
                                  "pass -o the module's source", "compile -o hard link of IN",
                                  "compile --target IN", "compile --dump-ir holding an input"])
def test_outputs_never_overwrite_inputs(case, branchy_xml, tmp_path, target, module):
    model = branchy_xml
    before = snapshot(model, model.with_suffix(".bin"), target, module)
    other = tmp_path / "other" / "p.xml"
    base = ["--target", target, "--method", "heft", "--no-cache", "-q"]
    if case == "compile -o IN":
        r = run("compile", model, "-o", model, *base)
    elif case == "lower -o IN":
        r = run("lower", model, "-o", model)
    elif case == "compile --timings IN":
        r = run("compile", model, "-o", other, "--timings", model, *base)
    elif case == "compile --emit-ir IN":
        r = run("compile", model, "-o", other, "--emit-ir", model.with_suffix(".bin"), *base)
    elif case == "profile -o IN":
        r = run("profile", model, "-o", model, "--target", target, "--no-cache")
    elif case == "compile --emit-ir == -o":
        r = run("compile", model, "-o", other, "--emit-ir", other, *base)
    elif case == "compile -o symlink to IN":
        link = tmp_path / "link.xml"
        link.symlink_to(model)
        r = run("compile", model, "-o", link, *base)
    elif case == "compile -o IN.bin's xml":  # -o x.xml whose .bin is the input's weights
        (tmp_path / "w").mkdir()
        (tmp_path / "w" / "x.bin").symlink_to(model.with_suffix(".bin"))
        r = run("compile", model, "-o", tmp_path / "w" / "x.xml", *base)
    elif case == "compile -o IN via ..":
        r = run("compile", model, "-o", tmp_path / "other" / ".." / model.name, *base)
    elif case == "compile --timings == -o.bin":
        r = run("compile", model, "-o", other, "--timings", other.with_suffix(".bin"), *base)
    elif case == "pass -o the module's source":
        r = run("pass", "coarsen", module, "-o", model, "--no-cache")
    elif case == "compile -o hard link of IN":
        os.link(model, tmp_path / "hard.xml")
        r = run("compile", model, "-o", tmp_path / "hard.xml", *base)
    elif case == "compile --target IN":
        r = run("compile", model, "-o", other, "--timings", target, *base)
    else:
        dump = tmp_path / "dump"
        dump.mkdir()
        (dump / "01-lower.hdp").write_bytes(module.read_bytes())
        r = run("pass", "coarsen", dump / "01-lower.hdp", "-o", tmp_path / "c.hdp", "--no-cache")
        assert r.exit_code == 0
        r = run("compile", model, "-o", other, "--dump-ir", dump, "--policy", dump / "01-lower.hdp", *base)
    refused(r)
    assert "refusing to overwrite" in r.output or "is also the output" in r.output or "would overwrite" in r.output
    assert snapshot(*before) == before
    assert not other.exists()


def test_unwritable_outputs_are_reported_before_any_pass(branchy_xml, tmp_path, target):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "X.bin").mkdir()
    (tmp_path / "adir.xml").mkdir()
    base = ["--target", target, "--method", "heft", "--no-cache"]
    for args, needle in [(["-o", tmp_path / "afile" / "p.xml"], "not a directory"),
                         (["-o", tmp_path / "X.xml"], "is a directory"),
                         (["-o", tmp_path / "adir.xml"], "is a directory"),
                         (["-o", tmp_path / "ok.xml", "--timings", tmp_path / "afile" / "t.json"], "not a directory"),
                         (["-o", tmp_path / "ok.xml", "--dump-ir", tmp_path / "afile"], "is a file"),
                         (["-o", tmp_path / "ok.xml", "--cache-dir", tmp_path / "afile" / "c"], "not a directory")]:
        r = CliRunner().invoke(main, ["compile", str(branchy_xml), *map(str, args), *map(str, base[:-1])])
        refused(r, needle, usage_ok=True)  # click itself refuses a directory given for a file and back
        assert "[hdp]" not in r.output  # no pass ran
    assert not (tmp_path / "ok.xml").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["afile", "X.bin", "adir.xml", "branchy.xml",
                                                                 "branchy.bin", "m2.toml"])


# --------------------------------------------------------------------------- 2. verify what comes in


def _bad_modules(module_path: Path):
    """Modules that break one invariant each, built with msgspec's untyped tree."""
    import msgspec

    tree = msgspec.msgpack.decode(module_path.read_bytes()[len(serde.MAGIC):])
    g = tree["graph"]

    def variant(fn):
        t = msgspec.msgpack.decode(msgspec.msgpack.encode(tree))
        fn(t)
        return serde.MAGIC + msgspec.msgpack.encode(t)

    def backward(t):  # edges no longer in topological order (the segfault in coarsen)
        idx = np.frombuffer(t["graph"]["indices"][2], np.int32).copy()
        idx[-1] = 0
        t["graph"]["indices"][2] = idx.tobytes()

    def out_of_range(t):
        idx = np.frombuffer(t["graph"]["indices"][2], np.int32).copy()
        idx[0] = 10**6
        t["graph"]["indices"][2] = idx.tobytes()

    def short_data(t):
        t["graph"]["indptr"][2] = t["graph"]["indptr"][2][:-8]

    def object_dtype(t):
        t["graph"]["edge_bytes"][0] = "O"

    def huge_shape(t):
        t["graph"]["indptr"][1] = [2**40]

    def dup_name(t):
        t["graph"]["ops"][1][0] = t["graph"]["ops"][0][0]

    def bad_port(t):
        sp = np.frombuffer(t["graph"]["src_port"][2], np.int32).copy()
        sp[0] = 99
        t["graph"]["src_port"][2] = sp.tobytes()

    assert g["ops"]
    return {"not forward in topological order": variant(backward), "out of range": variant(out_of_range),
            "bytes of data": variant(short_data), "is not a int type": variant(object_dtype),
            "expected": variant(huge_shape), "not unique": variant(dup_name), "port out of range": variant(bad_port)}


@pytest.mark.parametrize("command", ["show", "coarsen", "features", "profile"])
def test_forged_modules_are_refused_before_any_kernel(module, tmp_path, target, command):
    for needle, data in _bad_modules(module).items():
        bad = tmp_path / "bad.hdp"
        bad.write_bytes(data)
        if command == "show":
            r = run("show", bad)
        elif command == "profile":
            r = run("profile", bad, "-o", tmp_path / "o.json", "--target", target, "--no-cache")
        else:
            r = run("pass", command, bad, "-o", tmp_path / "o.hdp", "--no-cache")
        line = refused(r, "bad.hdp", "invalid hdp module")
        assert needle in line, (needle, line)
        assert not (tmp_path / "o.hdp").exists() and not (tmp_path / "o.json").exists()


def test_backward_edge_module_no_longer_segfaults(module, tmp_path):
    """The issue's ``hdp pass coarsen bad.hdp`` exit 139, in a real process to see a signal."""
    bad = tmp_path / "bad.hdp"
    bad.write_bytes(_bad_modules(module)["not forward in topological order"])
    r = hdp_proc("pass", "coarsen", bad, "-o", tmp_path / "x.hdp", "--no-cache")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "not forward in topological order" in r.stderr and "Traceback" not in r.stderr


def test_verify_rejects_non_finite_and_out_of_range_stages():
    from hdp.ir.build import graph_from_edges
    from hdp.ir.types import Array, Costs, Module, Op
    from hdp.ir.verify import VerifyError, verify

    ops = [Op(f"n{i}", "Relu", ((1, 4),), ("f32",)) for i in range(3)]
    m = Module(graph=graph_from_edges(ops, [0, 1], [1, 2], [16, 16]))
    good = Costs(("A",), Array.of(np.ones((3, 1))), ("modeled",), 1e-6, 1e9, 0.0)
    verify(m.replace(costs=good))
    for bad, needle in [(good.__class__(("A",), Array.of(np.full((3, 1), np.nan)), ("modeled",), 1e-6, 1e9, 0.0), "NaN"),
                        (good.__class__(("A",), Array.of(np.ones((3, 1))), ("modeled",), 1e-6, float("inf"), 0.0),
                         "link_bandwidth"),
                        (good.__class__(("A",), Array.of(np.full((3, 1), 1e300)), ("modeled",), 1e-6, 1e9, 0.0), "above"),
                        (good.__class__(("A", "A"), Array.of(np.ones((3, 2))), ("modeled",) * 2, 1e-6, 1e9, 0.0),
                         "duplicate")]:
        with pytest.raises(VerifyError, match=needle):
            verify(m.replace(costs=bad))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from test_learn import DEV2, FAST, blocks_module, reference

    from hdp.learn.config import TrainConfig
    from hdp.learn.graph import build_learn_graph
    from hdp.learn.trainer import train
    from hdp.placement.problem import build_problem

    m = blocks_module()
    lg = build_learn_graph(m, build_problem(m, DEV2))
    ck = tmp_path_factory.mktemp("ck") / "ck.pt"
    train(lg, reference(m), TrainConfig(episodes=1, seed=1, checkpoint=str(ck), **FAST))
    return ck, lg, reference(m)


@pytest.mark.parametrize("change, needle", [
    (lambda ck: ck.pop("feature_width"), "field 'feature_width' is missing"),
    (lambda ck: ck.update(version="1"), "field 'version'"),
    (lambda ck: ck["state_dict"].update({"head.0.weight": ck["state_dict"]["head.0.weight"][:, :3]}),
     "state_dict['head.0.weight'] has shape"),
    (lambda ck: ck["model_config"].update(hidden=10**9), "model_config.hidden"),
    (lambda ck: ck.update(best_device_of=ck["best_device_of"][:3]), "best_device_of"),
    (lambda ck: ck.update(generator=ck["generator"][:10]), "generator"),
    (lambda ck: ck["optimizer"]["state"][0].update(exp_avg=__import__("torch").zeros(1)), "optimizer"),
    (lambda ck: ck.update(cache={"zz": 1.0}), "cache"),
    (lambda ck: ck.update(worst=float("nan")), "worst"),
])
def test_bad_checkpoint_contents_name_the_field(checkpoint, tmp_path, change, needle):
    import torch

    from hdp.learn.config import TrainConfig
    from hdp.learn.trainer import train

    src, lg, ev = checkpoint
    ck = torch.load(src, weights_only=True)
    change(ck)
    bad = tmp_path / "bad.pt"
    torch.save(ck, bad)
    with pytest.raises(InputError, match=needle.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        train(lg, ev, TrainConfig(episodes=2, samples=2, hidden=32, progress=False, policy=str(bad)))


def test_runs_sharing_one_checkpoint_path_never_collide(tmp_path):
    """The temporary was always ``ck.pt.tmp``: two writers renamed each other's file away."""
    import torch

    from hdp.base.fsutil import atomic_path

    path = tmp_path / "ck.pt"
    errors = []

    def writer(k):
        try:
            for i in range(25):
                with atomic_path(path) as tmp:
                    torch.save({"writer": k, "i": i, "pad": torch.zeros(2000)}, tmp)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert torch.load(path, weights_only=True)["i"] == 24
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]


def test_directory_as_target(branchy_xml, tmp_path):
    refused(run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", tmp_path, "--no-cache"),
            "is a directory")


@pytest.mark.parametrize("field, value, needle", [
    ("op_overhead = 5e-6", "op_overhead = 1e308", "devices[0].op_overhead"),
    ("op_overhead = 5e-6", "op_overhead = inf", "devices[0].op_overhead: must be a finite number"),
    ("memory_bandwidth = 1e11", "memory_bandwidth = inf", "devices[0].memory_bandwidth"),
    ("peak_flops = { f32 = 1e12 }", "peak_flops = { f32 = inf }", "devices[0].peak_flops.f32"),
    ("peak_flops = { f32 = 1e12 }", "peak_flops = { f32 = nan }", "devices[0].peak_flops.f32"),
    ("memory_bandwidth = 1e11", "memory_bandwidth = -1.0", "devices[0].memory_bandwidth"),
    ('name = "m2"', 'name = "m2"\n[link]\nbandwidth = inf', "link.bandwidth"),
    ('name = "m2"', 'name = "m2"\n[link]\nlatency = nan', "link.latency"),
])
def test_target_numbers_are_finite_and_in_range(branchy_xml, tmp_path, field, value, needle):
    t = tmp_path / "t.toml"
    assert field in MODELED
    t.write_text(MODELED.replace(field, value, 1))
    refused(run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", t, "--method", "hsdag", "--no-cache"),
            "t.toml", needle)
    assert not (tmp_path / "p.xml").exists()


def test_forged_target_record_in_a_placed_model(branchy_xml, tmp_path, target):
    out = tmp_path / "p.xml"
    assert run("compile", branchy_xml, "-o", out, "--target", target, "--method", "heft", "--no-cache", "-q").exit_code == 0
    text = out.read_text()
    assert "&quot;op_overhead&quot;: 5e-06" in text
    out.write_text(text.replace("&quot;op_overhead&quot;: 5e-06", "&quot;op_overhead&quot;: 1e+308", 1))
    from hdp.runtime.placed.model import read_placed

    with pytest.raises(InputError, match="op_overhead"):
        read_placed(out)


def test_dynamic_element_type_is_refused(mlp_xml, tmp_path):
    text = mlp_xml.read_text().replace('element_type="f32" shape="64"', 'element_type="dynamic" shape="64"', 1)
    assert "dynamic" in text
    mlp_xml.write_text(text)
    refused(run("compile", mlp_xml, "-o", tmp_path / "p.xml", "--devices", "CPU", "--no-cache"),
            "op 'b1' (Constant)", "element type")


def test_model_without_ops_is_refused(tmp_path):
    x = tmp_path / "empty.xml"
    x.write_text('<?xml version="1.0"?>\n<net name="e" version="11"><layers/><edges/></net>\n')
    refused(run("compile", x, "-o", tmp_path / "p.xml", "--devices", "CPU", "--no-cache"), "has no ops")
    assert not (tmp_path / "p.xml").exists()


def test_scalar_input_model_compiles_and_runs(tmp_path):
    import openvino as ov
    from conftest import save_model
    from openvino import opset13 as ops

    from hdp.runtime.placed.model import compile_placed

    s = ops.parameter([], np.float32, name="s")
    m = save_model(ov.Model([ops.result(ops.relu(s, name="r"), name="out")], [s], "scalar"), tmp_path / "s.xml")
    out = tmp_path / "p.xml"
    r = run("compile", m, "-o", out, "--devices", "CPU", "--no-cache", "-q")
    assert r.exit_code == 0, r.output
    res = compile_placed(out)({0: np.array(-2.0, np.float32)})
    assert float(res[0]) == 0.0


@pytest.mark.slow
def test_huge_static_input_is_an_error_not_bad_alloc(tmp_path):
    """A 64 GiB input: refused while lowering, naming the input (query_model in the worker used to
    run out of memory, std::bad_alloc); exit 2."""
    import openvino as ov
    from conftest import save_model
    from openvino import opset13 as ops

    x = ops.parameter([16, 1024, 1024, 1024], np.float32, name="x")
    m = save_model(ov.Model([ops.result(ops.relu(x, name="r"), name="out")], [x], "huge"), tmp_path / "h.xml")
    r = hdp_proc("compile", m, "-o", tmp_path / "p.xml", "--target", "virtual", "--method", "hetero-auto",
                 "--no-cache", "--no-compare", timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "input 'x' has shape [16,1024,1024,1024]" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p.xml").exists()


# --------------------------------------------------------------------------- 3. nothing half-written


def test_atomic_write_fsyncs_and_gets_umask_permissions(tmp_path, monkeypatch):
    from hdp.base import fsutil

    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    old = os.umask(0o022)
    try:
        fsutil.atomic_write(tmp_path / "f.json", b"{}")
        os.umask(0o027)
        fsutil.atomic_write(tmp_path / "g.json", b"{}")
    finally:
        os.umask(old)
    assert (tmp_path / "f.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "g.json").stat().st_mode & 0o777 == 0o640
    assert any(".f.json.hdp-" in s for s in synced) and str(tmp_path) in synced  # the file, then the directory


def test_every_output_gets_umask_permissions(branchy_xml, tmp_path, target):
    old = os.umask(0o022)
    try:
        out = tmp_path / "o" / "p.xml"
        r = run("compile", branchy_xml, "-o", out, "--target", target, "--method", "heft", "--no-cache", "-q",
                "--timings", tmp_path / "o" / "t.json", "--emit-ir", tmp_path / "o" / "m.hdp")
        assert r.exit_code == 0, r.output
        assert run("lower", branchy_xml, "-o", tmp_path / "o" / "l.hdp").exit_code == 0
        assert run("profile", branchy_xml, "-o", tmp_path / "o" / "c.json", "--target", target,
                   "--no-cache").exit_code == 0
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "o").iterdir()}
    assert modes == {n: 0o644 for n in ("p.xml", "p.bin", "t.json", "m.hdp", "l.hdp", "c.json")}, modes


def test_placed_pair_is_checked_by_the_loader(branchy_xml, tmp_path, target):
    from hdp.runtime.placed.model import read_placed

    a = tmp_path / "a.xml"
    assert run("compile", branchy_xml, "-o", a, "--target", target, "--method", "heft", "--no-cache", "-q").exit_code == 0
    read_placed(a)
    assert 'weights_digest value="' in a.read_text()
    data = bytearray(a.with_suffix(".bin").read_bytes())
    data[0] ^= 1  # same size, other weights: what a crash between two renames used to leave
    a.with_suffix(".bin").write_bytes(bytes(data))
    with pytest.raises(InputError, match="not the ones written with a.xml"):
        read_placed(a)
    refused(run("evaluate", a, "--no-cache"), "a.bin", "mismatched")


@pytest.mark.slow
@pytest.mark.parametrize("point", ["placed-saved", "pair-xml-removed", "pair-bin-renamed", "atomic-before-rename"])
def test_kill_while_writing_leaves_no_mismatched_pair_and_next_run_cleans(branchy_xml, tmp_path, target, point):
    """SIGKILL at each step of writing the placed model (and the timings file): a reader never gets
    an old .xml with a new .bin, and the next run removes the temporaries and writes the same bytes."""
    from hdp.runtime.placed.model import read_placed

    out = tmp_path / "out" / "p.xml"
    args = ["compile", branchy_xml, "-o", out, "--target", target, "--method", "heft", "--no-cache", "-q",
            "--timings", tmp_path / "out" / "t.json"]
    ref = tmp_path / "ref" / "p.xml"
    assert hdp_proc(*args[:3], ref, *args[4:10]).returncode == 0
    # an old, different placed model sits at the output
    assert hdp_proc("compile", branchy_xml, "-o", out, "--target", target, "--method", "single:A", "--no-cache",
                    "-q").returncode == 0
    r = hdp_proc(*args, env={KILL_ENV: point})
    assert r.returncode == -signal.SIGKILL, (r.returncode, r.stderr)
    if out.exists():  # whatever is there is a consistent pair
        read_placed(out)
    r = hdp_proc(*args)
    assert r.returncode == 0, r.stderr
    left = [p for p in (tmp_path / "out").rglob("*") if is_temp(p.name)]
    assert not left, left
    assert out.read_bytes() == ref.read_bytes() and out.with_suffix(".bin").read_bytes() == ref.with_suffix(".bin").read_bytes()


def test_stale_temporaries_of_dead_processes_only_are_removed(branchy_xml, tmp_path, target):
    out = tmp_path / "p.xml"
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / temp_name("p.xml").replace(f"-{os.getpid()}-", f"-{dead.pid}-")
    stale_dir = tmp_path / temp_name("p.xml").replace(f"-{os.getpid()}-", f"-{dead.pid}-")
    live = tmp_path / temp_name("p.xml").replace(f"-{os.getpid()}-", "-1-")  # pid 1 is alive
    stale.write_text("half")
    stale_dir.mkdir()
    (stale_dir / "placed.bin").write_text("half")
    live.write_text("someone else's")
    assert is_temp(stale.name) and is_temp(live.name)
    assert run("compile", branchy_xml, "-o", out, "--target", target, "--method", "heft", "--no-cache", "-q").exit_code == 0
    assert not stale.exists() and not stale_dir.exists() and live.exists()


# --------------------------------------------------------------------------- the cache


def test_swapped_cache_entries_are_not_used(branchy_xml, tmp_path, target):
    from hdp.passes.cache import PassCache

    c = PassCache(tmp_path / "c")
    from hdp.ir.openvino_frontend import lower

    m1 = lower(branchy_xml)
    m2 = m1.replace(meta={"x": "y"})
    c.put("aa" * 16, m1)
    c.put("bb" * 16, m2)
    p1, p2 = c._path("aa" * 16), c._path("bb" * 16)
    d1, d2 = p1.read_bytes(), p2.read_bytes()
    p1.write_bytes(d2)
    p2.write_bytes(d1)
    with pytest.warns(UserWarning, match="checksum mismatch"):
        assert c.get("aa" * 16) is None
    assert not p1.exists()


def test_cache_entry_replaced_by_a_directory_and_uncreatable_cache_dir(branchy_xml, tmp_path, target):
    cache = tmp_path / "cache"
    args = ["compile", branchy_xml, "--target", target, "--method", "heft", "-q"]
    assert run(*args, "-o", tmp_path / "a.xml", "--cache-dir", cache).exit_code == 0
    for e in cache.rglob("*.hdp"):
        e.unlink()
        e.mkdir()
    with pytest.warns(UserWarning, match="discarding corrupt cache entry"):
        r = run(*args, "-o", tmp_path / "b.xml", "--cache-dir", cache)
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    assert (tmp_path / "a.xml").read_bytes() == (tmp_path / "b.xml").read_bytes()
    (tmp_path / "file").write_text("x")
    refused(run(*args, "-o", tmp_path / "c.xml", "--cache-dir", tmp_path / "file" / "cache"), "--cache-dir")


def test_cache_is_pruned_least_recently_used_first(tmp_path, monkeypatch):
    import hdp.base.cache as hc

    store = hc.Store(tmp_path, ".hdp")
    keys = [f"{i:02x}" * 16 for i in range(10)]
    for i, k in enumerate(keys):
        store.put(k, bytes(1000))
        os.utime(store.path(k), (1000 + i, 1000 + i))
    assert store.get(keys[0]) is not None  # read: now the most recently used
    r = run("cache", "info", "--cache-dir", tmp_path, "--json")
    info = json.loads(r.output)
    assert info["namespaces"]["passes"]["entries"] == 10
    r = run("cache", "prune", "--cache-dir", tmp_path, "--max-size", "5000")
    assert r.exit_code == 0 and "removed 6 entries" in r.output, r.output
    left = {k for k in keys if store.path(k).exists()}
    assert left == {keys[0], keys[7], keys[8], keys[9]}
    # over the cap, opening the root prunes to 80 % of it
    monkeypatch.setenv(hc.MAX_BYTES_ENV, "2500")
    monkeypatch.setattr(hc, "_opened", set())
    hc.open_root(tmp_path)
    assert sum(store.path(k).exists() for k in keys) == 1
    refused(run("cache", "prune", "--cache-dir", tmp_path, "--max-size", "lots"), "--max-size")


def test_opening_a_cache_over_its_cap_spares_what_was_used_a_moment_ago(tmp_path, monkeypatch):
    """The automatic prune leaves entries used in the last IN_USE_SECONDS: a zoo model larger than
    the cap, exported a moment ago, once pruned itself (and every other model) before its compile."""
    import time

    import hdp.base.cache as hc

    store = hc.Store(tmp_path, ".hdp")
    old, new = "aa" * 16, "bb" * 16
    store.put(old, bytes(3000))
    store.put(new, bytes(3000))
    t = time.time() - hc.IN_USE_SECONDS - 60
    os.utime(store.path(old), (t, t))
    model = tmp_path / "zoo" / "big-0123456789abcdef"  # a zoo model just exported, alone over the cap
    model.mkdir(parents=True)
    (model / "model.xml").write_bytes(b"<net/>")
    (model / "model.bin").write_bytes(bytes(6000))
    monkeypatch.setenv(hc.MAX_BYTES_ENV, "5000")
    monkeypatch.setattr(hc, "_opened", set())
    hc.open_root(tmp_path)
    assert not store.path(old).exists()
    assert store.path(new).exists() and (model / "model.bin").exists()


def test_timeout_is_not_part_of_the_cache_key(branchy_xml, tmp_path, target):
    from hdp.passes.manager import pass_key
    from hdp.pipeline.schedule import make_pass
    from hdp.target.target import load_target

    t = load_target(str(target))
    a = make_pass("profile", {"target": t, "timeout": 600.0})
    b = make_pass("profile", {"target": t, "timeout": 5.0})
    c = make_pass("profile", {"target": t, "runs": 3})
    assert pass_key(a, "x") == pass_key(b, "x") != pass_key(c, "x")
    s1 = make_pass("support", {"target": t, "query_cache": "/a"})
    s2 = make_pass("support", {"target": t, "query_cache": "", "timeout": 1.0})
    assert pass_key(s1, "x") == pass_key(s2, "x")


# --------------------------------------------------------------------------- nothing left running


def test_support_queries_are_memoised(branchy_xml, tmp_path, monkeypatch):
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.support import query_support
    from hdp.runtime.measure import measurer as measure
    from hdp.target.target import load_target

    m = lower(branchy_xml)
    t = load_target("virtual")
    first = query_support(m, t, ["CPU", "CPU_B"], cache_dir=str(tmp_path / "q"))
    assert all(col.all() for col in first)

    def no_worker(*a, **k):
        raise AssertionError("a memoised answer started a worker")

    monkeypatch.setattr(measure.Measurer, "support", no_worker)
    again = query_support(m, load_target("virtual"), ["CPU_B"], cache_dir=str(tmp_path / "q"))
    assert np.array_equal(again[0], first[1])


def _workers_of(pid: int) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"HDP_WORKER_PARENT={pid}".encode() in env:
            found.append(int(d.name))
    return found


def test_timeout_option_bounds_the_wait_on_a_hung_worker(branchy_xml, tmp_path, monkeypatch):
    """A worker hung in a device call: --timeout 2 is the whole wait on it. Every wait on a reply is
    recorded with the deadline it was given: the one that ran out had 2 s (not the 60 s a model's
    load gets), and nothing was asked of a worker after it: the bound the command's wall time would
    show, checked without timing a shared host."""
    waits = []
    real = WorkerProcess._reply

    def recorded(self, timeout, op):
        try:
            reply = real(self, timeout, op)
        except WorkerFailure as e:
            waits.append((op, timeout, str(e)))
            raise
        waits.append((op, timeout, ""))
        return reply

    monkeypatch.setattr(WorkerProcess, "_reply", recorded)
    monkeypatch.setenv(FAULT_ENV, "hang")
    r = run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", "virtual", "--method", "hetero-auto",
            "--no-cache", "--timeout", "2")
    refused(r, "timed out after 2 s")
    ran_out = [w for w in waits if w[2]]
    assert [(t, "timed out after 2 s" in e) for _, t, e in ran_out] == [(2.0, True)], waits
    assert waits[-1] == ran_out[0], waits
    assert not (tmp_path / "p.xml").exists()


@pytest.mark.slow
def test_worker_dies_with_a_killed_hdp(branchy_xml, tmp_path):
    """A worker hung in a device call: SIGKILL of hdp takes the worker with it (it used to be
    re-parented to PID 1 and live on)."""
    e = dict(os.environ, PYTHONPATH=str(ROOT), **{FAULT_ENV: "hang"})
    p = subprocess.Popen([sys.executable, "-m", "hdp", "compile", str(branchy_xml), "-o", str(tmp_path / "p.xml"),
                          "--target", "virtual", "--method", "hetero-auto", "--no-cache"], env=e,
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not _workers_of(p.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    workers = _workers_of(p.pid)
    assert workers, "no worker started"
    p.kill()
    p.wait()
    p.stderr.close()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{w}").exists() and _state(w) != "Z" for w in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if Path(f"/proc/{w}").exists() and _state(w) != "Z"]


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_entries_of_an_older_format_are_dropped_quietly(tmp_path, recwarn):
    import hdp.base.cache as hc

    store = hc.Store(tmp_path, ".hdp")
    store.put("ab" * 16, b"payload")
    assert store.get("ab" * 16) == b"payload"
    store.path("ab" * 16).write_bytes(bytes(16) + b"payload")  # the previous layout: checksum, payload
    assert store.get("ab" * 16) is None and not store.path("ab" * 16).exists()
    assert not [w for w in recwarn if "cache entry" in str(w.message)]


# --------------------------------------------------------------------------- issue 23: hostile hosts



@pytest.fixture
def tiny_fs(tmp_path):
    """A 2 MiB tmpfs (skipped where mounting is not permitted, e.g. CI containers)."""
    try:
        with hostile.small_fs(tmp_path / "fs", "2m") as d:
            yield d
    except hostile.MountRefused as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")


@pytest.fixture
def inode_fs(tmp_path):
    try:
        with hostile.small_fs(tmp_path / "fs", "1m", inodes=64) as d:
            yield d
    except hostile.MountRefused as e:
        pytest.skip(f"cannot mount a tmpfs here: {e}")


def _compile(model, out, target, *extra):
    return run("compile", model, "-o", out, "--target", target, "--method", "heft", "--no-cache", "-q", *extra)


def test_full_disk_is_refused_before_any_pass(branchy_xml, target, tiny_fs):
    hostile.fill(tiny_fs, leave=1024)
    r = _compile(branchy_xml, tiny_fs / "p.xml", target)
    refused(r, "-o", "p.xml", "no space left on device")
    assert "[hdp]" not in r.output and not (tiny_fs / "p.xml").exists()


def test_late_full_disk_keeps_the_old_output(branchy_xml, target, tiny_fs, monkeypatch):
    """The up-front check is rough: when the disk fills while writing, OpenVINO's iostream error
    becomes one line naming the output, and the old pair stays."""
    import hdp.cli.common

    out = tiny_fs / "p.xml"
    assert _compile(branchy_xml, out, target).exit_code == 0
    before = snapshot(out, out.with_suffix(".bin"))
    hostile.fill(tiny_fs, leave=0)
    monkeypatch.setattr(hdp.cli.common, "_check_space", lambda *a: None)  # as if others filled it meanwhile
    r = _compile(branchy_xml, out, target)
    line = refused(r, str(out), "no space left on device", "the old file is kept")
    assert "iostream" in line  # OpenVINO's words kept after ours
    assert snapshot(*before) == before
    assert not [p for p in tiny_fs.iterdir() if is_temp(p.name)]


def test_no_inodes_left(branchy_xml, target, inode_fs, monkeypatch):
    import hdp.cli.common

    out = inode_fs / "p.xml"
    n = hostile.use_inodes(inode_fs)
    refused(_compile(branchy_xml, out, target), "-o", "No space left on device")  # not even a probe file
    for k in (n - 1, n - 2):  # two left: the probe passes, the placed pair needs three
        (inode_fs / "inodes" / str(k)).unlink()
    refused(_compile(branchy_xml, out, target), "-o", "no free inodes (2 left)")
    monkeypatch.setattr(hdp.cli.common, "_check_space", lambda *a: None)  # as if others took them meanwhile
    refused(_compile(branchy_xml, out, target), str(out), "cannot write it: no free inodes", "nothing was written")
    assert not out.exists() and not [p for p in inode_fs.iterdir() if is_temp(p.name)]


def test_inodes_running_out_at_each_step_of_the_commit(branchy_xml, target, inode_fs, monkeypatch, tmp_path):
    """The 1,000-case campaign's find: with inodes for the temporary pair but not for the directory
    the command's output set holds it in, the commit raised ENOSPC as a traceback. With 1 to 6
    inodes free, each compile writes its outputs or refuses in one line, leaving no temporary."""
    import hdp.cli.common

    monkeypatch.setattr(hdp.cli.common, "_check_space", lambda *a: None)  # as if others took them meanwhile
    out, ir = inode_fs / "p.xml", inode_fs / "p.hdp"
    n = hostile.use_inodes(inode_fs)
    outcomes = []
    for free in range(1, 7):
        for k in range(n - free, n):
            (inode_fs / "inodes" / str(k)).unlink(missing_ok=True)
        r = _compile(branchy_xml, out, target, "--emit-ir", ir)
        if r.exit_code == 0:
            outcomes.append("written")
            assert out.exists() and ir.exists()
            for f in (out, out.with_suffix(".bin"), ir):
                f.unlink()
        else:
            line = refused(r)
            assert "no free inodes" in line or "No space left on device" in line, line
            outcomes.append("refused")
            assert not out.exists() and not ir.exists()
        assert not [p for p in inode_fs.iterdir() if is_temp(p.name)], free
    assert outcomes[0] == "refused" and outcomes[-1] == "written", outcomes


def test_an_output_name_near_name_max_is_written(branchy_xml, target, tmp_path):
    out = tmp_path / hostile.long_name(250)
    r = _compile(branchy_xml, out, target)
    assert r.exit_code == 0, r.output
    assert out.is_file() and out.with_suffix(".bin").is_file()
    assert not [p for p in tmp_path.iterdir() if is_temp(p.name)]
    assert len(temp_name(out.name).encode()) <= 255 and is_temp(temp_name(out.name))


@pytest.mark.parametrize("case", ["name over NAME_MAX", "-o over PATH_MAX", "MODEL over PATH_MAX",
                                  "--timings over PATH_MAX", "--cache-dir over PATH_MAX"])
def test_paths_too_long_are_refused_up_front(branchy_xml, target, tmp_path, case, recwarn):
    far = hostile.long_path(tmp_path, 4100)
    ok = tmp_path / "p.xml"
    if case == "name over NAME_MAX":
        r = _compile(branchy_xml, tmp_path / hostile.long_name(256), target)
        needle = "over the 255"
    elif case == "-o over PATH_MAX":
        r = _compile(branchy_xml, far, target)
        needle = "PATH_MAX"
    elif case == "MODEL over PATH_MAX":
        r = _compile(far, ok, target)
        needle = "cannot be read"
    elif case == "--timings over PATH_MAX":
        r = _compile(branchy_xml, ok, target, "--timings", far.with_suffix(".json"))
        needle = "--timings"
    else:
        r = run("compile", branchy_xml, "-o", ok, "--target", target, "--method", "heft", "-q",
                "--cache-dir", far.parent)
        needle = "--cache-dir"
    refused(r, needle)
    assert "[hdp]" not in r.output and not ok.exists()
    assert not [w for w in recwarn if "cache entry" in str(w.message)]  # no false "corrupt entry" warnings


def test_a_cache_root_too_long_for_its_entries(branchy_xml, target, tmp_path):
    """A --cache-dir that fits PATH_MAX but leaves no room for an entry under it: one error."""
    root = hostile.long_path(tmp_path, 4096 - 150, leaf="c")
    r = run("compile", branchy_xml, "-o", tmp_path / "p.xml", "--target", target, "--method", "heft", "-q",
            "--cache-dir", root)
    refused(r, "--cache-dir", "names hdp puts under it")


@pytest.mark.parametrize("kind", ["fifo", "socket", "chardev", "symlink"])
def test_special_files_in_the_cache_are_discarded_unread(branchy_xml, target, tmp_path, kind):
    cache = tmp_path / "cache"
    args = ["compile", branchy_xml, "--target", target, "--method", "heft", "-q", "--cache-dir", cache]
    assert run(*args, "-o", tmp_path / "a.xml").exit_code == 0
    made = []
    for e in hostile.entries(cache):
        try:
            made.append(hostile.special_file(e, kind))
        except PermissionError:
            pytest.skip(f"cannot make a {kind} here")
    # a FIFO used to block the read forever: in a subprocess, so a hang fails the test instead of the suite
    r = hdp_proc(*args, "-o", tmp_path / "b.xml", timeout=120)
    assert r.returncode == 0, r.stderr
    assert "not a regular file" in r.stderr and "Traceback" not in r.stderr
    assert (tmp_path / "a.xml").read_bytes() == (tmp_path / "b.xml").read_bytes()
    assert all(p.is_file() and not p.is_symlink() for p in hostile.entries(cache))  # rewritten as entries


def test_a_fifo_given_as_model_is_refused(target, tmp_path):
    fifo = hostile.special_file(tmp_path / "m.xml", "fifo")
    refused(_compile(fifo, tmp_path / "p.xml", target), "MODEL", "not a regular file")


@pytest.mark.parametrize("tgt", ["modeled", "virtual"])
def test_a_forged_but_valid_lowered_entry_heals(branchy_xml, mlp_xml, target, tmp_path, tgt):
    """A cache entry with a valid checksum holding another model's module (claiming this model's
    source and digest) used to fail every later run ("model.xml changed since it was lowered");
    now it is discarded with a warning, recomputed once, and the next run is clean."""
    cache = tmp_path / "cache"
    hostile.poison_lower_entry(cache, branchy_xml, mlp_xml)
    t = target if tgt == "modeled" else "virtual"
    args = ["compile", branchy_xml, "--target", t, "--method", "heft", "-q", "--no-compare", "--cache-dir", cache]
    r = hdp_proc(*args, "-o", tmp_path / "a.xml", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "discarding 1 cache entry that decoded but does not match its model" in r.stderr
    r = hdp_proc(*args, "-o", tmp_path / "b.xml", timeout=300)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    if tgt == "virtual":  # measured costs: the placement may differ run to run; each output is whole
        from hdp.runtime.placed.model import read_placed

        for out in ("a.xml", "b.xml"):
            assert read_placed(tmp_path / out).model.get_ordered_ops()
        return
    ref = tmp_path / "ref.xml"
    assert hdp_proc(*args[:-2], "--no-cache", "-o", ref, timeout=300).returncode == 0
    for out in ("a.xml", "b.xml"):
        assert (tmp_path / out).read_bytes() == ref.read_bytes()


def test_a_cached_pass_output_of_another_input_is_not_used(branchy_xml, mlp_xml, target, tmp_path):
    """A later pass's entry (here `support`) holding a module of another graph: refused on the hit
    by the pass manager's consistency check, recomputed."""
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.cache import PassCache
    from hdp.passes.manager import PassManager, pass_key
    from hdp.pipeline.schedule import make_pass
    from hdp.target.target import load_target

    t = load_target(str(target))
    support = make_pass("support", {"target": t})
    a, b = lower(branchy_xml), lower(mlp_xml)
    good = PassManager([support]).run(a)
    cache = PassCache(tmp_path / "c")
    cache.put(pass_key(support, serde.digest(a)), support.run(b))  # valid checksum, other graph
    with pytest.warns(UserWarning, match="does not match its model"):
        out = PassManager([support], cache=cache).run(a)
    assert out == good
    assert PassManager([support], cache=cache).run(a) == good  # the recomputed entry is used


class _CountingExpat:
    """``xml.parsers.expat`` whose parsers count the elements they start (the streaming check's work)."""

    ExpatError = expat.ExpatError

    def __init__(self):
        self.started = 0

    def ParserCreate(self, *a, **k):  # noqa: N802 - expat's name
        counter, parser = self, expat.ParserCreate(*a, **k)

        class Counting:
            def __getattr__(self, name):
                return getattr(parser, name)

            def __setattr__(self, name, handler):
                if name == "StartElementHandler":
                    def start(*args, _h=handler):
                        counter.started += 1
                        return _h(*args)
                    setattr(parser, name, start)
                else:
                    setattr(parser, name, handler)

        return Counting()


def test_deep_nesting_is_refused_before_openvino_reads_it(branchy_xml, target, tmp_path, monkeypatch):
    """100,000 nested elements (OpenVINO took 100 s and 9.7 GB to read them): refused by the streaming
    check, which stops at the first element too deep, before OpenVINO is asked to read the file. The
    work is counted, not timed: the elements parsed are the model's own up to the 1,001st level."""

    def no_openvino():
        raise AssertionError("OpenVINO was asked to read a model the check refuses")

    monkeypatch.setattr(ovr, "_core", no_openvino)
    plain = _CountingExpat()
    monkeypatch.setattr(ovr, "expat", plain)
    ovr._check_xml_text(branchy_xml, plain)
    for where in ("model", "layer"):
        m = tmp_path / f"deep_{where}.xml"
        m.write_bytes(branchy_xml.read_bytes())
        (tmp_path / f"deep_{where}.bin").write_bytes(branchy_xml.with_suffix(".bin").read_bytes())
        hostile.nest(m, 100_000, where)
        counting = _CountingExpat()
        monkeypatch.setattr(ovr, "expat", counting)
        refused(_compile(m, tmp_path / "p.xml", target), str(m), "nested 1001 levels deep", "<n>", "line")
        assert 1000 < counting.started <= plain.started + ovr.MAX_XML_DEPTH, (counting.started, plain.started)


def test_nesting_under_the_limit_is_placed(branchy_xml, target, tmp_path):
    m = tmp_path / "deep.xml"
    m.write_bytes(branchy_xml.read_bytes())
    (tmp_path / "deep.bin").write_bytes(branchy_xml.with_suffix(".bin").read_bytes())
    hostile.nest(m, 900, "model")
    r = _compile(m, tmp_path / "p.xml", target)
    assert r.exit_code == 0, r.output


def test_weights_digest_is_patched_in_place_across_blocks(branchy_xml, target, tmp_path, monkeypatch):
    """The digest is written over a placeholder of its own length, the file scanned in blocks
    (here 7 bytes, so the placeholder straddles blocks): never read or replaced whole."""
    from hdp.ir import openvino_backend as be
    from hdp.runtime.placed.model import read_placed

    real = be.record_weights_digest
    monkeypatch.setattr(be, "record_weights_digest", lambda xml, pending: real(xml, pending, block=7))
    out = tmp_path / "p.xml"
    assert _compile(branchy_xml, out, target).exit_code == 0
    read_placed(out)  # the digest matches the .bin
    text = out.read_text()
    assert text.count("<weights_digest ") == 1


def test_a_2_31_dimension_is_refused_naming_the_input(tmp_path):
    """Refused while lowering, from the specialised shapes: no worker allocates anything (it used
    to end in "query_model on CPU: std::bad_alloc", or the kernel's out-of-memory killer)."""
    m = hostile.save(hostile.relu_model([1, 2**31]), tmp_path / "h.xml")
    r = run("compile", m, "-o", tmp_path / "p.xml", "--target", "virtual", "--method", "heft", "--no-cache", "-q")
    refused(r, "input 'x'", "[1,2147483648]", "dimension 1 is 2147483648", "limit")
    assert "[hdp]" not in r.output


def test_an_op_making_a_huge_tensor_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("HDP_MAX_TENSOR_BYTES", "1M")
    m = hostile.save(hostile.broadcast_model(1024), tmp_path / "b.xml")  # [1024, 1024] f32: 4 MiB
    refused(run("lower", m, "-o", tmp_path / "m.hdp"), "op 'wide' (Broadcast)", "[1024,1024]")
    monkeypatch.setenv("HDP_MAX_TENSOR_BYTES", "lots")
    refused(run("lower", m, "-o", tmp_path / "m.hdp"), "HDP_MAX_TENSOR_BYTES")


def test_numba_cache_falls_back_to_a_private_temporary_directory(tmp_path):
    """HOME a file and NUMBA_CACHE_DIR under it: kernels are cached in <TMPDIR>/hdp-numba-<uid>
    with a warning (it used to be "cannot cache function 'in_degrees': no locator available" when
    the package directory is read-only too: reproduced as root with a read-only bind mount)."""
    (tmp_path / "home").write_text("a file, not a directory")
    (tmp_path / "tmp").mkdir()
    env = {"HOME": str(tmp_path / "home"), "NUMBA_CACHE_DIR": str(tmp_path / "home" / "numba"),
           "TMPDIR": str(tmp_path / "tmp"), "XDG_CACHE_HOME": ""}
    code = ("import warnings; warnings.simplefilter('always')\n"
            "from hdp.passes import _kernels\nimport numpy as np\n"
            "print(_kernels.in_degrees(np.array([1], np.int32), 2))\n"
            "import os; print(os.environ['NUMBA_CACHE_DIR'])")
    cmd = [sys.executable, "-c", code]
    ro = os.geteuid() == 0 and shutil.which("unshare")
    if ro:  # the package directory read-only as well: no locator of Numba's own would work
        cmd = ["unshare", "-m", "sh", "-c", f'mount --bind "{ROOT}" "{ROOT}" && mount -o remount,ro,bind "{ROOT}" '
               f'&& exec "$@"', "sh", *cmd]
    e = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=300)
    if ro and r.returncode != 0 and "mount" in r.stderr and "Traceback" not in r.stderr:
        pytest.skip(f"cannot bind-mount read-only here: {r.stderr.strip()}")
    assert r.returncode == 0, r.stderr
    assert "cannot write Numba's kernel cache" in r.stderr and "no locator" not in r.stderr
    where = r.stdout.strip().splitlines()[-1]
    assert where == str(tmp_path / "tmp" / f"hdp-numba-{os.getuid()}")
    assert any(Path(where).rglob("*.nbi"))  # the kernel was cached there


def test_a_poisoned_entry_fails_other_commands_once_at_most(branchy_xml, mlp_xml, tmp_path):
    """Commands without compile's immediate recomputation (hdp profile) still discard the entry
    that made them fail, so the next run recomputes instead of failing again."""
    cache = tmp_path / "cache"
    hostile.poison_lower_entry(cache, branchy_xml, mlp_xml)
    args = ["profile", branchy_xml, "--target", "virtual", "--cache-dir", cache, "--runs", "2", "--seconds", "0"]
    first = hdp_proc(*args, "-o", tmp_path / "a.json", timeout=300)
    assert first.returncode in (0, 2) and "Traceback" not in first.stderr, first.stderr
    assert first.returncode == 0 or "now discarded: run the command again" in first.stderr, first.stderr
    second = hdp_proc(*args, "-o", tmp_path / "b.json", timeout=300)
    assert second.returncode == 0 and "warning" not in second.stderr, second.stderr

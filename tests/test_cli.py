"""The CLI end to end, and every bad input: one clear line, exit 2, nothing half-written."""

import json

import pytest
from click.testing import CliRunner

from hdp.cli.main import main


def run(*args):
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r


def test_compile_twice_hits_cache_and_is_byte_identical(branchy_xml, tmp_path, cache_dir):
    outs = []
    for i in range(2):
        out = tmp_path / f"p{i}.xml"
        r = run("compile", branchy_xml, "-o", out, "--devices", "CPU", "--cache-dir", cache_dir,
                "--timings", tmp_path / f"t{i}.json", "-q")
        assert r.exit_code == 0, r.output
        outs.append(out)
    rows = json.loads((tmp_path / "t1.json").read_text())
    assert all(r["cache_hit"] for r in rows if r["pass"] not in ("raise", "check"))  # checks always run
    assert {r["pass"] for r in rows} >= {"lower", "support", "partition", "assign"}
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert outs[0].with_suffix(".bin").read_bytes() == outs[1].with_suffix(".bin").read_bytes()


def test_lower_pass_show(branchy_xml, tmp_path, cache_dir):
    m = tmp_path / "m.hdp"
    assert run("lower", branchy_xml, "-o", m).exit_code == 0
    s = tmp_path / "s.hdp"
    r = run("pass", "support", m, "-o", s, "--target", "virtual", "--cache-dir", cache_dir)
    assert r.exit_code == 0, r.output
    p = tmp_path / "p.hdp"
    r = run("pass", "partition", s, "-o", p, "--target", "virtual", "--set", "method=single:CPU_B",
            "--cache-dir", cache_dir)
    assert r.exit_code == 0, r.output
    a = tmp_path / "a.hdp"
    assert run("pass", "assign", p, "-o", a, "--no-cache").exit_code == 0
    r = run("show", a)
    assert r.exit_code == 0
    assert "stages: graph, support, partition, placement" in r.output
    assert "11 ops placed (CPU 0, CPU_B 11)" in r.output and "Convolution" in r.output


def test_passes_lists_options():
    r = run("passes")
    assert r.exit_code == 0
    assert "partition" in r.output and "--set method=" in r.output and "hetero-auto" in r.output


def test_show_placed_xml(branchy_xml, tmp_path, cache_dir):
    out = tmp_path / "p.xml"
    c = run("compile", branchy_xml, "-o", out, "--devices", "CPU", "--cache-dir", cache_dir)
    assert c.exit_code == 0
    r = run("show", out)
    # the ops counted as compile counts them (a trial saw show count Constants too): one count
    n = int(c.output.split(" ops placed", 1)[0])
    assert f"placed (single:CPU) on CPU: {n} ops placed (CPU {n})" in r.output and f"(CPU {n})" in c.output


# ----------------------------------------------------------------------------- bad input


def assert_user_error(r, *needles):
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "Traceback" not in r.output
    line = r.output.strip().splitlines()[-1]
    assert line.startswith("hdp: error:"), r.output
    for n in needles:
        assert n in line, (n, line)


@pytest.fixture
def existing_out(tmp_path):
    out = tmp_path / "out.xml"
    out.write_text("previous")
    return out


def compile_fails(model, out, *extra):
    r = run("compile", model, "-o", out, "--no-cache", *extra)
    assert out.read_text() == "previous"  # not clobbered
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temp files left
    return r


def test_missing_xml(tmp_path, existing_out):
    assert_user_error(compile_fails(tmp_path / "none.xml", existing_out, "--devices", "CPU"), "none.xml", "no such file")


def test_malformed_xml(tmp_path, existing_out):
    bad = tmp_path / "bad.xml"
    bad.write_text("<net><layers><layer")
    assert_user_error(compile_fails(bad, existing_out, "--devices", "CPU"), "bad.xml", "malformed XML")


def test_truncated_xml(branchy_xml, existing_out):
    text = branchy_xml.read_text()
    branchy_xml.write_text(text[: len(text) // 2])
    assert_user_error(compile_fails(branchy_xml, existing_out, "--devices", "CPU"), "branchy.xml", "malformed XML")


def test_missing_bin(branchy_xml, existing_out):
    branchy_xml.with_suffix(".bin").unlink()
    assert_user_error(compile_fails(branchy_xml, existing_out, "--devices", "CPU"), "branchy.bin", "missing")


def test_short_bin(branchy_xml, existing_out):
    b = branchy_xml.with_suffix(".bin")
    b.write_bytes(b.read_bytes()[:100])
    assert_user_error(compile_fails(branchy_xml, existing_out, "--devices", "CPU"), "branchy.bin", "truncated")


def test_unknown_device(branchy_xml, existing_out):
    r = compile_fails(branchy_xml, existing_out, "--devices", "CPU,NOPE")
    assert_user_error(r, "--devices CPU,NOPE: this host has no device 'NOPE' (OpenVINO sees: ")
    assert "InputError" not in r.output and "target '" not in r.output  # no class name, no made-up target


def test_unknown_target(branchy_xml, existing_out):
    assert_user_error(compile_fails(branchy_xml, existing_out, "--target", "nope"), "unknown target 'nope'")


def test_dynamic_shape_without_input_shape(tmp_path, existing_out):
    import numpy as np
    import openvino as ov
    from conftest import save_model
    from openvino import opset13 as ops

    x = ops.parameter([1, -1], np.float32, name="ids")
    m = save_model(ov.Model([ops.result(ops.relu(x))], [x], "d"), tmp_path / "d.xml")
    assert_user_error(compile_fails(m, existing_out, "--devices", "CPU"), "ids", "--input-shape")
    assert_user_error(compile_fails(m, existing_out, "--devices", "CPU", "--input-shape", "ids:1,x"),
                      "--input-shape")
    r = run("compile", m, "-o", existing_out, "--devices", "CPU", "--no-cache", "--input-shape", "ids:1,5", "-q")
    assert r.exit_code == 0 and existing_out.read_text().startswith("<?xml")


def test_corrupt_and_newer_hdp(branchy_xml, tmp_path):
    from hdp.ir import serde
    from hdp.ir.openvino_frontend import lower

    m = tmp_path / "m.hdp"
    serde.save(lower(branchy_xml), m)
    c = tmp_path / "c.hdp"
    c.write_bytes(m.read_bytes()[:-40])
    assert_user_error(run("pass", "assign", c, "-o", tmp_path / "o.hdp"), "c.hdp")
    assert_user_error(run("show", c), "c.hdp")
    n = tmp_path / "n.hdp"
    serde.save(lower(branchy_xml).replace(schema=7), n)
    assert_user_error(run("show", n), "n.hdp", "schema 7")
    assert not (tmp_path / "o.hdp").exists()


def test_unknown_pass_and_option(branchy_xml, tmp_path):
    m = tmp_path / "m.hdp"
    assert run("lower", branchy_xml, "-o", m).exit_code == 0
    assert_user_error(run("pass", "frobnicate", m, "-o", tmp_path / "o.hdp"), "unknown pass 'frobnicate'")
    assert_user_error(run("pass", "partition", m, "-o", tmp_path / "o.hdp", "--devices", "CPU", "--set", "colour=red"),
                      "colour")
    assert_user_error(run("pass", "partition", m, "-o", tmp_path / "o.hdp", "--devices", "CPU"),
                      "requires support")
    assert not (tmp_path / "o.hdp").exists()


def test_unknown_method(branchy_xml, existing_out):
    assert_user_error(compile_fails(branchy_xml, existing_out, "--devices", "CPU", "--method", "magic"),
                      "unknown method 'magic'")


def test_output_must_be_xml(branchy_xml, tmp_path):
    r = run("compile", branchy_xml, "-o", tmp_path / "out.txt", "--devices", "CPU")
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_console_script_exit_code(branchy_xml, tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "hdp", "compile", str(tmp_path / "x.xml"), "-o",
                        str(tmp_path / "o.xml"), "--devices", "CPU"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"hdp: error: {tmp_path / 'x.xml'}: no such file"]
    assert not (tmp_path / "o.xml").exists()


def test_heft_then_hsdag_profile_once_and_write_only_under_cache_dir(branchy_xml, tmp_path, monkeypatch):
    """One profile per (model, target, host, OpenVINO version) whatever the method: the second
    method's profile row is a cache hit, and nothing lands in the user cache (issue 10). Numba's
    compiled kernels are not placement data: they stay where hdp.base.jit put them (see its docstring)."""
    from hdp.base.jit import ENV, cache_dir

    monkeypatch.setenv(ENV, cache_dir())
    home = tmp_path / "home"
    monkeypatch.setenv("XDG_CACHE_HOME", str(home))
    monkeypatch.setenv("HOME", str(home))
    cache = tmp_path / "cache"
    for i, method in enumerate(("heft", "hsdag")):
        extra = ["--reward", "simulate", "--set", "episodes=1", "--set", "samples=2"] if method == "hsdag" else []
        r = run("compile", branchy_xml, "-o", tmp_path / f"{method}.xml", "--target", "virtual", "--method", method,
                *extra, "--cache-dir", cache, "--timings", tmp_path / f"t{i}.json", "--no-compare", "-q")
        assert r.exit_code == 0, r.output
    first, second = (json.loads((tmp_path / f"t{i}.json").read_text()) for i in range(2))
    prof = [[r for r in rows if r["pass"] == "profile" and "stage" not in r] for rows in (first, second)]
    assert len(prof[0]) == 1 and not prof[0][0]["cache_hit"]
    assert len(prof[1]) == 1 and prof[1][0]["cache_hit"]
    assert not home.exists() or not any(p.is_file() for p in home.rglob("*")), list(home.rglob("*"))

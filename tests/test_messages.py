"""The messages a new user met (issue 34), each in one line that names the option or file, with a
non-zero exit; Ctrl-C exits 130 as shells expect; what the compile fixed without being asked is
said."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from hdp.cli.common import INTERRUPTED, user_errors
from hdp.cli.main import main

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line_error(r, *needles):
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hdp: error: ") and "Traceback" not in r.output, r.output
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def test_devices_absent_from_the_host_name_the_option_not_a_class(branchy_xml, tmp_path):
    line = one_line_error(run("compile", branchy_xml, "-o", tmp_path / "o.xml", "--devices", "GPU"),
                          "--devices GPU: this host has no device 'GPU' (OpenVINO sees: ")
    assert "InputError" not in line and "target 'GPU'" not in line


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="a Linux /proc")
def test_an_output_in_proc_says_it_takes_no_files(branchy_xml):
    line = one_line_error(run("compile", branchy_xml, "-o", "/proc/e5.xml", "--devices", "CPU"),
                          "-o /proc/e5.xml: /proc takes no new files: it is a proc file system")
    assert "No such file or directory" not in line


def test_context_on_a_model_without_state_is_refused(branchy_xml, tmp_path):
    out = tmp_path / "o.xml"
    one_line_error(run("compile", branchy_xml, "-o", out, "--target", "i9-flex170", "--context", "4096", "--no-cache"),
                   f"--context 4096: {branchy_xml} holds no state")
    assert not out.exists()


@pytest.mark.parametrize("flags, said", [
    (("--objective", "throughput", "--set", "objective=latency"), "--objective throughput and --set objective=latency contradict each other"),
    (("--objective", "latency", "--set", "objective=throughput"), "--objective latency and --set objective=throughput contradict each other"),
    (("--execution", "concurrent", "--set", "execution=sequential"), "--execution concurrent and --set execution=sequential contradict"),
])
def test_options_that_contradict_each_other_are_refused(branchy_xml, tmp_path, flags, said):
    one_line_error(run("compile", branchy_xml, "-o", tmp_path / "o.xml", "--target", "i9-flex170", *flags,
                       "--no-cache"), said)


def test_a_dynamic_batch_fixed_to_one_is_said(dynamic_xml, tmp_path):
    """A warning (``hdp: warning: ...`` on stderr, see hdp.cli.common.user_errors), every compile, the
    lowering cached or not; none when --input-shape chose the shape."""
    for _ in range(2):
        with pytest.warns(UserWarning, match=r"x: dynamic batch fixed to 1; placed and measured at these shapes "
                                             r"\(--input-shape"):
            r = CliRunner().invoke(main, ["compile", str(dynamic_xml), "-o", str(tmp_path / "o.xml"), "--devices",
                                          "CPU", "--no-compare", "--cache-dir", str(tmp_path / "c")])
        assert r.exit_code == 0, r.output
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = CliRunner().invoke(main, ["compile", str(dynamic_xml), "-o", str(tmp_path / "o.xml"), "--devices", "CPU",
                                      "--no-compare", "--no-cache", "--input-shape", "x:2,32"])
    assert r.exit_code == 0, r.output


def test_the_onnx_route_states_what_current_torch_needs():
    helped = " ".join(run("compile", "--help").output.split())
    readme = (ROOT / "README.md").read_text()
    for text in (helped, " ".join(readme.split())):
        assert "onnxscript" in text and "dynamo=False" in text


def test_ctrl_c_exits_130_in_one_line():
    @click.command()
    @user_errors
    def cmd():
        raise KeyboardInterrupt

    r = CliRunner().invoke(cmd, [])
    assert r.exit_code == INTERRUPTED == 130 and r.output.strip() == "hdp: interrupted"


@pytest.mark.slow
def test_ctrl_c_during_a_compile_exits_130_and_leaves_no_worker(branchy_xml, tmp_path):
    """SIGINT to the process group (what a terminal's Ctrl-C sends) while a compile measures: exit
    130, one line, no output written, no measuring worker left behind."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "o.xml"
    p = subprocess.Popen([sys.executable, "-m", "hdp", "compile", str(branchy_xml), "-o", str(out), "--target",
                          "virtual", "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         start_new_session=True, env=env, cwd=tmp_path)
    time.sleep(6)
    os.killpg(p.pid, signal.SIGINT)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 130, err.decode()
    assert err.decode().strip().splitlines()[-1] == "hdp: interrupted" and not out.exists()
    time.sleep(1)
    left = subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True, check=False).stdout.split()
    assert not left, left

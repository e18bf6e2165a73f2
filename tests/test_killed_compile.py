"""``hdp compile`` killed by SIGKILL at several stages (issue 12): no process is left (the measuring
worker dies with it), the next run leaves no temporary behind, and its outputs are byte-identical
to those of a run that was never interrupted."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from placement_helpers import MODELED_TOML as MODELED

from hdp.base.fsutil import KILL_ENV, is_temp
from hdp.runtime.measure.protocol import FAULT_ENV, PARENT_ENV

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _env(**extra) -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH", "")]))
    e["PYTHONUNBUFFERED"] = "1"
    e.pop(FAULT_ENV, None)
    e.pop(KILL_ENV, None)
    e.update(extra)
    return e


def workers_of(pid: int) -> list[int]:
    """Live processes started by ``pid`` as measuring workers (they carry its pid in their env)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
            state = (d / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if f"{PARENT_ENV}={pid}".encode() in env and state != "Z":
            out.append(int(d.name))
    return out


def temporaries(*roots: Path) -> list[str]:
    found = []
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            found += [os.path.join(dirpath, n) for n in dirnames + filenames if is_temp(n)]
    return found


def compile_argv(model: Path, work: Path, scenario: str) -> list[str]:
    common = ["-o", work / "out" / "p.xml", "--emit-ir", work / "out" / "m.hdp", "--dump-ir", work / "dump",
              "--timings", work / "out" / "t.json", "--cache-dir", work / "cache", "-v"]  # -v: a line per pass
    if scenario == "virtual":
        return ["compile", model, "--target", "virtual", "--method", "hetero-auto", "--timeout", "60", *common]
    return ["compile", model, "--target", work.parent / "m2.toml", "--method", "hsdag", "--budget", "0", "--seed", "1",
            "--set", "episodes=40", "--set", "samples=8", "--set", "hidden=16",
            "--set", f"checkpoint={work / 'ck' / 'policy.pt'}", "--no-compare", *common]


def run_to_end(argv) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "hdp", *map(str, argv)], env=_env(), capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    return r


def outputs(work: Path, scenario: str) -> dict[str, bytes]:
    out = {n: (work / "out" / n).read_bytes() for n in ("p.xml", "p.bin", "m.hdp")}
    if scenario == "hsdag":
        # the partition records training wall time, so the module (and its digest) differ between
        # two uninterrupted runs too; the placement itself (every affinity) and the weights must not
        out["p.xml"] = re.sub(rb'<module_digest value="[0-9a-f]+"', b"<module_digest", out["p.xml"])
        del out["m.hdp"]
    return out


def kill_when(proc: subprocess.Popen, trigger: str, deadline: float) -> None:
    """SIGKILL ``proc`` after the steps of ``trigger`` (joined by ``+``) have happened in turn:
    ``line:<text>`` a line on its stdout or stderr starts with the text; ``worker`` a measuring worker
    of it runs; ``sleep<seconds>`` that much time passed."""
    import selectors

    sel = selectors.DefaultSelector()
    for f in (proc.stdout, proc.stderr):
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_READ)
    buf = {proc.stdout: b"", proc.stderr: b""}
    for step in trigger.split("+"):
        while True:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError(f"step {step!r} of {trigger!r} never happened (exit {proc.poll()}; "
                                     f"stderr {buf[proc.stderr][-800:]!r})")
            for key, _ in sel.select(0.02):
                buf[key.fileobj] += key.fileobj.read() or b""
            if step.startswith("line:"):
                if any(ln.startswith(step[5:].encode()) for b in buf.values() for ln in b.splitlines()):
                    break
            elif step == "worker":
                if workers_of(proc.pid):
                    break
            elif step.startswith("sleep"):
                time.sleep(float(step[5:]))
                break
    proc.send_signal(signal.SIGKILL)


#: kill points inside a write: a temporary is left behind there
WRITE_POINTS = ("atomic-before-rename", "placed-saved", "pair-")

# (name, scenario, trigger or None, environment of the killed run)
STAGES = [
    ("after lower", "virtual", "line:[hdp] lower", {}),
    # the worker has loaded the model and hangs in the query (it no longer reads its pipe)
    ("support query in the worker", "virtual", "worker+sleep4", {FAULT_ENV: "hang"}),
    ("pass cache entry written", "virtual", None, {KILL_ENV: "atomic-before-rename"}),
    ("IR dump written", "virtual", None, {KILL_ENV: "atomic-before-rename:02-support.hdp"}),
    ("placed model saved, not committed", "virtual", None, {KILL_ENV: "placed-saved"}),
    ("between the .bin and .xml renames", "virtual", None, {KILL_ENV: "pair-bin-renamed"}),
    ("emit-ir written", "virtual", None, {KILL_ENV: "atomic-before-rename:m.hdp"}),
    # the parent dies while its worker runs the comparison's rounds (a timed trigger raced it: on a
    # fast host the comparison had finished before the kill)
    ("measuring the comparison", "virtual", None, {KILL_ENV: "worker-request:rounds"}),
    ("training hsdag", "hsdag", None, {KILL_ENV: "trained-episode:3"}),
    ("writing the checkpoint", "hsdag", None, {KILL_ENV: "atomic-before-rename:policy.pt"}),
]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    from conftest import build_branchy, save_model

    base = tmp_path_factory.mktemp("killed")
    model = save_model(build_branchy(), base / "model.xml")
    (base / "m2.toml").write_text(MODELED)
    refs = {}
    for scenario in ("virtual", "hsdag"):
        work = base / f"ref-{scenario}"
        run_to_end(compile_argv(model, work, scenario))
        refs[scenario] = outputs(work, scenario)
    return base, model, refs


@pytest.mark.parametrize("name, scenario, trigger, env", STAGES, ids=[s[0] for s in STAGES])
def test_killed_compile_leaves_nothing_and_rerun_is_identical(references, name, scenario, trigger, env):
    base, model, refs = references
    work = base / re.sub(r"\W+", "-", name)
    argv = compile_argv(model, work, scenario)
    proc = subprocess.Popen([sys.executable, "-m", "hdp", *map(str, argv)], env=_env(**env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if trigger is not None:
            kill_when(proc, trigger, time.monotonic() + 300)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL, f"{name}: exit {proc.returncode}"
    # no process left: the worker follows its parent (parent-death signal / watchdog within ~1 s)
    deadline = time.monotonic() + 10
    while workers_of(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not workers_of(proc.pid), f"{name}: workers of the killed hdp still run"
    if env.get(KILL_ENV, "").startswith(WRITE_POINTS):  # killed mid-write: it did leave a temporary (so the check below means something)
        assert temporaries(work), f"{name}: the kill left nothing to clean"
    # the next run cleans what the killed one left, and writes what an uninterrupted run writes
    run_to_end(argv)
    assert not temporaries(work), temporaries(work)
    mine = [t for t in temporaries(Path(tempfile.gettempdir())) if f"-{proc.pid}-" in t]
    assert not mine, mine
    assert outputs(work, scenario) == refs[scenario], f"{name}: rerun differs from an uninterrupted run"
    assert not workers_of(proc.pid)
    shutil.rmtree(work, ignore_errors=True)

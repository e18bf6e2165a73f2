"""Issue 35's interrupts: ``hdp compile MODEL -o o.xml --export-blob o.blob --emit-ir o.hdp --timings
o.json`` sent SIGINT at random delays; every run must leave all four outputs (with the ``.bin`` and
the blob's record) or none, and nothing in its temporary directory.

Each run is a fresh process in a fresh directory, with ``TMPDIR`` pointing at an empty directory of
its own (so whatever hdp or a library leaves in the system's temporary directory is seen). First one
uninterrupted run measures how long a compile takes here; the delays are then uniform between 0.2 s
and that time (so interrupts fall in every stage: imports, lowering, profiling, checking, writing).
A run counts as *clean* when it left all outputs or none, its temporary directory is empty, it
exited 0 or 130, and an interrupted run's last line is ``hdp: interrupted`` with no traceback.

    python bench/interrupt_outputs.py --runs 20            # tiny conv model, virtual target
    python bench/interrupt_outputs.py --runs 20 --json r.json

Prints one row per run and the counts; exits 1 when a run is not clean.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

OUTPUTS = ("o.xml", "o.bin", "o.blob", "o.blob.json", "o.hdp", "o.json")


def model(d: Path) -> Path:
    from conftest import build_branchy, save_model

    return save_model(build_branchy(), d / "m.xml")


def one_run(xml: Path, work: Path, delay: float | None, target: str, timeout: float) -> dict:
    """One compile in ``work`` (SIGINT after ``delay`` seconds; None: never); what it left."""
    tmp = work / "tmp"
    tmp.mkdir(parents=True)
    env = dict(os.environ, TMPDIR=str(tmp), XDG_CACHE_HOME=str(work / "xdg"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "hdp", "compile", str(xml), "-o", str(work / "o.xml"), "--target", target,
            "--method", "heft", "--export-blob", str(work / "o.blob"), "--emit-ir", str(work / "o.hdp"),
            "--timings", str(work / "o.json"), "--no-compare", "--no-cache"]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=work)
    sent = False
    if delay is not None:
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGINT)
            sent = True
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc = None
    seconds = time.monotonic() - t0
    present = [f for f in OUTPUTS if (work / f).exists()]
    left = sorted(str(q.relative_to(tmp)) for q in tmp.rglob("*"))
    hidden = sorted(q.name for q in work.iterdir() if q.name.startswith("."))  # hdp temporaries beside outputs
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    whole = len(present) == len(OUTPUTS)
    clean = ((whole or not present) and not left and not hidden and rc in (0, 130)
             and "Traceback" not in err and (rc != 130 or last == "hdp: interrupted")
             and (rc != 0 or whole))
    return {"delay": delay, "signalled": sent, "rc": rc, "seconds": round(seconds, 2), "outputs": len(present),
            "present": present, "temp_left": left[:5], "hidden_left": hidden[:5], "last": last[-160:],
            "traceback": "Traceback" in err, "clean": clean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json", default=None, help="also write the rows here")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="hdp-interrupts-"))
    rows = []
    try:
        xml = model(base)
        ref = one_run(xml, base / "ref", None, a.target, a.timeout)
        if ref["rc"] != 0:
            raise SystemExit(f"the uninterrupted compile failed: {ref}")
        full = ref["seconds"]
        rng = random.Random(a.seed)
        print(f"an uninterrupted compile takes {full:.1f} s here (load {os.getloadavg()[0]:.1f} on "
              f"{os.cpu_count()} cores); {a.runs} runs with SIGINT at uniform delays in [0.2, {full:.1f}] s\n")
        print("| run | delay s | rc | outputs | temp left | last line | clean |")
        print("|---:|---:|---:|---:|---|---|---|")
        for i in range(a.runs):
            r = one_run(xml, base / f"r{i}", rng.uniform(0.2, full), a.target, a.timeout)
            rows.append(r)
            print(f"| {i} | {r['delay']:.2f} | {r['rc']} | {r['outputs']}/{len(OUTPUTS)} | "
                  f"{', '.join(r['temp_left'] + r['hidden_left']) or '-'} | {r['last'].replace('|', '/')} | "
                  f"{'yes' if r['clean'] else 'NO'} |", flush=True)
            shutil.rmtree(base / f"r{i}", ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    n_clean = sum(r["clean"] for r in rows)
    every = sum(r["outputs"] == len(OUTPUTS) for r in rows)
    none = sum(r["outputs"] == 0 for r in rows)
    print(f"\n{n_clean} of {len(rows)} clean: {every} left every output, {none} none, "
          f"{len(rows) - every - none} some; {sum(r['traceback'] for r in rows)} tracebacks; "
          f"load {os.getloadavg()[0]:.1f} at the end")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")
    sys.exit(0 if n_clean == len(rows) else 1)


if __name__ == "__main__":
    main()

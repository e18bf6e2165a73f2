"""Measured against simulated throughput on a real two-device bed (issue 18).

(Serving plans of every shape, ``hdp compile -o DIR``, are checked by its successor,
``bench/plan_check.py``; this script measures placements, ``-o placed.xml``.)

For each model and N: ``hdp compile --objective throughput --requests N`` on the target (default
``virtual-2x1``), then ``hdp evaluate --objective throughput --requests N --plain CPU``: the
placement with N inferences in flight and the plain CPU compile with its own streams (every core),
their windows alternating in one worker, each as the Hodges-Lehmann estimate of windowed rates with
its 95 % interval (each window timed in steady state, between completions with N in flight), beside the rate the simulator predicted when placing, and the paired ratio of
the two (window beside window) with its verdict. Run under ``flock /work/measure.lock``; the load average is
printed with the table.

    python bench/throughput_check.py [--models resnet50,inception_v3,mobilenet_v2-tiny] [--requests 2,4]

After ``hdp calibrate`` on the target, ``hdp compile --objective throughput`` charges the fitted
hand-off per served subgraph (the table's ``simulated`` column includes it). The last two columns:
the simulated placed/plain ratio (the plain compile priced as min(N, cores) streams of the target's
one-thread CPU alone) and the paired measured ratio's error against it, which divides out the
host's drift between the calibration and the run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path


def zoo_xml(spec: str) -> Path | None:
    from hdp.zoo.models import _default_root

    stem = spec.replace(":", "_").replace(",", "_")
    found = sorted(p for p in _default_root().glob(f"{stem}-*/model.xml") if p.with_suffix(".bin").is_file())
    return found[0] if found else None


def hdp(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hdp", *map(str, args)], capture_output=True, text=True, timeout=3600)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,inception_v3,mobilenet_v2-tiny")
    ap.add_argument("--requests", default="2,4")
    ap.add_argument("--target", default="virtual-2x1")
    ap.add_argument("--method", default="optimal")
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as td:
        for spec in a.models.split(","):
            xml = zoo_xml(spec)
            if xml is None:
                print(f"{spec}: not in the zoo cache, skipped", file=sys.stderr)
                continue
            for n in [int(x) for x in a.requests.split(",")]:
                out = Path(td) / f"{spec.replace(':', '_')}-{n}.xml"
                r = hdp("compile", xml, "-o", out, "--target", a.target, "--method", a.method, "--objective",
                        "throughput", "--requests", n, "--no-compare", "-q")
                if r.returncode:
                    print(f"{spec} N={n}: compile failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                r = hdp("evaluate", out, "--objective", "throughput", "--requests", n, "--plain", "CPU",
                        "--runs", a.runs, "--json")
                if r.returncode:
                    print(f"{spec} N={n}: evaluate failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                res = json.loads(r.stdout[r.stdout.index("{"):])
                rows.append((spec, n, res))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"target {a.target}, method {a.method} --objective throughput; load average {load:.1f} on "
          f"{os.cpu_count()} cores; rates in inferences/s, 95 % CI in brackets")
    print(f"{'model':<20} {'N':>2} {'placement':<18} {'subm.':>5} {'CPU devices':<14} {'simulated':>10} "
          f"{'measured':>26} {'meas/sim [95 % CI]':>22} {'plain CPU (streams)':>28} {'placed/plain, paired [95 % CI]':>32} "
          f"{'simulated':>9} {'drift out':>9}")
    for spec, n, res in rows:
        p, q, sim = res["placed"], res["plain"], res["simulated_per_second"]
        pe, pl, ph = p["estimate"]
        qe, ql, qh = q["estimate"]
        ratio = f"{pe / sim:.3f} [{pl / sim:.3f}, {ph / sim:.3f}]" if sim else "-"
        v = res.get("placed_vs_plain")  # time per inference, placed over plain: its inverse is the rate ratio
        paired = "-"
        if v and v["low"] > 0 and math.isfinite(v["high"]):
            paired = f"{1 / v['ratio']:.3f} [{1 / v['high']:.3f}, {1 / v['low']:.3f}] {v['verdict']}"
        elif v:
            paired = f"{1 / v['ratio']:.3f} (unresolved)"
        ps = res.get("simulated_plain_per_second")
        want = sim / ps if sim and ps else float("nan")
        drift = (1 / v["ratio"]) / want - 1 if v and v["ratio"] > 0 and want == want else float("nan")
        print(f"{spec:<20} {n:>2} {p['what']:<18} {p.get('submodels', 0):>5} {p.get('pinning', ''):<14} "
              f"{sim or float('nan'):>10.1f} {pe:>9.1f} [{pl:>6.1f}, {ph:>6.1f}] {ratio:>22} "
              f"{qe:>11.1f} [{ql:>6.1f}, {qh:>6.1f}] {paired:>32} {want:>9.3f} {drift:>+9.1%}")


if __name__ == "__main__":
    main()

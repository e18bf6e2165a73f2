"""The plan hdp writes for throughput against the plain compile with its own streams (issue 30's done-when;
the successor of bench/throughput_check.py for serving plans).

For each model and N: ``hdp compile MODEL -o DIR --target T --objective throughput --requests N`` (the
default method, auto, which keeps a plan of any shape), then ``hdp evaluate DIR/plan.json --objective
throughput --requests N --plain CPU --runs R --json``: the plan served with N in flight beside the plain
CPU compile with its own streams (every core), windows alternating in one process; the table gives
the shape and plan kept, both rates (Hodges-Lehmann estimate of the windows, 95 % interval), the paired
ratio (plan's requests/s over the plain compile's) with its interval, and whether the interval
includes or exceeds 1.0 (the bar). Run under ``flock /work/measure.lock`` on a quiet host; the load
average is printed with the table.

    python bench/plan_check.py [--models resnet50,inception_v3,bert,mobilenet_v2] [--requests 2,4] [--runs 12]
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


def hdp(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hdp", *map(str, args)], capture_output=True, text=True,
                          timeout=7200, check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,inception_v3,bert,mobilenet_v2")
    ap.add_argument("--requests", default="2,4")
    ap.add_argument("--target", default="virtual-2x1")
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--budget", type=float, default=60.0)
    a = ap.parse_args()
    from hdp.runtime.measure.stats import hodges_lehmann

    rows = []
    with tempfile.TemporaryDirectory() as td:
        for spec in a.models.split(","):
            xml = Path(td) / f"{spec.replace(':', '_')}.xml"
            r = hdp("zoo", spec, "-o", xml)
            if r.returncode:
                print(f"{spec}: not built: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                continue
            for n in [int(x) for x in a.requests.split(",")]:
                out = Path(td) / f"{spec.replace(':', '_')}-{n}.plan"
                r = hdp("compile", xml, "-o", out, "--target", a.target, "--objective", "throughput", "--requests", n,
                        "--budget", a.budget, "--no-compare", "-q")
                if r.returncode:
                    print(f"{spec} N={n}: compile failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                r = hdp("evaluate", out / "plan.json", "--objective", "throughput", "--requests", n, "--plain", "CPU",
                        "--runs", a.runs, "--json")
                if r.returncode:
                    print(f"{spec} N={n}: evaluate failed: {r.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
                    continue
                res = json.loads(r.stdout[r.stdout.index("{"):])
                plan = json.loads((out / "plan.json").read_text())
                rows.append((spec, n, plan, res))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"target {a.target}, auto --objective throughput (plans of every shape); load average {load:.1f} on "
          f"{os.cpu_count()} cores; requests/s, 95 % CI in brackets")
    print(f"{'model':<14} {'N':>2} {'shape':<9} {'plan':<22} {'plan':>24} {'plain CPU (streams)':>24} "
          f"{'plan/plain paired [95 % CI]':>32} {'bar':>5}")
    held = 0
    for spec, n, plan, res in rows:
        def est(rates):
            if len(rates) < 2:
                return (rates[0] if rates else float("nan")), float("nan"), float("nan")
            return hodges_lehmann(rates)
        pe, pl, ph = est(res["rates"])
        qe, ql, qh = est(res["plain_rates"])
        c = res.get("comparison")
        paired, ok = "-", False
        if c and c["low"] > 0 and math.isfinite(c["high"]):
            paired = f"{1 / c['ratio']:.3f} [{1 / c['high']:.3f}, {1 / c['low']:.3f}] {c['verdict']}"
            ok = 1 / c["low"] >= 1.0  # the interval includes or exceeds 1.0
        held += ok
        def ci(e, lo, hi):
            return f"{e:>8.1f} [{lo:>6.1f}, {hi:>6.1f}]" if math.isfinite(lo) and math.isfinite(hi) else f"{e:>8.1f} (no CI)      "

        desc = " | ".join("+".join(r["device"] + (f" x{r.get('streams', 1)}" if r.get("streams", 1) > 1 else "")
                                   for r in st["replicas"]) for st in plan["stages"])
        print(f"{spec:<14} {n:>2} {plan['shape']:<9} {desc:<22} {ci(pe, pl, ph):>24} {ci(qe, ql, qh):>24} "
              f"{paired:>32} {'yes' if ok else 'NO':>5}")
    print(f"{held} of {len(rows)} plans serve at least as fast as the plain CPU compile with its own streams "
          f"(paired ratio's 95 % interval includes or exceeds 1.0)")


if __name__ == "__main__":
    main()

"""Learned placements on the real concurrent bed (issue 22): measured against heft's and the best
single device, interleaved, with confidence intervals.

    python bench/learned_bed.py MODEL.xml [MODEL2.xml ...] [--towers] [--methods heft,hsdag:simulate,placeto,rnn-placer]
                                [--target virtual-2x1] [--rounds 60] [--json out.json]

For each model every method places it with ``hdp compile --execution concurrent`` on the target (the
learned ones with their default budgets and seed 0; the compile's own simulated figure is kept),
then every placement runs under hdp's concurrent executor beside each single device of the target,
all in one process, one inference each per round in a balanced rotating order
(:func:`bench.concurrent_table.measure_candidates`); each is compared with heft's placement (paired
log-ratios, Hodges-Lehmann estimate, 95 % simultaneous intervals). ``--towers`` adds the
two-tower model of bench/concurrent_table.py (6 + 6 MatMuls, unplaced). Run it under
``flock /work/measure.lock`` with a calibration of the target in hdp's cache, and report the load
average it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from concurrent_table import _inputs, measure_candidates, two_towers  # noqa: E402


def place(xml: Path, method: str, target: str, out: Path) -> dict:
    """``hdp compile --execution concurrent``: the written file, its wall seconds and the simulated figure."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "hdp", "compile", str(xml), "-o", str(out), "--target", target,
                        "--method", method, "--execution", "concurrent", "--seed", "0", "--no-compare"],
                       capture_output=True, text=True)
    secs = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{xml.name} {method}: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    sim = re.search(r"concurrent executor: ([0-9.]+) ms", r.stdout)
    return {"file": str(out), "seconds": secs, "simulated_ms": float(sim.group(1)) if sim else None,
            "stdout": r.stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--towers", action="store_true")
    ap.add_argument("--methods", default="heft,hsdag:simulate,placeto,rnn-placer")
    ap.add_argument("--target", default="virtual-2x1")
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    from hdp.runtime.placed.model import compile_placed, read_placed
    from hdp.target.devices import make_core
    from hdp.target.target import load_target

    tmp = Path(tempfile.mkdtemp(prefix="hdp-learned-bed-"))
    models = list(a.models) + ([two_towers(tmp, placed=False)] if a.towers else [])
    methods = a.methods.split(",")
    if methods[0] != "heft":
        raise SystemExit("--methods must start with heft (the comparison's base)")
    tgt = load_target(a.target)
    out = []
    for xml in models:
        placed = {m: place(xml, m, a.target, tmp / f"{xml.stem}-{m}.xml") for m in methods}
        core = make_core(tgt)
        cands = {m: compile_placed(p["file"], tgt, execution="concurrent") for m, p in placed.items()}
        model = read_placed(placed["heft"]["file"]).model
        for d in tgt.device_names:
            cands[f"single:{d}"] = core.compile_model(model, d)
        load0 = os.getloadavg()[0]
        res = measure_candidates(cands, _inputs(model), a.rounds, "heft")
        res.update(model=str(xml), load=(load0, os.getloadavg()[0]),
                   placed={m: {k: v for k, v in p.items() if k != "stdout"} for m, p in placed.items()})
        out.append(res)
        print(f"## {xml.name} on {a.target}: {a.rounds} interleaved rounds, load average {load0:.1f} -> {res['load'][1]:.1f}")
        print("| candidate | compile s | simulated ms | measured median ms | vs heft (95 % simultaneous CI) |")
        print("|---|---:|---:|---:|---|")
        for n, ms in res["median_ms"].items():
            p = placed.get(n, {})
            c = res["comparisons"].get(n)
            vs = "-" if c is None else f"x{c['ratio']:.3f} ({c['low']:.3f}…{c['high']:.3f}): {c['verdict']}"
            sim = f"{p['simulated_ms']:.2f}" if p.get("simulated_ms") else "-"
            secs = f"{p['seconds']:.0f}" if p else "-"
            print(f"| {n} | {secs} | {sim} | {ms:.2f} | {vs} |")
        print()
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

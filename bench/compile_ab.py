"""``hdp compile`` of two checkouts, A/B: the command ``compile_steps.py`` runs, from empty caches,
alternating A and B run by run (the order flipped every other round), each with its own code
(``PYTHONPATH`` and working directory set to its checkout). Prints each stage's median seconds
[min-max] per checkout, and B's whole-command wall time against A's with a 95 % interval
(:func:`hdp.runtime.stats.compare`, paired by round).

    flock /work/measure.lock python bench/compile_ab.py --a ../base --b . --reps 10 [--target virtual-f32] [-- --no-check]

Keep ``XDG_CACHE_HOME`` and ``NUMBA_CACHE_DIR`` pointed at a scratch directory (with the zoo model
copied in) when other sessions share the machine: the runs then leave the user's cache alone.

Arguments after ``--`` go to ``hdp compile`` (e.g. ``--no-check``). Each checkout runs one warm-up
round first, not counted: Numba keeps compiled kernels per source file, so per checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one(tree: Path, xml: str, work: Path, tag: str, target: str, method: str,
        extra: list[str]) -> tuple[float, dict[str, float]]:
    tim = work / f"t-{tag}.json"
    cmd = [sys.executable, "-m", "hdp", "compile", xml, "-o", str(work / f"p-{tag}.xml"), "--target", target,
           "--method", method, "--no-compare", "-q", "--cache-dir", str(work / f"cache-{tag}"), "--timings", str(tim),
           *extra]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, env=os.environ | {"PYTHONPATH": str(tree)},
                       check=False)
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"hdp compile ({tree}) failed:\n{p.stdout}\n{p.stderr}")
    rows: dict[str, float] = {}
    data = json.loads(tim.read_text())
    for r in data["rows"] if isinstance(data, dict) else data:
        if not r.get("stage"):
            rows[r["pass"]] = rows.get(r["pass"], 0.0) + float(r["seconds"])
    return wall, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, type=Path, help="checkout A (the reference)")
    ap.add_argument("--b", required=True, type=Path, help="checkout B")
    ap.add_argument("--model", default="inception_v3", help="a zoo model name")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--method", default="optimal")
    ap.add_argument("--warmup", type=int, default=1, help="rounds run first and not counted (Numba's cache is per checkout)")
    ap.add_argument("extra", nargs="*", help="more hdp compile arguments (after --)")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hdp import zoo
    from hdp.runtime.stats import compare

    xml = str(zoo.cached(a.model))
    trees = {"A": a.a.resolve(), "B": a.b.resolve()}
    walls: dict[str, list[float]] = {"A": [], "B": []}
    stages: dict[str, dict[str, list[float]]] = {"A": {}, "B": {}}
    loads = []
    with tempfile.TemporaryDirectory(prefix="hdp-compile-ab-") as work:
        for i in range(-a.warmup, a.reps):
            for name in ("A", "B") if i % 2 == 0 else ("B", "A"):
                wall, rows = one(trees[name], xml, Path(work), f"{name}{i}", a.target, a.method, a.extra)
                if i < 0:
                    continue
                walls[name].append(wall)
                for k, v in rows.items():
                    stages[name].setdefault(k, []).append(v)
            loads.append(os.getloadavg()[0])
    print(f"hdp compile {a.model} --target {a.target} --method {a.method} --no-compare {' '.join(a.extra)}, {a.reps} "
          f"rounds from empty caches, A/B alternating; load average {min(loads):.1f}-{max(loads):.1f}")
    print(f"A = {trees['A']}, B = {trees['B']}; seconds, median [min-max]:\n")
    print("| stage | A | B |\n|---|---|---|")
    for k in stages["A"]:
        cells = [f"{statistics.median(x):.2f} [{min(x):.2f}-{max(x):.2f}]" if (x := stages[n].get(k)) else "-"
                 for n in ("A", "B")]
        print(f"| {k} | {cells[0]} | {cells[1]} |")
    cells = [f"{statistics.median(walls[n]):.2f} [{min(walls[n]):.2f}-{max(walls[n]):.2f}]" for n in ("A", "B")]
    print(f"| whole command (wall) | {cells[0]} | {cells[1]} |\n")
    print(compare(walls["A"], walls["B"], names=("A", "B")).text())


if __name__ == "__main__":
    main()

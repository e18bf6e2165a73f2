"""Seconds of each pass of ``hdp compile`` on a cache miss, as a user waits for them.

pytest-benchmark (``bench_steps.py``) times a pass inside one long-lived process, where OpenVINO is
imported once and a worker started "ahead" is ready before the pass asks for it. ``hdp compile`` is
a fresh process: it starts its worker, then lowers (importing OpenVINO itself) while the worker
imports OpenVINO and reads the model, and only then runs ``support`` and ``profile``. This script
runs that command ``--reps`` times, each from an empty ``--cache-dir``, and prints each pass's
median [min-max] from ``--timings``.

    python bench/compile_steps.py --model inception_v3 --reps 5      # ~1 min
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="inception_v3", help="a zoo model name")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--method", default="optimal")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from hdp.zoo import models as zoo

    xml = zoo.cached(a.model)
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="hdp-compile-steps-") as work:
        for i in range(a.reps):
            tim = Path(work) / f"t{i}.json"
            p = subprocess.run([sys.executable, "-m", "hdp", "compile", str(xml), "-o", str(Path(work) / f"p{i}.xml"),
                                "--target", "virtual", "--method", a.method, "--no-compare", "-q",
                                "--cache-dir", str(Path(work) / f"cache{i}"), "--timings", str(tim)],
                               capture_output=True, text=True, cwd=ROOT, check=False)
            if p.returncode:
                raise SystemExit(f"hdp compile failed:\n{p.stdout}\n{p.stderr}")
            data = json.loads(tim.read_text())
            for r in data["rows"] if isinstance(data, dict) else data:
                if not r.get("stage"):
                    rows.setdefault(r["pass"], []).append(float(r["seconds"]))
    load = os.getloadavg()[0]
    print(f"hdp compile {a.model} --target virtual --method {a.method} --no-compare, {a.reps} runs from empty "
          f"caches (load average {load:.1f}); seconds per pass, median [min-max]:\n")
    print("| pass | seconds |\n|---|---|")
    for name, xs in rows.items():
        print(f"| {name} | {statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}] |")


if __name__ == "__main__":
    main()

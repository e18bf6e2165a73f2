"""A mixed serving plan under load for a long while (issue 30's load bar).

Writes a mixed plan of a zoo model on ``virtual-2x1`` (default ResNet-50): its tie groups cut in two
at the middle of their work, the first half on CPU, the second replicated on CPU and CPU_B (the
plan written and checked as ``hdp compile -o DIR`` writes one), then serves it in this process with
``--requests`` in flight (default 8) for ``--seconds`` (default 600), as ``hdp serve`` does, the
recorded seeded requests run through it again every ``--check-every`` seconds and compared with the
unsplit model. It reports: errors (the bar: zero), this process's resident memory after the first
minute and at the end (the bar: at most 5 % growth), the p99 latency of the first and of the last
minute's windows (the bar: within 15 %), and the largest relative error of the sampled requests
against the tolerance. Run under ``flock /work/measure.lock`` on a quiet host for the figures;
``--seconds 30`` is a smoke run.

    python bench/plan_load.py [--zoo resnet50] [--requests 8] [--seconds 600] [--check-every 30]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def rss() -> float:
    """Resident bytes of this process now."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) * 1024
    return float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", default="resnet50")
    ap.add_argument("--target", default="virtual-2x1")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--check-every", type=float, default=30.0)
    ap.add_argument("--minute", type=float, default=60.0, help="seconds of the first and last 'minute'")
    a = ap.parse_args()
    import numpy as np

    from hdp.pipeline.compile import compile_model
    from hdp.placement.plan import GroupPlan, Replica
    from hdp.placement.problem import problem_of
    from hdp.runtime.serve.plan_serve import serve_plan
    from hdp.runtime.serve.plan_write import write_plan
    from hdp.runtime.serve.verify import tolerance
    from hdp.target.target import load_target
    from hdp.zoo.models import export

    tgt = load_target(a.target)
    td = Path(tempfile.mkdtemp(prefix="hdp-plan-load-"))
    xml = export(a.zoo, td / "model.xml")
    r = compile_model(xml, td / "placed.xml", tgt, method="single:CPU", check=False, compare=False,
                      passes="support,profile,partition{method=single:CPU},assign")
    m = r.module
    p = problem_of(m, tgt.device_names)
    work = np.cumsum(np.where(p.allowed[:, 0], p.time[:, 0], 0.0))
    cut = int(np.searchsorted(work, work[-1] / 2)) + 1
    k = p.n_groups
    plan = GroupPlan(np.array([0 if g < cut else 1 for g in range(k)], np.int64),
                     ((Replica(0),), (Replica(0), Replica(1))))
    out = td / "mixed.plan"
    written = write_plan(m, out, tgt, requests=a.requests, plan=plan)
    print(f"{a.zoo} on {a.target}: {written.shape} plan {written.describe()} ({len(written.stages[0].groups)} + "
          f"{len(written.stages[1].groups)} tie groups) -> {out}; {a.requests} in flight for {a.seconds:g} s; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    t0 = time.perf_counter()
    marks: list[tuple[float, float, float]] = []  # (seconds since start, rss, p99)

    def on_window(i, w):
        marks.append((time.perf_counter() - t0, rss(), w.p99))

    tol = tolerance(tgt, written.device_names())
    s = serve_plan(out, requests=a.requests, seconds=a.seconds, tolerance=tol, on_window=on_window,
                   check_every=a.check_every)
    if not s.ok:
        print(f"FAILED: {s.error}")
        return
    start = marks[0][0]  # serving began (after loading, the check and the warm-up)
    first = [x for x in marks if x[0] - start <= a.minute]
    last = [x for x in marks if x[0] >= marks[-1][0] - a.minute]
    rss0, rss1 = first[-1][1], marks[-1][1]
    p99a, p99b = float(np.median([x[2] for x in first])), float(np.median([x[2] for x in last]))
    est = s.estimate()
    ci = f"95 % CI {est[1]:.1f}-{est[2]:.1f}" if np.isfinite(est[1]) and np.isfinite(est[2]) else "no 95 % interval"
    print(f"served {len(s.rates)} windows of {s.per_batch}: {est[0]:.1f} requests/s ({ci}); "
          f"errors 0 (a request that fails stops the run)")
    print(f"resident memory: {rss0 / 2**20:.1f} MiB after the first {a.minute:g} s, {rss1 / 2**20:.1f} MiB at the end: "
          f"{rss1 / rss0 - 1:+.1%} (bar: at most +5 %)")
    print(f"p99 latency (median over the windows): first {a.minute:g} s {p99a * 1e3:.2f} ms, last {p99b * 1e3:.2f} ms: "
          f"{p99b / p99a - 1:+.1%} (bar: within 15 %)")
    print(f"outputs: {s.checked} seeded requests at the start and {len(s.checks)} samples while serving, largest "
          f"relative error {max([s.check_error, *s.checks]):.1e} (tolerance {tol:.0e}): "
          f"{'match' if s.check_passed else 'DIFFER'}")


if __name__ == "__main__":
    main()

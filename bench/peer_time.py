"""Time to the DP's value: hdp against msr-fiddle/dnn-partitioning's throughput DP (issue 19),
interleaved, with a confidence interval (hdp.runtime.measure.stats).

Per round, one run of each, in a balanced rotating order (:func:`hdp.runtime.measure.stats.round_order`):

- ``their DP``: ``dp.exe < workload.json`` as a process, wall time (their reading, contractions,
  ideals and DP; the process start included);
- ``hdp``: in this process, with its kernels compiled and loaded (a library user's or a server's
  case): read the JSON, lower it, build the problem and run :func:`hdp.placement.maxload_search.contiguous_split`
  (the first stage of ``hdp place --method optimal``), until hdp holds a split no worse than
  their DP's. Each hdp split is checked against the DP's value, scored by hdp's pricing.

``hdp / DP`` is the Hodges-Lehmann ratio of the paired times with its 95 % interval (one per
workload; not a family). A fresh ``hdp place`` process also pays Python's start and imports
(about a second, not measured here).

    python bench/peer_time.py --workloads DIR --dp-exe dp.exe [--rounds 20] [--max-dp-seconds 15]
                              [--only NAME ...] [--out bench/results/peer-time-DATE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer_table import WORKLOADS, warm_up  # noqa: E402


def their_dp(exe: str, wf: Path, timeout: float) -> tuple[float, dict | None]:
    t0 = time.perf_counter()
    with open(wf, "rb") as f:
        r = subprocess.run([exe], stdin=f, capture_output=True, timeout=timeout)
    secs = time.perf_counter() - t0
    return secs, (json.loads(r.stdout) if r.returncode == 0 else None)


def hdp_run(wf: Path) -> tuple[float, float, dict]:
    from hdp.costgraph import read
    from hdp.costgraph.graph import lower, max_load_data, problem_for
    from hdp.placement import maxload_search as MS

    t0 = time.perf_counter()
    m = lower(read(wf, "dnn-partitioning"))
    p = problem_for(m)
    ml = max_load_data(p, m)
    r = MS.contiguous_split(p, ml)
    secs = time.perf_counter() - t0
    return secs, r.value, {"ideals": r.info.get("ideals"), "exact": r.exact}


def dp_value(wf: Path, split: dict) -> float:
    from hdp.costgraph import read
    from hdp.costgraph.graph import lower, max_load_data, problem_for
    from hdp.costgraph.peer import read_split
    from hdp.placement import maxload as ML

    m = lower(read(wf, "dnn-partitioning"))
    p = problem_for(m)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"peer_time_{os.getpid()}.json"
    tmp.write_text(json.dumps(split))
    try:
        dev = read_split(str(tmp), m, p.devices)
    finally:
        tmp.unlink()
    return ML.max_load(p, max_load_data(p, m), p.structure.group_devices(dev))


def interval(row) -> str:
    if not np.isfinite(row["high"]):
        return "too few rounds for an interval"
    return f"{row['low']:.3g}…{row['high']:.3g}"


def main() -> None:
    from hdp.runtime.measure.stats import compare, round_order

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", type=Path, required=True)
    ap.add_argument("--dp-exe", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--max-dp-seconds", type=float, default=15.0,
                    help="workloads whose DP takes longer (first run) get 3 rounds")
    ap.add_argument("--max-nodes", type=int, default=800)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    warm_up()
    load_start = os.getloadavg()
    rows = []
    for name in WORKLOADS:
        if a.only and not any(o in name for o in a.only):
            continue
        wf = a.workloads / "throughput-inputs" / f"{name}.json"
        n = len(json.loads(wf.read_text())["nodes"])
        if n > a.max_nodes:
            continue
        try:
            first, split = their_dp(a.dp_exe, wf, 120)
        except subprocess.TimeoutExpired:
            print(f"{name}: their DP did not finish in 120 s; skipped", flush=True)
            continue
        want = dp_value(wf, split)
        rounds = a.rounds if first <= a.max_dp_seconds else 3
        t = np.zeros((rounds, 2))
        info = {}
        for r in range(rounds):
            for k in round_order(r, 2):
                if k == 0:
                    t[r, 0], _ = their_dp(a.dp_exe, wf, 600)
                else:
                    t[r, 1], v, info = hdp_run(wf)
                    assert v <= want * (1 + 1e-9), (name, v, want)
        c = compare(t[:, 0], t[:, 1], names=("their DP", "hdp"))
        row = {"workload": name, "nodes": n, "rounds": rounds, "dp_value": want, "dp_median": float(np.median(t[:, 0])),
               "hdp_median": float(np.median(t[:, 1])), "ratio": c.ratio, "low": c.low, "high": c.high,
               "verdict": c.verdict, "worst_round": float((t[:, 1] / t[:, 0]).max()), **info}
        rows.append(row)
        print(f"{name}: their DP median {row['dp_median']:.4f} s, hdp {row['hdp_median']:.4f} s, hdp/DP "
              f"{c.ratio:.3g} (95 % CI {c.low:.3g}…{c.high:.3g}; worst round {row['worst_round']:.3g}), {rounds} rounds",
              flush=True)
    meta = {"load_average_at_start": load_start, "load_average_at_end": os.getloadavg(), "cpus": os.cpu_count(),
            "dp_exe": a.dp_exe}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{a.out}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
        lines = [f"Time to their DP's value (s), interleaved; hdp in-process (read, lower, problem, contiguous DP), "
                 f"their dp.exe as a process. Load average at start {load_start[0]:.1f}, at end "
                 f"{meta['load_average_at_end'][0]:.1f}, {meta['cpus']} cores.", "",
                 "| workload | nodes | rounds | their DP median | hdp median | hdp / DP (95 % CI) | hdp / DP, worst round |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['workload']} | {r['nodes']} | {r['rounds']} | {r['dp_median']:.4f} | {r['hdp_median']:.4f} | "
                  f"{r['ratio']:.3g} ({interval(r)}) | "
                  f"{r['worst_round']:.3g} |" for r in rows]
        Path(f"{a.out}.md").write_text("\n".join(lines) + "\n")
        print(f"-> {a.out}.json, {a.out}.md")


if __name__ == "__main__":
    main()

"""hdp's placers on the throughput workloads of msr-fiddle/dnn-partitioning (Tarnawski et al.,
NeurIPS 2020), beside their DP and the human experts (issue 19).

For every workload of their ``throughput-inputs/`` (layer and operator graphs, inference and
training) this prints and writes one row: their DP's max-load (its split, as their DP wrote it,
scored here), the human expert's (their ``human-experts/`` split; the inference split applied to
the training graph through colour classes, as they do), and hdp's:

- ``optimal``: :func:`hdp.placement.maxload_search.optimize` — the exact contiguous DP
  (:mod:`hdp.placement.ideals`, its value and time reported on their own), heuristic pipelines,
  the multilevel MILP, then the MILP over every group asked to beat them, within ``--time-limit``
  seconds; its proven lower bound and gap;
- ``heuristic``: the heuristic stage alone;
- ``auto``: the default method, simulated on this problem (no target to measure on);
- ``heft``: HEFT list scheduling on the same problem (it minimises one request's makespan, within
  the memory caps), scored by max-load;
- ``single``: every op on one accelerator.

Every split hdp writes is scored by ``tests/peer_scoring.py``, an independent re-implementation
of their scoring rule that knows nothing of hdp, in strict mode (memory caps, colour classes and
support checked): the figures in the table are that scorer's. "time to DP" is the time hdp's
optimiser took to first hold a placement no worse than the DP's (its trajectory), beside the
DP's own time when ``--dp-exe`` runs their DP here.

    python bench/peer_table.py --workloads DIR [--dp-splits DIR] [--dp-exe dp.exe] [--time-limit 60]
                               [--only NAME ...] [--out bench/results/peer-DATE]

``DIR`` is a checkout of their repository (``throughput-inputs/``, ``human-experts/``);
``--dp-splits`` a directory of their DP's splits named ``<LayerGraphs|OperatorGraphs>_<name>.split.json``
(used when ``--dp-exe`` is not given).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import peer_scoring  # noqa: E402  (tests/: the independent scorer)

WORKLOADS = [f"LayerGraphs/{m}_{p}" for m in ("bert24", "gnmt", "resnet50", "inceptionv3")
             for p in ("inference", "training")] + \
            [f"OperatorGraphs/{m}" for m in ("bert_l-3_inference", "bert_l-3_training", "bert_l-6_inference",
                                            "bert_l-6_training", "bert_l-12_inference", "bert_L-12_training",
                                            "resnet50_inference", "resnet50_training")]


def run_dp(exe: str, workload: Path, timeout: float) -> tuple[dict | None, float, str]:
    """(their DP's split or None, wall seconds, status) of ``exe < workload``."""
    t0 = time.perf_counter()
    try:
        with open(workload, "rb") as f:
            r = subprocess.run([exe], stdin=f, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.perf_counter() - t0, f"timeout {timeout:g} s"
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        return None, secs, f"exit {r.returncode}"
    return json.loads(r.stdout), secs, "ok"


def score(workload: Path, split: dict) -> float | None:
    try:
        return peer_scoring.score(workload, split, strict=True)[0]
    except ValueError as e:
        print(f"  independent scorer refused a split: {e}", file=sys.stderr)
        return None


def hdp_rows(workload: Path, time_limit: float, seed: int, out_dir: Path | None, dp_value: float | None,
             methods=("optimal", "heuristic", "heft", "single")) -> dict:
    from hdp.costgraph import read
    from hdp.costgraph.graph import lower, max_load_data, problem_for
    from hdp.costgraph.peer import split_json
    from hdp.placement import maxload as ML
    from hdp.placement import maxload_search as MS
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import Heft

    t0 = time.perf_counter()
    m = lower(read(workload, "dnn-partitioning"))
    p = problem_for(m)
    ml = max_load_data(p, m)
    load_secs = time.perf_counter() - t0  # read, lower, problem: what their DP's wall time includes too
    res: dict = {"nodes": m.graph.n_ops, "groups": p.n_groups, "devices": p.n_devices, "load_seconds": load_secs}

    def record(name, gd, secs, **extra):
        load, _ = ML.loads(p, ml, gd)
        doc = split_json(m, p.devices, p.op_devices(gd), load)
        if out_dir is not None:
            (out_dir / f"{workload.stem}.{name}.split.json").write_text(json.dumps(doc))
        res[name] = {"max_load": score(workload, doc), "hdp_max_load": float(load.max()), "seconds": secs,
                     "within_caps": ML.feasible(p, ml, gd), **extra}

    if "optimal" in methods:
        t0 = time.perf_counter()
        s = MS.optimize(p, ml, time_limit=time_limit, seed=seed)
        secs = time.perf_counter() - t0
        traj = s.info.get("trajectory", [])
        to_dp = next((t for t, v, _ in traj if dp_value is not None and v <= dp_value * (1 + 1e-9)), None)
        cont = s.info.get("contiguous", {})
        t_cont = next((t for t, _, st in traj if st == "contiguous dp"), None)
        record("optimal", s.group_device, secs, bound=s.bound, gap=s.gap, status=s.status, time_to_dp=to_dp,
               trajectory=[(round(t, 3), v, st) for t, v, st in traj],
               contiguous={k: v for k, v in cont.items() if k != "merged"} | {"seconds_from_start": t_cont,
                                                                              "merged": cont.get("merged")})
    if "heuristic" in methods:
        t0 = time.perf_counter()
        gd, _ = MS.heuristic(p, ml, seed=seed)
        record("heuristic", gd, time.perf_counter() - t0)
    if "auto" in methods:  # the default method, simulated (no target to measure on)
        from hdp.base.errors import HdpError
        from hdp.placers.options import method_from

        t0 = time.perf_counter()
        try:
            gd = place(method_from("auto"), PlaceContext(module=m, problem=p, seed=seed)).group_device
            record("auto", np.asarray(gd, np.int64), time.perf_counter() - t0)
        except HdpError as e:  # a refusal is a result too
            res["auto"] = {"max_load": None, "seconds": time.perf_counter() - t0, "error": str(e), "within_caps": None}
    if "heft" in methods:  # memory-aware on this problem (its caps), placing one request's makespan
        t0 = time.perf_counter()
        gd = place(Heft(), PlaceContext(module=m, problem=p, seed=seed)).group_device
        record("heft", np.asarray(gd, np.int64), time.perf_counter() - t0)
    acc = [d for d in range(p.n_devices) if not ml.free_comm[d] and p.allowed[:, d].all()]
    if acc and "single" in methods:
        record("single", p.single(acc[0]).astype(np.int64), 0.0)
    return res


def warm_up() -> None:
    from hdp.costgraph import read
    from hdp.costgraph.graph import lower, max_load_data
    from hdp.placement import maxload_search as MS
    from hdp.placement.problem import build_problem
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import Heft

    m = lower(read(Path(__file__).resolve().parents[1] / "tests/data/dnn_partitioning/bert24_inference.json"))
    p = build_problem(m)
    ml = max_load_data(p, m)
    MS.heuristic(p, ml, restarts=1)
    MS.contiguous_split(p, ml)
    place(Heft(), PlaceContext(module=m, problem=p))


def fmt(x, nd=2):
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", type=Path, default=None, help="their repository (required unless --render)")
    ap.add_argument("--dp-splits", type=Path, default=None)
    ap.add_argument("--dp-exe", default=None)
    ap.add_argument("--dp-timeout", type=float, default=600.0)
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--methods", default="optimal,heuristic,auto,heft,single",
                    help="hdp methods to run (comma-separated): optimal, heuristic, auto, heft, single")
    ap.add_argument("--render", type=Path, default=None,
                    help="only write OUT.md from a JSON this script wrote (with --add's columns)")
    ap.add_argument("--add", type=Path, default=None,
                    help="a JSON this script wrote with other methods: their columns join the table")
    ap.add_argument("--out", type=Path, default=None, help="write OUT.json, OUT.md and OUT-splits/")
    a = ap.parse_args()
    if a.render:
        doc = json.loads(a.render.read_text())
        rows = doc["rows"]
        if a.add:
            extra = {r["workload"]: r for r in json.loads(a.add.read_text())["rows"]}
            for r in rows:
                for k, v in extra.get(r["workload"], {}).items():
                    r.setdefault(k, v)
        Path(f"{a.out}.json").write_text(json.dumps({"meta": doc["meta"], "rows": rows}, indent=1, default=float))
        Path(f"{a.out}.md").write_text(markdown(rows, doc["meta"]))
        print(f"-> {a.out}.json, {a.out}.md")
        return
    names = [w for w in WORKLOADS if not a.only or any(o in w for o in a.only)]
    split_dir = None
    if a.out:
        split_dir = Path(f"{a.out}-splits")
        split_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    warm_up()  # compile the Numba kernels before anything is timed
    load_avg = os.getloadavg()
    for name in names:
        wf = a.workloads / "throughput-inputs" / f"{name}.json"
        row: dict = {"workload": name}
        dp_split, dp_secs, dp_status = None, None, "not run"
        if a.dp_exe:
            dp_split, dp_secs, dp_status = run_dp(a.dp_exe, wf, a.dp_timeout)
        elif a.dp_splits:
            f = a.dp_splits / f"{name.replace('/', '_')}.split.json"
            if f.exists():
                dp_split, dp_status = json.loads(f.read_text()), "split file"
        row["dp"] = {"max_load": score(wf, dp_split) if dp_split else None, "seconds": dp_secs, "status": dp_status}
        base = name.split("/")[1].rsplit("_", 1)[0]
        ef = a.workloads / "human-experts" / f"{base}_inference_expert.json"
        row["expert"] = {"max_load": score(wf, json.loads(ef.read_text())) if ef.exists() and "Layer" in name else None}
        row.update(hdp_rows(wf, a.time_limit, a.seed, split_dir, row["dp"]["max_load"], a.methods.split(",")))
        rows.append(row)
        if "optimal" not in row:
            print(f"{name}: " + ", ".join(f"{k} {fmt(row[k]['max_load'], 4)} ({row[k]['seconds']:.2f} s)"
                                          + (f" [{row[k]['error']}]" if row[k].get("error") else "")
                                          for k in ("heuristic", "auto", "heft", "single") if k in row), flush=True)
            continue
        o = row["optimal"]
        c = o.get("contiguous") or {}
        print(f"{name}: DP {fmt(row['dp']['max_load'], 4)} ({dp_status}, {fmt(dp_secs)} s), expert "
              f"{fmt(row['expert']['max_load'], 4)}, hdp contiguous {fmt(c.get('value'), 4)} "
              f"({fmt(c.get('seconds_from_start'), 3)} s, {c.get('ideals')} ideals, {c.get('pairs')} pairs), "
              f"hdp optimal {fmt(o['max_load'], 4)} (bound {fmt(o['bound'], 4)}, "
              f"{o['status']}, {o['seconds']:.1f} s, to DP {fmt(o['time_to_dp'], 3)} s + load "
              f"{row['load_seconds']:.3f} s), heuristic "
              f"{fmt(row['heuristic']['max_load'], 4)} ({row['heuristic']['seconds']:.1f} s), heft "
              f"{fmt(row['heft']['max_load'], 4)}{'' if row['heft']['within_caps'] else ' (over a cap)'}", flush=True)
    if a.add:
        extra = {r["workload"]: r for r in json.loads(a.add.read_text())["rows"]}
        for r in rows:
            for k, v in extra.get(r["workload"], {}).items():
                r.setdefault(k, v)
    meta = {"time_limit": a.time_limit, "seed": a.seed, "load_average_at_start": load_avg,
            "load_average_at_end": os.getloadavg(), "cpus": os.cpu_count(), "dp_exe": a.dp_exe}
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        Path(f"{a.out}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=float))
        if all("optimal" in r for r in rows):
            Path(f"{a.out}.md").write_text(markdown(rows, meta))
        print(f"-> {a.out}.json, {a.out}.md, {split_dir}/")


def verdict(v, ref) -> str:
    if v is None or ref is None:
        return "—"
    if v < ref * (1 - 1e-6):
        return f"beats ({(1 - v / ref) * 100:.1f} % lower)"
    if v <= ref * (1 + 1e-6):
        return "ties"
    return f"loses ({(v / ref - 1) * 100:.1f} % higher)"


def markdown(rows, meta) -> str:
    out = [f"Max-load (their time units per sample; lower is better), scored by tests/peer_scoring.py (strict). "
           f"hdp optimal: {meta['time_limit']:g} s limit, seed {meta['seed']}; load average at start "
           f"{meta['load_average_at_start'][0]:.1f}, at end {meta['load_average_at_end'][0]:.1f}, {meta['cpus']} cores.",
           "",
           "",
           "hdp contiguous DP: hdp.placement.ideals (max-load; seconds from the start of the optimiser; ideals of its "
           "DAG). to DP value: seconds until hdp held a placement no worse than their DP's, from the start of the "
           "optimiser and, after '/', with reading, lowering and building the problem counted too (their DP's wall "
           "time includes its reading and contractions). full: the whole run (it stops early only when the MILP "
           "proves optimality).",
           "",
           "| workload | nodes / groups / devices | their DP (s) | expert | hdp contiguous DP (s; ideals) | hdp optimal | "
           "bound (gap) | status | hdp s to DP value | full s | heuristic (s) | auto (s) | heft | one accelerator | "
           "hdp vs DP | hdp vs expert |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        o, dp = r["optimal"], r["dp"]
        c = o.get("contiguous") or {}
        cont = (f"{fmt(c.get('value'), 4)} ({fmt(c.get('seconds_from_start'), 3)}; {c.get('ideals', '—')}"
                f"{'' if c.get('exact', True) else ', not exact'})") if c else "—"
        tdp = "—" if o["time_to_dp"] is None else f"{o['time_to_dp']:.3f} / {o['time_to_dp'] + r.get('load_seconds', 0):.3f}"
        dps = "" if dp["seconds"] is None else f" ({dp['seconds']:.2f})"
        dpv = fmt(dp["max_load"], 4) if dp["max_load"] is not None else dp["status"]
        heft = fmt(r["heft"]["max_load"], 2) + ("" if r["heft"]["within_caps"] else " (over cap)")
        auto = "not run" if "auto" not in r else (f"failed ({r['auto']['seconds']:.1f})" if r["auto"].get("error")
                                                  else f"{fmt(r['auto']['max_load'], 4)} ({r['auto']['seconds']:.1f})")
        out.append(
            f"| {r['workload']} | {r['nodes']} / {r['groups']} / {r['devices']} | {dpv}{dps} | {fmt(r['expert']['max_load'], 4)} | "
            f"{cont} | **{fmt(o['max_load'], 4)}** | {fmt(o['bound'], 2)} ({fmt(None if o['gap'] is None else o['gap'] * 100, 1)} %) | "
            f"{o['status']} | {tdp} | {o['seconds']:.1f} | {fmt(r['heuristic']['max_load'], 4)} "
            f"({r['heuristic']['seconds']:.1f}) | {auto} | {heft} | {fmt(r.get('single', {}).get('max_load'), 2)} | "
            f"{verdict(o['max_load'], dp['max_load'])} | {verdict(o['max_load'], r['expert']['max_load'])} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()

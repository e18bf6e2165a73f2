"""Concurrent-optimised placements against the sequential optimum and the best single device, on
modeled targets (simulated: the cost model of each target, no measurement).

    python bench/concurrent_modeled.py --targets i9-flex170,ultra-npu \\
        --models /tmp/zoo/inception_v3.xml,/tmp/zoo/densenet121.xml --towers --json /tmp/conc-modeled.json

For each model and target (``support``, ``profile`` and ``coarsen`` passes, cached in
``--cache-dir``):

- ``single``: the best single device (its latency; run alone, sequential and concurrent agree up
  to the executor's per-request cost, which is charged to every concurrent figure);
- ``sequential``: the sequential optimum (``optimal`` on the latency objective: HETERO's latency);
- ``concurrent``: the best concurrent latency found by ``heft``, ``optimal`` and ``auto`` each placed
  for the :class:`~hdp.placement.objective.Concurrent` objective (heft is a list scheduler; every
  result then refined by the greedy local search on the concurrent cost); the sequential optimum
  priced concurrently is a candidate too, so concurrent is never worse than running it concurrently.

- ``cp-sat``: CP-SAT's placement for the concurrent objective (``--cp-sat`` seconds, default 60;
  0 skips it), its status and proven lower bound; ``proven gap`` = (best concurrent found by any
  method, CP-SAT's included, − CP-SAT's bound) / that best, "proven optimal" when CP-SAT closed it.

The table gives each figure and the ratios; the last line the geometric means over every
(model, target). ``--towers`` adds the two-tower model of bench/concurrent_table.py (written
unplaced). Nothing here is asserted; the figures are those of the cost model.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def towers_xml(tmp: Path) -> Path:
    import openvino as ov

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from concurrent_table import two_towers

    placed = two_towers(tmp)
    model = ov.Core().read_model(str(placed))
    for op in model.get_ordered_ops():  # an ordinary model: no affinities
        rt = op.get_rt_info()
        for key in ("user_dataaffinity", "affinity"):
            if key in rt:
                del rt[key]
    out = tmp / "two_towers.xml"
    ov.save_model(model, str(out), compress_to_fp16=False)
    return out


def evaluate(xml: Path, target_name: str, cache_dir: str | None, cp_sat: float = 60.0, workers: int = 2) -> dict:
    from hdp.cli.calibrate import prepare
    from hdp.cli.common import pass_cache
    from hdp.placement.objective import Concurrent, Latency
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.placers import PlaceContext, place
    from hdp.placers.options import method_from
    from hdp.placers.refine import refine
    from hdp.target.target import load_target

    tgt = load_target(target_name)
    module = prepare(str(xml), tgt, None, pass_cache(cache_dir, False))
    base = build_problem(module, tgt.device_names)
    seq = base.with_objective(Latency())
    conc = base.with_objective(Concurrent())
    s_sim, c_sim = Simulator(seq), Simulator(conc)
    singles = s_sim.singles()
    best_single = min(singles.values()) if singles else math.inf

    def placed(method: str, problem, options=None, info=None):
        r = place(method_from(method, options or {}), PlaceContext(module=module, problem=problem, target=tgt, seed=0,
                                                                   timeout=60.0))
        if info is not None:
            info.update(r.info)
        return r.group_device

    opt = placed("optimal", seq)
    cands = {"optimal(latency)": np.asarray(opt, np.int64)}
    for m in ("heft", "auto"):
        try:
            cands[m] = np.asarray(placed(m, conc), np.int64)
        except Exception as e:  # noqa: BLE001 - a method that cannot serve it is reported, not fatal
            print(f"  {xml.name} on {target_name}: {m}: {e}")
    for j in singles:
        cands[f"single:{tgt.device_names[j]}"] = seq.single(j).astype(np.int64)
    cp = {}
    if cp_sat > 0:
        import time

        t0 = time.perf_counter()
        cands["cp-sat"] = np.asarray(placed("cp-sat", conc, {"time_limit": str(cp_sat), "workers": str(workers)}, cp),
                                     np.int64)
        cp["seconds"] = time.perf_counter() - t0
    best_name, best_gd, best_cost = None, None, math.inf
    for name, gd in list(cands.items()):
        better, _, after, _ = refine(conc, gd)
        for n, g, c in ((name, gd, c_sim.cost(gd)), (f"{name}+refine", better, after)):
            if c < best_cost:
                best_name, best_gd, best_cost = n, np.asarray(g), c
    return {"model": xml.name, "target": target_name, "groups": base.n_groups,
            "single": best_single, "sequential": s_sim.latency(opt), "sequential_run_concurrently": c_sim.cost(opt),
            "concurrent": best_cost, "concurrent_by": best_name,
            "concurrent_subgraphs": c_sim.concurrent_subgraphs(best_gd)[1],
            "concurrent_placement_sequentially": s_sim.latency(best_gd),
            **({"cp_sat": float(cp["concurrent"]), "cp_sat_status": cp["cp_sat_status"],
                "cp_sat_bound": float(cp["cp_sat_bound"]), "cp_sat_proven_optimal": cp["proven_optimal"] == "yes",
                "cp_sat_seconds": cp["seconds"], "cp_sat_warm_start": float(cp.get("warm_start_s", "nan")),
                "proven_gap": max(0.0, 1 - float(cp["cp_sat_bound"]) / best_cost)} if cp else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="i9-flex170,ultra-npu")
    ap.add_argument("--models", default="", help="comma-separated model .xml files")
    ap.add_argument("--towers", action="store_true")
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--cp-sat", type=float, default=60.0, help="CP-SAT's time limit in seconds (0: not run)")
    ap.add_argument("--workers", type=int, default=2, help="CP-SAT's search workers (the method's default)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="hdp-conc-mod-"))
    models = [Path(m) for m in args.models.split(",") if m] + ([towers_xml(tmp)] if args.towers else [])
    rows = []
    print("| model | target | groups | best single ms | sequential optimum ms | concurrent ms (by) | "
          "concurrent / sequential | concurrent / single | CP-SAT ms (status, s) | CP-SAT bound ms | proven gap |")
    print("|---|---|---:|---:|---:|---|---:|---:|---|---:|---:|")
    for xml in models:
        for t in filter(None, args.targets.split(",")):
            r = evaluate(xml, t, args.cache_dir, args.cp_sat, args.workers)
            rows.append(r)
            if args.json:  # after every row: a model that fails later loses none of them
                from hdp.base.fsutil import atomic_write

                atomic_write(args.json, json.dumps(rows, indent=1).encode())
            if "cp_sat" in r:
                gap = "proven optimal" if r["cp_sat_proven_optimal"] else f"{r['proven_gap'] * 100:.2f} %"
                cps = (f"{r['cp_sat'] * 1e3:.3f} ({r['cp_sat_status']}, {r['cp_sat_seconds']:.0f} s) | "
                       f"{r['cp_sat_bound'] * 1e3:.3f} | {gap}")
            else:
                cps = "- | - | -"
            print(f"| {r['model']} | {t} | {r['groups']} | {r['single'] * 1e3:.3f} | {r['sequential'] * 1e3:.3f} | "
                  f"{r['concurrent'] * 1e3:.3f} ({r['concurrent_by']}, {r['concurrent_subgraphs']} subgraphs) | "
                  f"{r['concurrent'] / r['sequential']:.3f} | {r['concurrent'] / r['single']:.3f} | {cps} |", flush=True)
    if rows:
        g_seq = math.exp(np.mean([math.log(r["concurrent"] / r["sequential"]) for r in rows]))
        g_one = math.exp(np.mean([math.log(r["concurrent"] / r["single"]) for r in rows]))
        g_so = math.exp(np.mean([math.log(r["sequential"] / r["single"]) for r in rows]))
        print(f"\ngeomean over {len(rows)} (model, target): concurrent / sequential optimum {g_seq:.3f} "
              f"(speed-up {1 / g_seq:.3f}x), concurrent / best single {g_one:.3f} ({1 / g_one:.3f}x), "
              f"sequential optimum / best single {g_so:.3f} ({1 / g_so:.3f}x)")


if __name__ == "__main__":
    main()

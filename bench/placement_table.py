"""The placement table: every zoo model x method on a target, simulated and (on real targets) measured.

    python bench/placement_table.py --target virtual --runs 20 --out bench/results
    python bench/placement_table.py --target i9-flex170 --out bench/results
    python bench/placement_table.py --target virtual --methods hsdag --seeds 0,1,2 ...

For each model: lower, `support`, `profile` on the target (per-op costs), `features`, `coarsen`, then
each method's `partition` + `assign`. Columns:

- sim: the simulator's sequential-HETERO latency of the placement (calibrated per-op costs);
- meas: measured median of the placement compiled with HETERO (real targets only), and its spread;
- err: sim / meas - 1;
- vs best single: speedup over the best single-device placement (as a HETERO placement: measured
  where measured, else simulated) and over the best plain compile (the whole model compiled on one
  device without HETERO, real targets only);
- vs LB: latency / lower bound (sum over ops of the fastest supported device, no transfers).

Rows with several seeds show mean ± sd over seeds. Nothing here is asserted; the output is a record.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from hdp.ir import serde
from hdp.passes.cache import PassCache, default_cache_dir
from hdp.passes.manager import PassManager
from hdp.pipeline import lower_cached, make_pass
from hdp.runtime.simulate import Simulator, lower_bound
from hdp.runtime.target import load_target

DEFAULT_MODELS = ("inception_v3", "resnet50", "bert_base")


def base_module(model: str, target, cache: PassCache, workdir: Path, profile_runs: int):
    """Lowered model with support, costs, features and coarse stages."""
    if model.endswith(".xml"):
        xml = Path(model)
    else:
        from hdp.zoo import export

        xml = export(model, workdir / f"{model}.xml")
    m = lower_cached(xml, {}, cache)
    passes = [make_pass("support", {"target": target}),
              make_pass("profile", {"target": target, "runs": profile_runs}),
              make_pass("features", {}),
              make_pass("coarsen", {})]
    return PassManager(passes, cache=cache).run(m)


def parse_spec(spec: str) -> tuple[str, dict, dict]:
    """``hsdag@warm_start=none,features.position=false,assign.refine=true`` -> (method, partition,
    features and assign options)."""
    method, _, rest = spec.partition("@")
    part, feat, assign = {}, {}, {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        if k.startswith("features."):
            feat[k[len("features."):]] = v
        elif k.startswith("assign."):
            assign[k[len("assign."):]] = v
        else:
            part[k] = v
    return method, part, feat, assign


def place(module, target, spec: str, seed: int, cache: PassCache, extra: dict):
    method, part, feat, assign = parse_spec(spec)
    t0 = time.perf_counter()
    passes = []
    if feat:  # an ablation: recompute the features (and the coarse graph's aggregated features)
        passes += [make_pass("features", feat), make_pass("coarsen", {})]
    passes += [make_pass("partition", {"target": target, "method": method, "seed": seed, **extra, **part}),
               make_pass("assign", assign)]
    out = PassManager(passes, cache=cache).run(module)
    return out.placement, time.perf_counter() - t0


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import openvino

    return f"{cpu}, {os.cpu_count()} cores, openvino {openvino.__version__}, python {platform.python_version()}"


def fmt_ms(x: float) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x * 1e3:.3f}"


def agg(xs):
    xs = [x for x in xs if x is not None and np.isfinite(x)]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="zoo names or .xml paths")
    ap.add_argument("--methods", default=None, help="space-separated; default: single per device, "
                    "hetero-auto, random, heft, optimal, hsdag. Options: hsdag@warm_start=none,"
                    "reward=simulate; ablations: hsdag@features.structural=false")
    ap.add_argument("--seeds", default="0", help="seeds for the randomised methods (random, hsdag)")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per measurement")
    ap.add_argument("--profile-runs", type=int, default=20)
    ap.add_argument("--set", dest="sets", action="append", default=[], help="partition option key=value")
    ap.add_argument("--no-measure", action="store_true", help="simulate only, even on a real target")
    ap.add_argument("--out", default=None, help="directory for the markdown record")
    ap.add_argument("--workdir", default=str(default_cache_dir() / "bench"))
    args = ap.parse_args(argv)

    from hdp.placers import placers

    target = load_target(args.target)
    devs = target.device_names
    methods = args.methods.split() if args.methods else (
        [f"single:{d}" for d in devs] + ["hetero-auto", "random", "heft", "optimal"]
        + (["hsdag"] if "hsdag" in placers() else []))
    seeds = [int(s) for s in args.seeds.split(",")]
    extra = dict(s.split("=", 1) for s in args.sets)
    measure = target.is_real and not args.no_measure
    cache = PassCache(default_cache_dir())
    workdir = Path(args.workdir)
    lines = [f"# Placements on `{target.name}` ({'measured and simulated' if measure else 'simulated'})", "",
             f"- date: {_dt.date.today().isoformat()}", f"- machine: {machine()}",
             f"- command: `python bench/placement_table.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
             f"- runs per measurement: {args.runs}; seeds for randomised methods: {seeds}", ""]
    print("\n".join(lines), flush=True)

    for model in args.models.split(","):
        t0 = time.perf_counter()
        m = base_module(model, target, cache, workdir, args.profile_runs)
        sim = Simulator(m, devs)
        lb = lower_bound(m, devs)
        head = (f"## {model}: {m.graph.n_ops} ops, {m.coarse.n_groups} coarse groups "
                f"(prepared in {time.perf_counter() - t0:.1f} s); lower bound {fmt_ms(lb)} ms")
        rows = []
        measurer = None
        plain = {}
        if measure:
            from hdp.runtime.measure import Measurer

            measurer = Measurer(m, target, runs=args.runs, warmup=3, timeout=600)
            for d in devs:
                p = measurer.plain(d)
                plain[d] = p.median if p.ok else None
        results = {}
        for method in methods:
            ms = seeds if method.split(":")[0].split("@")[0] in ("random", "hsdag") else [0]
            sims, meas, spreads, secs = [], [], [], []
            for seed in ms:
                pl, dt = place(m, target, method, seed, cache, extra)
                dev = pl.device_of.numpy()
                sims.append(sim.latency(dev))
                secs.append(dt)
                if measurer is not None:
                    r = measurer.measure(dev, pl.devices)
                    meas.append(r.median if r.ok else None)
                    spreads.append((r.q3 - r.q1) if r.ok else None)
                share = np.bincount(dev, minlength=len(devs)) / max(len(dev), 1)
            results[method] = (agg(sims), agg(meas) if meas else (None, None), agg(spreads), agg(secs), share)
        single = {d: results[f"single:{d}"] for d in devs if f"single:{d}" in results}
        key = 1 if measure else 0
        best_single = min((v[key][0] for v in single.values() if v[key][0]), default=None)
        best_plain = min((v for v in plain.values() if v), default=None)
        hdr = ["method", "sim ms", "meas ms", "IQR ms", "err", "× best single", "× best plain", "× LB",
               "ops per device", "place s"]
        rows.append("| " + " | ".join(hdr) + " |")
        rows.append("|" + "---|" * len(hdr))
        for method, ((s, s_sd), (mm, m_sd), (iqr, _), (sec, _), share) in results.items():
            lat = mm if measure and mm else s
            def pm(x, sd):
                return fmt_ms(x) + (f" ± {sd * 1e3:.3f}" if sd else "")
            err = f"{(s / mm - 1) * 100:+.1f}%" if (s and mm) else "-"
            vs_single = f"{best_single / lat:.3f}" if (best_single and lat) else "-"
            vs_plain = f"{best_plain / lat:.3f}" if (best_plain and lat and measure) else "-"
            vs_lb = f"{lat / lb:.3f}" if lat and lb else "-"
            shares = " / ".join(f"{x * 100:.0f}%" for x in share)
            rows.append(f"| {method} | {pm(s, s_sd)} | {pm(mm, m_sd) if measure else '-'} | "
                        f"{fmt_ms(iqr) if measure else '-'} | {err} | {vs_single} | {vs_plain} | {vs_lb} | "
                        f"{shares} | {sec:.1f} |")
        if plain:
            rows.append("")
            rows.append("plain compiles (no HETERO): " + ", ".join(f"{d} {fmt_ms(v)} ms" for d, v in plain.items()))
        if measurer is not None:
            measurer.close()
        block = "\n".join([head, ""] + rows + [""])
        print(block, flush=True)
        lines.append(block)

    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"placements-{target.name}-{_dt.date.today().isoformat()}.md"
        serde.atomic_write(path, ("\n".join(lines) + "\n").encode())
        print(f"written {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

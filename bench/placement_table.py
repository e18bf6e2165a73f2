"""The placement table: zoo models x methods on a target; placement time measured fresh, latency
simulated and (on real targets) measured head to head.

    python bench/placement_table.py --target virtual --out bench/results
    python bench/placement_table.py --target i9-flex170 --out bench/results
    python bench/placement_table.py --target virtual --models resnet50 --methods "single:CPU heft optimal"

Per model: lower, ``support``, ``profile``, ``features`` and ``coarsen`` come from the pass cache of
``--cache-dir`` (the record says which were cache hits and how long the misses took); then every
method's ``partition`` + ``assign`` runs **without any cache**, timed ("place s"). Columns:

- sim ms: the simulator's sequential-HETERO latency of the final (post-``assign``) placement, with
  the host's calibrated boundary model when ``hdp calibrate`` / ``bench/calibration_table.py`` stored
  one for the target (``sim`` is then calibrated; ``uncal`` is the target's own link model);
- meas ms (real targets): median [IQR] of the placement over interleaved rounds in which every
  distinct placement and the plain compile on every device run once each, in a balanced order
  (:meth:`hdp.runtime.measure.measurer.Measurer.head_to_head`); fresh, never cached;
- vs best plain: the placement's time over the fastest plain compile (the whole model compiled on
  one device without HETERO), Hodges-Lehmann estimate with its 95 % interval, and the verdict of
  :func:`hdp.runtime.measure.stats.compare` (a placement on one device is never called faster than its
  own plain compile);
- sim err: predicted / measured ratio to the ``single:<first device>`` placement - 1 (the error the
  calibration is judged by);
- on modeled targets, the simulator's measured error on ``virtual`` is stated beside the table.

Every figure is measured on the machine named in the record, under the load stated there. Rows of
randomised methods with several seeds show each seed. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

DEFAULT_MODELS = ("inception_v3", "resnet50", "bert_base", "mobilenet_v2")


def machine() -> str:
    import platform

    from hdp.target.host import host_facts

    f = host_facts()
    return f"{f['cpu']}, {os.cpu_count()} cores, openvino {f['openvino']}, python {platform.python_version()}"


def load() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan


def base_module(model: str, target, cache, workdir: Path, calibrated: bool):
    """Lowered model with support, costs (calibrated if asked and stored), features and coarse
    stages; and a line saying which came from the cache."""
    from hdp.passes.boundary import with_calibration
    from hdp.passes.instruments import Timing
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.pipeline.stages import lower_cached

    if model.endswith(".xml"):
        xml = Path(model)
    else:
        from hdp.zoo.models import export

        xml = export(model, workdir / f"{model}.xml")
    timing = Timing()
    m = lower_cached(xml, {}, cache, [timing])
    passes = [make_pass("support", {"target": target}), make_pass("profile", {"target": target})]
    if calibrated:
        passes = with_calibration(passes, target, cache)
    passes += [make_pass("features", {}), make_pass("coarsen", {})]
    m = PassManager(passes, cache=cache, instruments=[timing]).run(m)
    def said(r):
        return f"{r['pass']} " + ("cached" if r["cache_hit"] else f"{r['seconds']:.1f} s")

    stages = ", ".join(said(r) for r in timing.rows)
    return m, stages


def parse_spec(spec: str) -> tuple[str, dict, dict, dict]:
    """``hsdag@reward=simulate,budget=60,features.position=false,assign.refine=true`` -> (method,
    partition options, features options, assign options)."""
    method, _, rest = spec.partition("@")
    part, feat, assign = {}, {}, {}
    for kv in filter(None, rest.split(",")):
        k, _, v = kv.partition("=")
        if k.startswith("features."):
            feat[k.removeprefix("features.")] = v
        elif k.startswith("assign."):
            assign[k.removeprefix("assign.")] = v
        else:
            part[k] = v
    return method, part, feat, assign


def place(module, target, spec: str, seed: int):
    """(placement, seconds) of one method, run without any cache (a features ablation recomputes
    ``features`` and ``coarsen`` first, inside the timed part)."""
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass

    method, part, feat, assign = parse_spec(spec)
    t0 = time.perf_counter()
    passes = [make_pass("features", feat), make_pass("coarsen", {})] if feat else []
    passes += [make_pass("partition", {"target": target, "method": method, "seed": seed, **part}),
               make_pass("assign", assign)]
    out = PassManager(passes, cache=None).run(module)
    return out.placement, time.perf_counter() - t0


def fmt_ms(x) -> str:
    return "-" if x is None or not np.isfinite(x) else f"{x * 1e3:.3f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="zoo names or .xml paths")
    ap.add_argument("--methods", default=None, help="space-separated; default: single per device, hetero-auto, "
                    "random, heft, optimal, hsdag@reward=simulate,budget=60")
    ap.add_argument("--seeds", default="0,1,2", help="seeds for the randomised methods (random, hsdag)")
    ap.add_argument("--max-seconds", type=float, default=240.0,
                    help="cap on the interleaved rounds per model (real targets)")
    ap.add_argument("--no-measure", action="store_true", help="simulate only, even on a real target")
    ap.add_argument("--uncalibrated", action="store_true", help="ignore a stored calibration")
    ap.add_argument("--calibration-record", default=None,
                    help="bench/results/calibration-virtual-*.md whose error to state beside simulated tables "
                         "(default: the newest)")
    ap.add_argument("--cache-dir", default=None, help="hdp cache root for the preparing passes (default ~/.cache/hdp)")
    ap.add_argument("--out", default=None, help="directory for the markdown record")
    args = ap.parse_args(argv)

    from hdp.base.cache import default_cache_dir
    from hdp.base.fsutil import atomic_write
    from hdp.passes.cache import PassCache
    from hdp.placement.problem import build_problem
    from hdp.placement.simulate import Simulator
    from hdp.runtime.costs.calibrate import calibration_for, summary, uncalibrated
    from hdp.runtime.measure import stats
    from hdp.target.target import load_target

    target = load_target(args.target)
    devs = target.device_names
    methods = args.methods.split() if args.methods else (
        [f"single:{d}" for d in devs] + ["hetero-auto", "random", "heft", "optimal",
                                         "hsdag@reward=simulate,budget=60"])
    seeds = [int(s) for s in args.seeds.split(",")]
    measure = target.is_real and not args.no_measure
    root = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    cache = PassCache(root)
    cal = None if args.uncalibrated else calibration_for(target, root)
    cmd = "python bench/placement_table.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [f"# Placements on `{target.name}` ({'measured and simulated' if measure else 'simulated'})", "",
             f"- date: {_dt.date.today().isoformat()}", f"- machine: {machine()}", f"- command: `{cmd}`",
             f"- seeds for randomised methods: {seeds}; placement time ('place s') is partition + assign "
             f"run without any cache"]
    if cal is not None:
        lines.append(f"- simulator: calibrated boundary model of {cal.created} ({cal.boundary.describe()}); "
                     f"'uncal' uses the target's link ({uncalibrated(cal.link).describe()})")
    else:
        lines.append("- simulator: the target's own link model (no calibration stored for this target and host)")
    if not measure:
        lines += _modeled_note(target, args.calibration_record)
    lines.append("")
    print("\n".join(lines), flush=True)

    for model in args.models.split(","):
        t0 = time.perf_counter()
        m, stages = base_module(model, target, cache, root / "bench", calibrated=cal is not None)
        m_uncal = base_module(model, target, cache, root / "bench", calibrated=False)[0] if cal is not None else m
        p = build_problem(m, devs)
        sim, sim0 = Simulator(p), Simulator(build_problem(m_uncal, devs))
        st = p.structure
        rows = []  # (method, seed, group devices, place seconds)
        place(m, target, "random", 0)  # imports and JIT compiles outside the timed calls
        for spec in methods:
            name = spec.split("@")[0].split(":")[0]
            for seed in (seeds if name in ("random", "hsdag") else [0]):
                pl, dt = place(m, target, spec, seed)
                rows.append((spec, seed, st.group_devices(pl.device_of.numpy()).astype(np.int64), dt))
        head = (f"## {Path(model).stem}: {m.graph.n_ops} ops, {p.n_groups} tie groups, {m.coarse.n_groups} coarse "
                f"groups; lower bound {fmt_ms(p.lower_bound())} ms (simulated)\n\nprepared in "
                f"{time.perf_counter() - t0:.1f} s ({stages})")
        meas, plain_meas, h = {}, {}, None
        if measure:
            from hdp.runtime.measure.measurement import placed, unplaced
            from hdp.runtime.measure.measurer import Measurer

            uniq: dict[bytes, np.ndarray] = {}
            for _, _, gd, _ in rows:
                uniq.setdefault(gd.astype(np.int16).tobytes(), gd)
            keys = list(uniq)
            cands = [unplaced(d) for d in devs] + [placed(p.op_devices(uniq[k]), name=f"p{i}") for i, k in enumerate(keys)]
            plan = stats.SequentialPlan(resolution=0.03, min_rounds=10, max_rounds=2000, max_seconds=args.max_seconds)
            l0 = load()
            with Measurer(m, target, cache=False, timeout=900) as ms:
                h = ms.head_to_head(cands, plan)
            la = np.nanmean([l0, load()])
            for j, d in enumerate(devs):
                plain_meas[d] = h.measurements[j]
            best_plain = min((j for j in range(len(devs)) if h.measurements[j].ok),
                             key=lambda j: h.measurements[j].median, default=None)
            for i, k in enumerate(keys):
                meas[k] = len(devs) + i
            head += (f"; measured: {h.rounds} interleaved rounds of {len(cands)} candidates in {h.seconds:.0f} s "
                     f"({h.reason}), 1-minute load average {la:.1f} on {os.cpu_count()} cores")
        cols = ["method", "seed", "sim ms"] + (["uncal ms"] if cal is not None else [])
        cols += (["meas ms [IQR]", "vs best plain (95 % CI)", "verdict", "sim err"] if measure else
                 ["vs best single (sim)", "x lower bound"])
        table = ["| " + " | ".join(cols + ["ops per device", "place s"]) + " |", "|" + "---|" * (len(cols) + 2)]
        ref_key = p.single(0).astype(np.int16).tobytes()
        singles = [sim.latency(p.single(d)) for d in range(len(devs)) if p.allowed[:, d].all()]
        best_single = min(singles) if singles else math.nan
        lb = p.lower_bound()
        errs = []
        for spec, seed, gd, dt in rows:
            lat, lat0 = sim.latency(gd), sim0.latency(gd)
            share = np.bincount(p.op_devices(gd)[st.group_of >= 0], minlength=len(devs))
            share = share / max(share.sum(), 1)
            cells = [spec, str(seed), fmt_ms(lat)] + ([fmt_ms(lat0)] if cal is not None else [])
            if measure:
                mtxt, vs, verdict, err = "-", "-", "-", "-"
                j = meas[gd.astype(np.int16).tobytes()]
                mm = h.measurements[j]
                if mm.ok:
                    mtxt = f"{fmt_ms(mm.median)} [{fmt_ms(mm.q1)}-{fmt_ms(mm.q3)}]"
                    if best_plain is not None:
                        c = h.compare(best_plain, j)
                        vs = f"{c.ratio:.3f} ({c.low:.3f}-{c.high:.3f})"
                        verdict = c.describe()
                    r = meas.get(ref_key)
                    if r is not None and r != j and h.measurements[r].ok and np.unique(gd).size > 1:
                        cr = h.compare(r, j)
                        e = (lat / sim.latency(p.single(0))) / cr.ratio - 1
                        errs.append(e)
                        err = f"{e * 100:+.1f} %"
                else:
                    mtxt = "failed"
                cells += [mtxt, vs, verdict, err]
            else:
                cells += [f"{best_single / lat:.3f}" if lat > 0 else "-", f"{lat / lb:.3f}" if lb > 0 else "-"]
            cells += [", ".join(f"{d} {x * 100:.0f}%" for d, x in zip(devs, share) if x > 0), f"{dt:.1f}"]
            table.append("| " + " | ".join(cells) + " |")
        foot = []
        if plain_meas:
            foot.append("plain compiles (no HETERO): " + ", ".join(
                f"{d} {fmt_ms(x.median)} ms [{fmt_ms(x.q1)}-{fmt_ms(x.q3)}]" if x.ok else f"{d} failed"
                for d, x in plain_meas.items()))
        if errs:
            s = summary(np.array(errs))
            foot.append(f"simulator error on the {s['n']} mixed placements above (ratio to single:{devs[0]}): median "
                        f"|error| {s['median_abs'] * 100:.1f} %, worst {s['worst'] * 100:+.1f} %")
        block = "\n".join([head, ""] + table + [""] + foot + [""])
        print(block, flush=True)
        lines.append(block)

    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"placements-{target.name}-{_dt.date.today().isoformat()}.md"
        atomic_write(path, ("\n".join(lines) + "\n").encode())
        print(f"written {path}", file=sys.stderr)
    return 0


def _modeled_note(target, record: str | None) -> list[str]:
    """What is known of the simulator's error, stated beside a simulated table."""
    import glob

    files = [record] if record else sorted(glob.glob("bench/results/calibration-virtual-*.md"))
    if not files:
        return ["- simulator error: not measured (run bench/calibration_table.py on `virtual`)"]
    text = Path(files[-1]).read_text()
    row = next((ln for ln in text.splitlines() if ln.startswith("| all |")), "")
    cells = [c.strip().strip("*") for c in row.strip("|").split("|")]
    said = (f"median |error| {cells[5]} (worst {cells[6]}) calibrated, {cells[3]} (worst {cells[4]}) uncalibrated, "
            f"over {cells[1]} held-out mixed placements" if len(cells) >= 7 else "see the record")
    return [f"- simulator error, **measured on `virtual` only** ({files[-1]}): {said}. This target's devices are "
            f"modeled (roofline op times, the target's guessed link): its error is not measured and is likely "
            f"larger; every latency here is simulated"]


if __name__ == "__main__":
    sys.exit(main())

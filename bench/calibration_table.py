"""The simulator's error before and after calibrating the boundary model, per zoo model, on a real target.

    python bench/calibration_table.py --target virtual --out bench/results            # measure, fit, record
    python bench/calibration_table.py --from-json bench/results/calibration-virtual-DATE.json --out bench/results

For each model: lower, ``support``, ``profile`` and ``coarsen`` (pass cache of ``--cache-dir``), then the
calibration design of :mod:`hdp.runtime.costs.calibrate` measured head to head with the reference placement
(every op on the first device), interleaved run by run. One boundary model is fitted on the fitted
placements of every model together (with a profile scale and device scales per model); the errors are
those of the **held-out** placements (heft and random per coarse group, never fitted), as
``predicted ratio / measured ratio - 1`` where a ratio is the placement's time over the reference's:

- before: the simulator with the target's own link model (``[link]`` of the target TOML);
- after: with the calibration, as ``hdp compile`` applies it (``boundary`` pass);
- transfer: the boundary model fitted on the *other* models only, this model's profile uncorrected
  (what a model that was never calibrated gets);
- noise: the median half-width of the measured ratios' 95 % intervals (no model can be judged
  more precisely than that).

The observations are written to ``calibration-<target>-<date>.json`` as they are measured (a
re-run with ``--from-json`` refits and re-renders without measuring) and the calibration is stored
in the cache (``--cache-dir``), so that ``hdp compile`` uses it. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
import time
from pathlib import Path

import msgspec
import numpy as np

DEFAULT_MODELS = ("inception_v3", "resnet50", "bert_base", "mobilenet_v2")


class Record(msgspec.Struct):
    target: str
    command: str
    machine: str
    date: str = ""
    observations: list = []
    seconds: dict[str, float] = {}


def _pct(x: float, signed: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "-"
    return f"{x * 100:+.1f} %" if signed else f"{x * 100:.1f} %"


def observations(rec: Record) -> list:
    """The record's observations (an interval JSON could not hold, written as null, reads as none)."""
    from hdp.runtime.costs import calibrate as C

    out = []
    for o in rec.observations:
        if isinstance(o, dict):
            o = {**o, "low": o.get("low") or 0.0, "high": o.get("high") or 0.0}
            o = msgspec.convert(o, C.Observation)
        out.append(o)
    return out


def render(rec: Record, cal, target) -> str:
    from hdp.runtime.costs import calibrate as C

    obs = observations(rec)
    nd = len(target.devices)
    before = C.uncalibrated(cal.link)
    scales = {m.costs: m for m in cal.models}
    models = list(dict.fromkeys(o.model for o in obs))
    loads = [o.load for o in obs if math.isfinite(o.load)]
    lines = [f"# Calibrating the boundary model on `{target.name}`", "",
             f"- measured: {rec.date or '?'}; fitted: {cal.created}", f"- machine: {rec.machine}",
             f"- command: `{rec.command}`",
             f"- load: 1-minute load average {min(loads):.1f}-{max(loads):.1f} (median {np.median(loads):.1f}) on "
             f"2 cores shared with other agents' jobs while measuring" if loads else "- load: not recorded",
             f"- {len(obs)} placements measured, each head to head with the reference (every op on "
             f"{target.devices[0].name}), interleaved run by run; ratios are Hodges-Lehmann estimates of "
             f"placement / reference with 95 % intervals (hdp/runtime/measure/stats.py)", "",
             "## Fitted boundary model", "",
             f"- calibrated: {cal.boundary.describe()}",
             f"- the target's guess: {before.describe()}", ""]
    lines += ["| model | profile scale α | device scales δ | contrast λ | fitted placements | held out |",
              "|---|---|---|---|---|---|"]
    for m in cal.models:
        nf = sum(1 for o in obs if o.costs == m.costs and not o.heldout)
        nh = sum(1 for o in obs if o.costs == m.costs and o.heldout)
        lines.append(f"| {m.model} | {m.compute_scale:.3f} | "
                     f"{', '.join(f'{d} {s:.3f}' for d, s in zip(cal.devices, m.device_scale))} | {m.contrast:.2f} | "
                     f"{nf} | {nh} |")
    lines += ["", "## Simulator error on held-out mixed placements", "",
              "error = predicted ratio / measured ratio - 1; median |error| and the worst (signed)", "",
              "| model | placements | noise (median CI half-width) | before: median | before: worst | "
              "after: median | after: worst | transfer: median | transfer: worst |",
              "|---|---|---|---|---|---|---|---|---|"]
    allb, alla = [], []
    for name in models:
        held = [o for o in obs if o.model == name and o.heldout and o.mixed]
        if not held:
            lines.append(f"| {name} | 0 | - | - | - | - | - | - | - |")
            continue
        others = [o for o in obs if o.model != name]
        tr = None
        if any(not o.heldout and o.mixed for o in others):
            bm_t, ms_t = C.fit(others, nd, before)
            tr = C.summary(C.errors(bm_t, {}, held, nd, float(np.median([x.contrast for x in ms_t]))))
        b = C.errors(before, {}, held, nd)
        a = C.errors(cal.boundary, scales, held, nd)
        allb += list(b)
        alla += list(a)
        sb, sa = C.summary(b), C.summary(a)
        noise = np.median([(o.high / o.low) ** 0.5 - 1 for o in held if o.low > 0 and math.isfinite(o.high)])
        lines.append(f"| {name} | {sa['n']} | ±{_pct(noise)} | {_pct(sb['median_abs'])} | {_pct(sb['worst'], True)} | "
                     f"**{_pct(sa['median_abs'])}** | {_pct(sa['worst'], True)} | "
                     f"{_pct(tr['median_abs']) if tr else '-'} | {_pct(tr['worst'], True) if tr else '-'} |")
    if alla:
        sb, sa = C.summary(np.array(allb)), C.summary(np.array(alla))
        lines.append(f"| all | {sa['n']} | | {_pct(sb['median_abs'])} | {_pct(sb['worst'], True)} | "
                     f"**{_pct(sa['median_abs'])}** | {_pct(sa['worst'], True)} | | |")
    lines += ["", f"`optimal`'s default margin from this calibration (90th percentile of the held-out |error|): "
                  f"{_pct(cal.error) if cal.error is not None else 'none (nothing held out)'}", "", "## Every placement", "",
              "| model | placement | held out | subgraphs (sim / HETERO) | copies | MB copied | measured ratio "
              "[95 % CI] | rounds | before | after | reference ms | load |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pb = C.predict(before, {}, obs, nd)
    pa = C.predict(cal.boundary, scales, obs, nd)
    for o, b, a in zip(obs, pb, pa):
        f = o.features
        lines.append(f"| {o.model} | {o.name} | {'yes' if o.heldout else ''} | {f.subgraphs} / {o.hetero_subgraphs} | "
                     f"{f.copies} | {f.copy_bytes / 1e6:.2f} | {o.ratio:.3f} [{o.low:.3f}, {o.high:.3f}] | {o.rounds} | "
                     f"{_pct(b / o.ratio - 1, True)} | {_pct(a / o.ratio - 1, True)} | {o.ref_median * 1e3:.1f} | "
                     f"{o.load:.1f} |")
    known = [o for o in obs if o.hetero_subgraphs > 0]
    if known:
        same = sum(o.features.subgraphs == o.hetero_subgraphs for o in known)
        diff = [o for o in known if o.features.subgraphs != o.hetero_subgraphs]
        worst = max((abs(o.features.subgraphs - o.hetero_subgraphs) / o.hetero_subgraphs for o in diff), default=0.0)
        lines += ["", "## Subgraph count", "",
                  f"The simulator's subgraph count equals HETERO_NUMBER_OF_SUBMODELS of the compiled placement on "
                  f"{same} of {len(known)} placements; where it differs, by at most {_pct(worst)} "
                  f"(HETERO's cycle breaking differs from the simulator's stage split on nested cycles)."]
        for o in diff:
            lines.append(f"- {o.model} {o.name}: simulator {o.features.subgraphs}, HETERO {o.hetero_subgraphs}")
    return "\n".join(lines) + "\n"


def machine() -> str:
    import os
    import platform

    from hdp.target.host import host_facts

    f = host_facts()
    return f"{f['cpu']}, {os.cpu_count()} cores, openvino {f['openvino']}, python {platform.python_version()}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="virtual")
    ap.add_argument("--models", default=",".join(DEFAULT_MODELS), help="zoo names or .xml paths")
    ap.add_argument("--heldout", type=int, default=10)
    ap.add_argument("--random", type=int, default=4, help="random placements per coarse group in the fitted design")
    ap.add_argument("--resolution", type=float, default=4.0,
                    help="percent: measure until every ratio's 95 %% interval is this wide (or --max-seconds)")
    ap.add_argument("--max-seconds", type=float, default=240.0, help="per interleaved comparison")
    ap.add_argument("--batch", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", default=None, help="hdp cache root (default ~/.cache/hdp)")
    ap.add_argument("--from-json", default=None, help="refit and render recorded observations; measure nothing")
    ap.add_argument("--record", default=None, help="the JSON record to write (default: <out>/calibration-<target>-"
                    "<date>.json); if it exists, models already in it are not measured again (resume)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args(argv)

    from hdp.base.cache import default_cache_dir
    from hdp.base.fsutil import atomic_write
    from hdp.cli.calibrate import prepare
    from hdp.passes.cache import PassCache
    from hdp.pipeline import calibrate as experiment
    from hdp.runtime.costs import calibrate as C
    from hdp.target.target import load_target

    target = load_target(args.target)
    root = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        rec = msgspec.json.decode(Path(args.from_json).read_bytes(), type=Record)
        stem = Path(args.from_json).stem
    else:
        cmd = "python bench/calibration_table.py " + " ".join(argv if argv is not None else sys.argv[1:])
        record = Path(args.record) if args.record else out / f"calibration-{target.name}-{_dt.date.today().isoformat()}.json"
        stem = record.stem
        if record.exists():
            rec = msgspec.json.decode(record.read_bytes(), type=Record)
            rec.command += f"; then {cmd}"
            print(f"resuming {record}: {', '.join(rec.seconds)} already measured", file=sys.stderr)
        else:
            rec = Record(target=target.name, command=cmd, machine=machine(),
                         date=_dt.datetime.now().isoformat(timespec="minutes"))
        cache = PassCache(root)
        plan = experiment.precision_plan(resolution=args.resolution / 100, max_seconds=args.max_seconds)
        work = root / "bench"
        for model in args.models.split(","):
            if Path(model).stem in rec.seconds:
                continue
            t0 = time.perf_counter()
            if model.endswith(".xml"):
                xml = Path(model)
            else:
                from hdp.zoo.models import export

                xml = export(model, work / f"{model}.xml")
            module = prepare(xml, target, {}, cache)
            obs = experiment.calibrate_module(module, target, model=Path(model).stem, seed=args.seed, heldout=args.heldout,
                                     fit_random=args.random, plan=plan, batch=args.batch,
                                     say=lambda s: print(f"  {s}", flush=True))
            rec.observations.extend(msgspec.to_builtins(o) for o in obs)
            rec.seconds[Path(model).stem] = time.perf_counter() - t0
            atomic_write(record, msgspec.json.format(msgspec.json.encode(rec), indent=1))
    cal = C.build(target, observations(rec))
    where = C.CalibrationStore(root).put(cal, target)
    print(f"calibration stored -> {where}", file=sys.stderr)
    text = render(rec, cal, target)
    atomic_write(out / f"{stem}.md", text.encode())
    print(text)
    print(f"written {out / stem}.md", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

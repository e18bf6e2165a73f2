"""The default method (``auto``) against ``optimal`` and the best single device, on ``virtual``.

For every model: ``hdp compile`` with ``--method optimal`` and with the default method, each as a
user runs it (check and compare included) from its own empty cache directory, in alternating
order from model to model; then the three answers measured head to head in one interleaved
comparison (the default's placement, optimal's, and the plain compile on each device), with
confidence intervals. Optionally (``--hsdag-budget``), ``--method hsdag --budget B`` and the
seconds its partition pass took.

Writes ``<out>.md`` (the table, with the host, OpenVINO version and load) and ``<out>.json``
(every figure and the compile outputs)::

    python bench/auto_table.py                                  # zoo models, ~4 min each
    python bench/auto_table.py --models resnet50 --hsdag-budget 20 --out /tmp/auto

Every time here is wall clock on whatever else the machine is doing: the load average before and
after each model is recorded beside it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS = ["mobilenet_v2", "resnet50", "inception_v3", "densenet121", "vit", "gpt2", "bert_base"]


def hdp(*args, env=None) -> tuple[float, subprocess.CompletedProcess]:
    """Run ``python -m hdp ARGS``; (wall seconds, the process)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "hdp", *map(str, args)], capture_output=True, text=True,
                       env=env, cwd=ROOT)
    return time.perf_counter() - t0, p


def load() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def compile_row(xml: Path, work: Path, name: str, extra: list[str]) -> dict:
    cache = work / f"cache-{name}"
    shutil.rmtree(cache, ignore_errors=True)  # an empty cache: profile, support and measurements again
    out, tim, ir = work / f"{name}.xml", work / f"t-{name}.json", work / f"{name}.hdp"
    la = load()
    wall, p = hdp("compile", xml, "-o", out, "--target", "virtual", "--cache-dir", cache, "--timings", tim,
                  "--emit-ir", ir, *extra)
    if p.returncode:
        raise SystemExit(f"compile {name} of {xml} failed:\n{p.stdout}\n{p.stderr}")
    rows = json.loads(tim.read_text())
    passes = {}
    for r in rows:
        if "stage" in r:
            continue
        passes[r["pass"]] = passes.get(r["pass"], 0.0) + r["seconds"]
    stages = [(r["stage"], r["seconds"]) for r in rows if "stage" in r]
    return {"wall_s": wall, "passes": passes, "stages": stages, "stdout": p.stdout, "out": str(out), "ir": str(ir),
            "load_before": la, "load_after": load(),
            # what is not a pass: process start, imports and the final compare with plain compiles
            "outside_passes_s": wall - sum(passes.values())}


def verdicts(auto_ir: str, opt_ir: str, max_seconds: float) -> dict:
    """The default's placement against optimal's, the best plain compile (the whole model on one
    device, no HETERO: what a user gets without hdp) and the best single-device placement (every op
    on one device through HETERO: what ``--method single:D`` writes), all interleaved. The
    placements are the compiles' final Modules (``--emit-ir``): a device per op of the model both
    lowered (the written files may hold more ops: shared constants are duplicated per device)."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from hdp.ir.serde import load as load_module
    from hdp.runtime.measure import stats
    from hdp.runtime.measure.measurement import placed, unplaced
    from hdp.runtime.measure.measurer import Measurer
    from hdp.target.target import load_target

    ma, mo = load_module(auto_ir), load_module(opt_ir)
    if ma.graph.n_ops != mo.graph.n_ops:
        raise SystemExit(f"{auto_ir} and {opt_ir} were lowered differently")
    da, devices = ma.placement.device_of.numpy(), ma.placement.devices
    do, devices_o = mo.placement.device_of.numpy(), mo.placement.devices
    tgt = load_target("virtual")
    n = len(da)
    la = load()
    specs = [("default", da, devices), ("optimal", do, devices_o)]
    specs += [(f"single:{d}", np.full(n, k, np.int16), devices) for k, d in enumerate(devices)]
    # a placement identical to the default's is not measured twice: two compiled instances of one
    # graph differ by a few per cent from instance to instance, which is not a placement's doing
    identical = {name for name, d, devs in specs[1:] if tuple(devs) == tuple(devices) and np.array_equal(d, da)}
    cands = [placed(d, devs, name) for name, d, devs in specs if name not in identical]
    cands += [unplaced("CPU"), unplaced("CPU_B")]
    with Measurer(ma, tgt, cache=False) as m:
        h = m.head_to_head(cands, stats.SequentialPlan(max_seconds=max_seconds))
    ok = {h.names[i] for i in range(len(cands)) if h.measurements[i].ok}
    out = {"header": h.header(), "rounds": h.rounds, "load_before": la, "load_after": load(),
           "identical_to_default": sorted(identical),
           "medians_ms": {n: (x.median * 1e3 if x.ok else None) for n, x in zip(h.names, h.measurements)}}

    def against(name: str) -> dict:
        if name in identical:
            return {"verdict": "identical", "text": "the same placement", "ratio": 1.0, "low": 1.0, "high": 1.0,
                    "same_graph": True}
        c = h.compare(name, "default")
        return {"verdict": c.verdict, "text": c.describe(), "ratio": c.ratio, "low": c.low, "high": c.high,
                "same_graph": c.same_graph}

    def fastest(names: list[str]) -> str:
        # the lowest Hodges-Lehmann time relative to the default's (an identical placement: 1)
        def rel(x: str) -> float:
            if x in identical:
                return 0.0
            t = np.log(np.asarray(h.measurements[h.index(x)].times) / np.asarray(h.measurements[0].times))
            return stats.hl_estimate(t)
        return min(names, key=rel)

    if "default" not in ok:
        return out
    if "optimal" in ok or "optimal" in identical:
        out["vs_optimal"] = against("optimal")
    singles = [f"single:{d}" for d in devices]
    for key, names in (("plain", [x for x in ("plain CPU", "plain CPU_B") if x in ok]),
                       ("single", [x for x in singles if x in ok or x in identical])):
        if names:
            best = fastest(names)
            out[f"best_{key}"] = best
            out[f"vs_best_{key}"] = against(best)
    return out


def refinement(stdout: str) -> str:
    """What the default's learning stage did, from its report lines."""
    for line in stdout.splitlines():
        if line.startswith("auto: measured refinement"):
            if "kept it" in line:
                return "beat the winner beyond noise"
            if "skipped" in line:
                return "skipped: " + line.split("skipped: ", 1)[1].split(",")[0]
            return "no gain beyond noise"
    return "not run"


def chosen(stdout: str) -> str:
    """The placement the default kept, from its report lines."""
    kept = "?"
    for line in stdout.splitlines():
        m = re.search(r"measured: kept (\S+)", line) or re.search(r"^auto: kept (\S+)", line)
        if m:
            kept = m.group(1)
        if line.startswith("auto: measured refinement") and "kept it" in line:
            return "learned"
    return kept


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--work", default="/tmp/hdp-bench-auto")
    ap.add_argument("--out", default=None, help="output path without suffix (default bench/results/auto-virtual-DATE)")
    ap.add_argument("--verdict-seconds", type=float, default=30.0, help="time cap of the final comparison")
    ap.add_argument("--hsdag-budget", type=float, default=0.0, help="also run --method hsdag --budget B")
    ap.add_argument("--no-compare", action="store_true", help="compile with --no-compare (both methods)")
    ap.add_argument("--remeasure", default=None, help="a results .json: measure its placements head to head "
                    "again (--verdict-seconds each) and write <out>.md/.json beside it; nothing is compiled")
    a = ap.parse_args()
    if a.remeasure:
        return remeasure(a)
    sys.path.insert(0, str(ROOT))
    import openvino as ov

    from hdp.target.host import host_facts, host_fingerprint
    from hdp.zoo import models as zoo

    today = dt.date.today().isoformat()
    out = Path(a.out) if a.out else ROOT / "bench" / "results" / f"auto-virtual-{today}"
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    extra = ["--no-compare"] if a.no_compare else []
    results = []
    for k, name in enumerate(a.models.split(",")):
        w = work / name
        w.mkdir(exist_ok=True)
        xml = Path(zoo.export(name, w / f"{name}.xml"))
        runs = [("optimal", ["--method", "optimal"] + extra), ("default", extra)]
        if k % 2:  # alternate which goes first: a drift in the load then favours neither
            runs.reverse()
        row = {"model": name}
        for label, args in runs:
            row[label] = compile_row(xml, w, label, args)
            print(f"{name} {label}: {row[label]['wall_s']:.1f} s", flush=True)
        row["ops"] = int(re.search(r"placed (\d+) ops", row["default"]["stdout"]).group(1))
        row["ratio"] = row["default"]["wall_s"] / row["optimal"]["wall_s"]
        inner = {lab: row[lab]["wall_s"] - row[lab]["outside_passes_s"] for lab in ("default", "optimal")}
        row["ratio_passes"] = inner["default"] / inner["optimal"]
        row["refinement"] = refinement(row["default"]["stdout"])
        row["chosen"] = chosen(row["default"]["stdout"])
        row["verdicts"] = verdicts(row["default"]["ir"], row["optimal"]["ir"], a.verdict_seconds)
        print(f"  {row['verdicts'].get('vs_optimal', {}).get('text')} | "
              f"{row['verdicts'].get('vs_best_single', {}).get('text')}", flush=True)
        if a.hsdag_budget:
            hs = compile_row(xml, w, "hsdag", ["--method", "hsdag", "--budget", str(a.hsdag_budget), "--no-compare"])
            row["hsdag"] = {"budget": a.hsdag_budget, "partition_s": hs["passes"].get("partition"),
                            "stages": hs["stages"], "wall_s": hs["wall_s"], "load_before": hs["load_before"],
                            "load_after": hs["load_after"], "stdout": hs["stdout"]}
            print(f"  hsdag --budget {a.hsdag_budget:g}: partition {hs['passes'].get('partition'):.1f} s", flush=True)
        results.append(row)
        facts = host_facts()
        write(out, results, today, f"{facts.get('cpu', '?')}, host {host_fingerprint()}", ov.get_version(), a)
    print(f"-> {out}.md, {out}.json")


def remeasure(a) -> None:
    """The final comparison again, for the models of a results file (its placed models must still
    be in --work): a second, independent sample of the same question."""
    src = Path(a.remeasure)
    d = json.loads(src.read_text())
    keep = set(a.models.split(",")) if a.models != ",".join(MODELS) else None
    rows = []
    for r in d["results"]:
        if keep is not None and r["model"] not in keep:
            continue
        v = verdicts(r["default"]["ir"], r["optimal"]["ir"], a.verdict_seconds)
        rows.append({"model": r["model"], "kept": r["chosen"], "first": r["verdicts"], "again": v})
        print(f"{r['model']}: {_v(v.get('vs_optimal'))} | {_v(v.get('vs_best_plain'))} | "
              f"{_v(v.get('vs_best_single'))}", flush=True)
    out = Path(a.out) if a.out else src.with_name(src.stem + "-remeasured")
    lines = [f"# Re-measured: {src.name}, {dt.date.today().isoformat()}", "",
             f"Command: `python bench/auto_table.py --remeasure {src} --models {a.models} "
             f"--verdict-seconds {a.verdict_seconds:g}`. The placements written by that run, measured head "
             f"to head again (interleaved, {a.verdict_seconds:g} s of rounds), on the same shared 2-core VM "
             f"with other agents running.", "",
             "| model | kept | default vs optimal | default vs best plain compile | default vs best single-device "
             "placement | rounds | load |", "|---|---|---|---|---|---:|---|"]
    for r in rows:
        v = r["again"]
        lines.append(f"| {r['model']} | {r['kept']} | {_v(v.get('vs_optimal'))} | {v.get('best_plain', '?')}: "
                     f"{_v(v.get('vs_best_plain'))} | {v.get('best_single', '?')}: {_v(v.get('vs_best_single'))} | "
                     f"{v['rounds']} | {v['load_before']:.1f}→{v['load_after']:.1f} |")
    lines += ["", "Medians:", ""] + [f"- {r['model']}: {r['again']['header']}" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print(f"-> {out}.md")


def _v(d: dict | None) -> str:
    return "-" if not d else d["text"]


def write(out: Path, results: list[dict], today: str, host: str, ov_version: str, a) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    cpu = platform.machine()
    lines = [f"# `auto` (the default) vs `optimal` and the best single device on `virtual` — {today}", "",
             f"Machine: {host} ({os.cpu_count()} cores, {cpu}); OpenVINO {ov_version}. **A shared 2-core VM "
             f"with other agents running**: every time below is wall clock under that load (load average "
             f"before → after each run beside it).", "",
             f"Command: `python bench/auto_table.py --models {a.models}"
             + (f" --hsdag-budget {a.hsdag_budget:g}" if a.hsdag_budget else "")
             + (" --no-compare" if a.no_compare else "") + "`", "",
             "Compiles: `hdp compile MODEL -o X --target virtual [--method optimal]`"
             + (" --no-compare" if a.no_compare else " (check and compare on, as a user runs it)")
             + ", each from its own empty `--cache-dir`. *ratio* = default wall / optimal wall; "
               "*ratio (passes)* = the same without process start and the final compare (the passes, "
               "check and raise only). Latency: the default's placement, optimal's and the plain "
               "compile on each device measured head to head, interleaved (95 % CI; \"equal within "
               "noise (±y %)\").", "",
             "| model | ops | optimal s | default s | ratio | ratio (passes) | default's stages (s) | kept | "
             "measured refinement | default vs optimal | default vs best plain compile | default vs best "
             "single-device placement | load |",
             "|---|---:|---:|---:|---:|---:|---|---|---|---|---|---|---|"]
    for r in results:
        st = ", ".join(f"{n.replace('auto: ', '')} {s:.1f}" for n, s in r["default"]["stages"]
                       if n.startswith("auto:"))
        v = r["verdicts"]
        if "vs_best_plain" not in v and "vs_best_single" in v:  # a run from before the HETERO singles
            v = {**v, "vs_best_plain": v.pop("vs_best_single"), "best_plain": v.pop("best_single")}
        la = f"{r['optimal']['load_before']:.1f}→{r['default']['load_after']:.1f}"
        lines.append(f"| {r['model']} | {r['ops']} | {r['optimal']['wall_s']:.1f} | {r['default']['wall_s']:.1f} | "
                     f"{r['ratio']:.2f} | {r['ratio_passes']:.2f} | {st} | {r['chosen']} | {r['refinement']} | "
                     f"{_v(v.get('vs_optimal'))} | {v.get('best_plain', '?')}: {_v(v.get('vs_best_plain'))} | "
                     f"{v.get('best_single', '-')}: {_v(v.get('vs_best_single'))} | {la} |")
    n_ref = sum(r["refinement"] == "beat the winner beyond noise" for r in results)
    n_ran = sum(r["refinement"] in ("beat the winner beyond noise", "no gain beyond noise") for r in results)
    worse = [r["model"] for r in results if any((r["verdicts"].get(k) or {}).get("verdict") == "slower"
                                               for k in ("vs_optimal", "vs_best_single"))]
    # slower than a plain compile: said apart, and whether that plain compile runs the default's own
    # graph (every op on one device): then the difference is HETERO's own cost or the few per cent two
    # compiled instances of one graph differ by, not a placement's doing
    plain_worse = []
    for r in results:
        c = r["verdicts"].get("vs_best_plain") or {}
        if c.get("verdict") == "slower":
            own = " (its own graph through HETERO)" if c.get("same_graph") else ""
            plain_worse.append(f"{r['model']} vs {r['verdicts'].get('best_plain')}{own}: {c.get('text')}")
    over = [r["model"] for r in results if r["ratio"] > 2.5]
    lines += ["", f"Measured refinement ran on {n_ran} of {len(results)} models and beat the best candidate "
              f"beyond noise (head to head) on {n_ref}.",
              f"Default slower than optimal or the best single-device placement beyond noise: "
              f"{', '.join(worse) or 'none'}. Slower than the best plain compile beyond noise: "
              f"{'; '.join(plain_worse) or 'none'}. Default compile over 2.5× optimal's: {', '.join(over) or 'none'}.", "",
              "Medians of the final comparison (ms) and its rounds:", ""]
    for r in results:
        lines.append(f"- {r['model']}: {r['verdicts']['header']}")
    hs = [r for r in results if "hsdag" in r]
    if hs:
        lines += ["", "`hdp compile MODEL --target virtual --method hsdag --budget B --no-compare`: seconds in "
                      "the partition pass (`--timings`), and where they went:", ""]
        for r in hs:
            h = r["hsdag"]
            st = ", ".join(f"{n} {s:.1f}" for n, s in h["stages"])
            lines.append(f"- {r['model']}: budget {h['budget']:g} s → partition {h['partition_s']:.1f} s ({st}); "
                         f"load {h['load_before']:.1f}→{h['load_after']:.1f}")
    (out.with_suffix(".md")).write_text("\n".join(lines) + "\n")
    (out.with_suffix(".json")).write_text(json.dumps({"date": today, "host": host, "openvino": ov_version,
                                                      "cores": os.cpu_count(), "results": results}, indent=1,
                                                     default=str) + "\n")


if __name__ == "__main__":
    main()

"""Runtime commands of the ``hdp`` CLI: ``targets``, ``evaluate`` and ``profile``.

Registered on the main group in :mod:`hdp.cli` with ``main.add_command(...)``.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

import click
import msgspec

from hdp.cli_common import (cache_options, cache_scoped, check_paths, pass_cache, shape_options,
                             shape_request, target_from, target_path, user_errors, with_options)
from hdp.runtime.devices import device_status


def _load_target(target: str | None, devices: str | None, default: str | None = "host"):
    if target is None and devices is None and default is None:
        return None
    return target_from(target, devices)


def _ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if math.isfinite(s) else "-"


# --------------------------------------------------------------------------- targets


def _cpu_capabilities() -> set[str]:
    """What this host's CPU plugin can compute in (``OPTIMIZATION_CAPABILITIES``: FP32, BF16, FP16, ...)."""
    import openvino as ov

    try:
        return {str(c).upper() for c in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")}
    except RuntimeError:
        return set()


def _describe(d, cpu_caps: set[str] = frozenset()) -> str:
    if d.kind == "modeled":
        peak = d.peak_flops.get(d.precision, 0.0)
        return (f"{d.precision} {peak / 1e12:.2f} TFLOP/s x {d.efficiency:g}, {d.memory_bandwidth / 1e9:.1f} GB/s, "
                f"{d.op_overhead * 1e6:g} us/op")
    cfg = ", ".join(f"{k}={v}" for k, v in d.config.items())
    src = f"alias of {d.plugin}" if d.alias else f"plugin {d.plugin_name}"
    hint = str(d.config.get("INFERENCE_PRECISION_HINT", "")).upper()
    note = ""
    if cpu_caps and d.plugin_name == "CPU" and hint in ("BF16", "F16") and \
            {"BF16": "BF16", "F16": "FP16"}[hint] not in cpu_caps:
        note = f" (this host's CPU has no {hint}: it runs f32)"
    return src + (f"; {cfg}" if cfg else "") + note


@click.command("targets")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@user_errors
def targets_cmd(as_json):
    """List the built-in targets, their devices, and which real devices this host has."""
    import msgspec
    import openvino as ov

    from hdp.runtime.target import builtin_names, host_target, load_target

    available = list(ov.Core().available_devices)
    rows = []
    for name in builtin_names():
        t = host_target(available) if name == "host" else load_target(name)
        rows.append((t, [(d, device_status(d, available)) for d in t.devices]))
    if as_json:
        out = []
        for t, devs in rows:
            out.append({"name": t.name, "description": t.description, "link": msgspec.to_builtins(t.link),
                        "devices": [dict(msgspec.to_builtins(d), status=s) for d, s in devs]})
        click.echo(json.dumps(out, indent=2))
        return
    caps = _cpu_capabilities()
    for t, devs in rows:
        click.echo(f"{t.name}: {t.description}")
        for d, status in devs:
            shown = "-" if status == "modeled" else status
            click.echo(f"  {d.name:<8} {d.kind:<8} {shown:<8} {_describe(d, caps)}")
        ln = t.link
        click.echo(f"  link: {ln.latency * 1e6:g} us + bytes / {ln.bandwidth / 1e9:g} GB/s; "
                   f"{ln.subgraph_overhead * 1e6:g} us per subgraph")
    click.echo(f"OpenVINO devices on this host: {', '.join(available) or 'none'}")


# --------------------------------------------------------------------------- evaluate


@click.command("evaluate")
@click.argument("placed", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--target", default=None, help="Target (default: the one recorded in the (first) placed model).")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--runs", default=20, show_default=True, type=click.IntRange(1),
              help="Timed runs; with several files or --plain, the least number of interleaved rounds "
                   "(at least 6).")
@click.option("--warmup", default=3, show_default=True, type=click.IntRange(0))
@click.option("--timeout", default=300.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="Seconds for one compile + warm-up + runs before the worker is killed.")
@click.option("--plain", default=None, metavar="DEVICE",
              help="Also run the model compiled directly on DEVICE (no HETERO), interleaved with the "
                   "placement(s) run by run, and say which is faster with a 95% confidence interval.")
@click.option("--resolution", default=3.0, show_default=True, type=click.FloatRange(0, 100, min_open=True,
              max_open=True), help="With several files or --plain: run rounds until a difference of this "
                                   "many percent can be told apart (or --max-seconds).")
@click.option("--max-seconds", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True),
              help="With several files or --plain: at most this long running interleaved rounds "
                   "(compiles excluded).")
@click.option("--execution", type=click.Choice(["sequential", "concurrent"]), default="sequential",
              show_default=True,
              help="How the placement runs: under HETERO, one subgraph after another, or by hdp's concurrent "
                   "executor (every device at once). concurrent runs one PLACED file head to head with the same "
                   "file under HETERO and with every op on each device it uses, and says how they compare.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times in seconds).")
@click.option("--objective", type=click.Choice(["latency", "throughput"]), default="latency", show_default=True,
              help="throughput: keep --requests inferences in flight (an async infer queue on the HETERO "
                   "compile) and report inferences per second over --runs windows with a 95% CI; with --plain, "
                   "also the plain compile with its own streams.")
@click.option("--requests", type=int, default=None, help="throughput: inferences in flight  [default: 2]")
@with_options(cache_options("a single placement's measurement goes to <cache-dir>/measure",
                            "Measure again and cache nothing."))
@user_errors
@cache_scoped
def evaluate_cmd(placed, target, devices, runs, warmup, timeout, plain, resolution, max_seconds, execution,
                 as_json, objective, requests, cache_dir, no_cache):
    """Measure placed models (from `hdp compile`) with HETERO on the target's real devices.

    One PLACED file alone is measured on its own (a figure measured earlier is reused unless
    --no-cache; the output says "cached"). Several PLACED files (placements of one model, placed
    at the same input shapes) are compiled in one worker and run interleaved (A B C C B A ...)
    until their differences are resolved, with one verdict and its 95% confidence interval per
    pair; files that place the same graph on the same devices op for op are reported as identical.
    Separate `hdp evaluate` calls are no comparison: two processes running one graph differ by
    10 % and more. With --plain DEVICE the plain compile joins the interleaved runs; comparisons are
    never cached. A plain (unplaced) OpenVINO model can be timed with --plain DEVICE alone. An
    exported PLACED.blob (`hdp export`) is imported and timed as an application runs it, its
    devices registered as its record says.
    """
    from hdp.errors import InputError

    check_paths(inputs={**{("PLACED" if len(placed) == 1 else f"PLACED #{i + 1}"): p for i, p in enumerate(placed)},
                        "--target": target_path(target)},
                out_dirs={"--cache-dir": None if no_cache else cache_dir})
    blobs = [p for p in placed if Path(p).suffix.lower() == ".blob"]
    if blobs:
        if len(placed) > 1 or target or devices or plain:
            raise click.UsageError("an exported .blob is evaluated alone, with the devices its record names "
                                   "(no --target, --devices, --plain or other files)")
        if objective != "latency" or requests is not None or execution != "sequential":
            raise click.UsageError("an exported .blob is timed one request at a time; --objective, --requests "
                                   "and --execution measure a placed .xml")
        return _evaluate_blob(blobs[0], runs=runs, warmup=warmup, timeout=timeout, as_json=as_json)
    tgt = _load_target(target, devices, default=None)
    if objective == "throughput" and execution != "sequential":
        raise click.UsageError("--objective throughput measures HETERO's pipelining of requests in flight; "
                               "not with --execution concurrent")
    if objective != "throughput" and requests is not None:
        raise click.UsageError(f"--requests {requests}: only with --objective throughput")
    if execution == "concurrent":
        if len(placed) > 1 or plain:
            raise click.UsageError("--execution concurrent evaluates one placed file (against itself under HETERO "
                                   "and every single device it uses); no other files or --plain")
        return _evaluate_concurrent(placed[0], tgt, runs=runs, warmup=warmup, timeout=timeout,
                                    resolution=resolution, max_seconds=max_seconds, as_json=as_json)
    if objective == "throughput":
        requests = 2 if requests is None else requests
        if requests < 1:
            raise InputError(f"--requests {requests}: must be at least 1")
        if len(placed) > 1:
            raise click.UsageError("--objective throughput measures one placed model (with --plain: and the plain "
                                   "compile); give one file")
        return _evaluate_throughput(placed[0], tgt, requests=requests, runs=runs, warmup=warmup, timeout=timeout,
                                    plain=plain, as_json=as_json)
    if len(placed) > 1:
        return _evaluate_several(list(placed), tgt, runs=runs, warmup=warmup, timeout=timeout, plain=plain,
                                 resolution=resolution, max_seconds=max_seconds, as_json=as_json)
    import msgspec

    from hdp.runtime.measure import Measurer, evaluate_placed
    from hdp.runtime.measurement import MeasureError
    from hdp.runtime.stats import SequentialPlan

    (placed,) = placed
    kw = dict(runs=runs, warmup=warmup, timeout=timeout, cache=True)
    plan = SequentialPlan(resolution=resolution / 100, min_rounds=max(runs, 6), max_rounds=max(runs, 1000),
                          max_seconds=max_seconds)
    checked = None
    try:
        from hdp.runtime.verify import check_placed_file

        checked = check_placed_file(placed, tgt, timeout=timeout)
        if not checked.passed:
            raise MeasureError(f"{placed}: the placed model {checked.describe()}")
        res = evaluate_placed(placed, tgt, unplaced_on=plain, plan=plan, **kw)
    except InputError as e:
        if not plain or "not a placed model" not in str(e):
            raise
        with Measurer(placed, tgt or _load_target(None, None), **kw) as m:
            res = {"plain": m.measure_unplaced(plain)}
    comparison = res.pop("comparison", None)
    cached = any(m.cached for m in res.values())
    memory = placed_memory(placed) if checked is not None else None
    if as_json:
        out = {k: v.to_dict() for k, v in res.items()}
        out["cached"] = cached
        if checked is not None:
            out["check"] = msgspec.to_builtins(checked)
        if memory is not None:
            out["memory"] = memory[1]
        if comparison is not None:
            out["comparison"] = comparison.to_dict()
            out["speedup_vs_plain"] = 1.0 / comparison.ratio  # plain time / placed time (estimate)
        click.echo(json.dumps(out, indent=2))
    else:
        if checked is not None:
            click.echo(checked.describe())
        if memory is not None:
            click.echo(memory[0])
        for k, m in res.items():
            click.echo(f"{m.what} on {m.target}: {m.summary()}"
                       + (f"; compile {m.compile_seconds:.2f} s" if m.ok and not m.cached else ""))
        if cached:
            click.echo("cached: this figure was measured by an earlier hdp evaluate of the same placement on "
                       "this host (--no-cache measures again); two separate measurements are no comparison: "
                       "give several files to compare them head to head")
        if comparison is not None:
            note = ""
            if comparison.same_graph:
                note = f" (all ops on {plain}: same graph as the plain {plain} compile)"
            click.echo(f"placement vs plain {plain}: {comparison.describe()}, "
                       f"interleaved over {comparison.rounds} rounds{note}")
    failed = [m for m in res.values() if not m.ok]
    if failed:
        raise MeasureError(failed[0].error)


def _evaluate_concurrent(xml: str, tgt, *, runs, warmup, timeout, resolution, max_seconds, as_json) -> None:
    """``hdp evaluate PLACED --execution concurrent``: the file checked as the concurrent executor
    runs it, then measured head to head by that executor, under HETERO and on every single device it
    uses; one verdict each against the concurrent run, the family holding at 95 %."""
    import msgspec

    from hdp.runtime.measure import Measurer, placed_device_of
    from hdp.runtime.measurement import MeasureError, placed_file, unplaced
    from hdp.runtime.stats import SequentialPlan
    from hdp.runtime.verify import check_placed_file

    if tgt is None:
        tgt = placed_device_of(xml)[2]
    checked = check_placed_file(xml, tgt, timeout=timeout, execution="concurrent")
    if not checked.passed:
        raise MeasureError(f"{xml}: the placed model {checked.describe()}")
    conc = placed_file(xml, "concurrent", tgt, execution="concurrent")
    run = [conc, placed_file(xml, "HETERO", tgt)] + [unplaced(d, f"single {d}") for d in conc.used]
    plan = SequentialPlan(resolution=resolution / 100, min_rounds=max(runs, 6), max_rounds=max(runs, 1000),
                          max_seconds=max_seconds)
    with Measurer(xml, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=False) as m:
        head = m.head_to_head(run, plan)
    family = len(run) - 1
    pairs = []
    for k in range(1, len(run)):
        if not (head.measurements[0].ok and head.measurements[k].ok):
            bad = next(x for x in (head.measurements[0], head.measurements[k]) if not x.ok)
            pairs.append({"a": run[k].name, "b": "concurrent", "text": f"concurrent vs {run[k].name}: not compared "
                                                                        f"({bad.error})"})
            continue
        c = head.compare(k, 0, family=family)
        pairs.append({"a": run[k].name, "b": "concurrent", "comparison": c.to_dict(),
                      "text": f"concurrent vs {run[k].name}: {c.describe()}"})
    if as_json:
        out = {"file": xml, "target": tgt.name, "execution": "concurrent", "check": msgspec.to_builtins(checked),
               "measurements": {c.name: x.to_dict() for c, x in zip(run, head.measurements)},
               "rounds": head.rounds, "seconds": head.seconds, "stopped": head.reason, "pairs": pairs}
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(f"{xml}: {checked.describe()}")
        click.echo(head.header())
        for c, x in zip(run, head.measurements):
            click.echo(f"{c.name}: {x.summary()}")
        for p in pairs:
            click.echo(p["text"])
    failed = [x for x in head.measurements if not x.ok]
    if failed:
        raise MeasureError(failed[0].error)


def placed_memory(path) -> tuple[str, list[dict]] | None:
    """:func:`hdp.show.placed_memory` with JSON's null for an unlimited capacity."""
    from hdp.show import placed_memory as read

    got = read(path)
    if got is None:
        return None
    return got[0], [{**r, "capacity": r["capacity"] if math.isfinite(r["capacity"]) else None} for r in got[1]]


def _evaluate_throughput(placed: str, tgt, *, requests, runs, warmup, timeout, plain, as_json) -> None:
    """``hdp evaluate --objective throughput``: the placed model (and ``plain``) with ``requests``
    in flight; beside it the throughput simulated when it was placed, if for the same ``requests``."""
    from hdp.runtime.measure import Measurer, placed_device_of
    from hdp.runtime.measurement import MeasureError
    from hdp.runtime.placed import model_info, read_placed
    from hdp.runtime.serving import serve_against_plain, served_lines, simulated_plain_rate

    dev, devs, tgt = placed_device_of(placed, tgt)
    model = read_placed(placed).model
    sim = {k: model_info(model, f"sim_{k}") for k in ("period", "requests", "simulated", "singles")}
    batches = max(runs, 6)
    against = None
    if plain:  # side by side, window for window: the host's drift cancels in their ratio
        against = serve_against_plain(placed, tgt, dev, devs, plain, requests, batches=batches, warmup=warmup,
                                      timeout=timeout)
        res = {"placed": against.placed, "plain": against.plain}
    else:
        with Measurer(placed, tgt, runs=1, warmup=warmup, timeout=timeout, cache=False) as m:
            res = {"placed": m.serve(dev, devs, requests=requests, batches=batches)}
    versus = against.versus if against is not None else None
    simulated = None
    if sim["period"] and sim["requests"] == str(requests):
        simulated = 1.0 / float(sim["period"])
    elif sim["simulated"] and requests == 1:
        simulated = 1.0 / float(sim["simulated"])
    plain_sim = simulated_plain_rate(tgt.device(plain), sim["singles"], requests) if plain and simulated else None
    memory = placed_memory(placed)
    if as_json:
        out = {k: {**msgspec.to_builtins(v), "estimate": v.estimate()} for k, v in res.items()}
        out["simulated_per_second"] = simulated
        if plain_sim is not None:
            out["simulated_plain_per_second"] = plain_sim
        if simulated and res["placed"].ok:
            out["measured_over_simulated"] = res["placed"].estimate()[0] / simulated
        if plain_sim is not None and versus is not None and versus.ratio > 0:
            out["placed_vs_plain_simulated"] = simulated / plain_sim
        if versus is not None:
            out["placed_vs_plain"] = versus.to_dict()
        if memory is not None:
            out["memory"] = memory[1]
        click.echo(json.dumps(out, indent=2))
    else:
        if memory is not None:
            click.echo(memory[0])
        if against is not None:
            for line in against.lines(simulated, plain_sim) + [against.verdict()]:
                click.echo(line)
        else:
            for line in served_lines(res["placed"], simulated):
                click.echo(line)
        if simulated is None and sim["period"]:
            click.echo(f"(placed for {sim['requests']} requests in flight: no simulated figure for {requests})")
    failed = [v for v in res.values() if not v.ok]
    if failed:
        raise MeasureError(failed[0].error)


def _evaluate_blob(blob: str, *, runs, warmup, timeout, as_json) -> None:
    """``hdp evaluate placed.blob``: the exported placement imported and timed as an application
    runs it (never cached)."""
    from hdp.runtime.blob import measure_blob
    from hdp.runtime.measurement import MeasureError

    m = measure_blob(blob, runs=runs, warmup=warmup, timeout=timeout)
    if as_json:
        click.echo(json.dumps({"blob": m.to_dict(), "cached": False}, indent=2))
    else:
        click.echo(f"{m.what} on {m.target}: {m.summary()}" + (f"; import {m.compile_seconds:.2f} s" if m.ok else ""))
    if not m.ok:
        raise MeasureError(m.error)


def _evaluate_several(files: list[str], tgt, *, runs, warmup, timeout, plain, resolution, max_seconds,
                      as_json) -> None:
    """``hdp evaluate a.xml b.xml ...``: every file checked, then the distinct placements (and
    ``plain``) measured head to head in one worker; one verdict per pair."""
    import os

    import msgspec

    from hdp.errors import InputError
    from hdp.runtime.measure import Measurer, placed_device_of
    from hdp.runtime.measurement import MeasureError, placed_file, unplaced
    from hdp.runtime.placed import read_placed
    from hdp.runtime.stats import SequentialPlan
    from hdp.runtime.verify import check_placed_file

    seen: dict[str, str] = {}
    for f in files:
        real = os.path.realpath(f)
        if real in seen:
            raise InputError(f"{f}: given twice (as {seen[real]}); give each placed model once")
        seen[real] = f
    if tgt is None:
        tgt = placed_device_of(files[0])[2]
    specs = {}
    for f in files:
        model = read_placed(f).model
        try:
            specs[f] = model.get_rt_info(["hdp", "specialisation"]).astype(str)
        except RuntimeError:
            specs[f] = ""
    first = files[0]
    for f in files[1:]:
        if specs[f] != specs[first]:
            from hdp.ir.specialise import Specialisation

            def shapes(text, where):
                return Specialisation.from_json(text, where).input_shapes() if text else "no recorded shapes"

            raise InputError(f"{f}: placed at {shapes(specs[f], f)}, {first} at {shapes(specs[first], first)}; "
                             f"a head-to-head runs every placement on the same inputs: compile them at the "
                             f"same shapes")
    cands = [placed_file(f, f, tgt) for f in files]
    checks = {}
    for f in files:
        checks[f] = check_placed_file(f, tgt, timeout=timeout)
        if not checks[f].passed:
            raise MeasureError(f"{f}: the placed model {checks[f].describe()}")
    # identical placements (the same graph, the same device per op) are measured once
    distinct: list[int] = []
    same_as: dict[int, int] = {}
    for i, c in enumerate(cands):
        j = next((k for k in distinct if cands[k].graph == c.graph), None)
        if j is None:
            distinct.append(i)
        else:
            same_as[i] = j
    run = [cands[i] for i in distinct] + ([unplaced(plain)] if plain else [])
    plan = SequentialPlan(resolution=resolution / 100, min_rounds=max(runs, 6), max_rounds=max(runs, 1000),
                          max_seconds=max_seconds, all_pairs=True)
    head = None
    if len(run) > 1:
        with Measurer(first, tgt, runs=runs, warmup=warmup, timeout=timeout, cache=False) as m:
            head = m.head_to_head(run, plan)
    pairs = [{"a": cands[j].name, "b": cands[i].name, "identical": True,
              "text": f"{cands[i].name} vs {cands[j].name}: identical placements (the same graph, every op on "
                      f"the same device): no timing difference to claim"} for i, j in same_as.items()]
    for a in range(len(run)):
        for b in range(a + 1, len(run)):
            na, nb = run[a].name, run[b].name
            bad = [head.measurements[k] for k in (a, b) if not head.measurements[k].ok]
            if bad:
                pairs.append({"a": na, "b": nb, "identical": False, "error": bad[0].error,
                              "text": f"{nb} vs {na}: not compared ({bad[0].error})"})
                continue
            c = head.compare(a, b)
            same = " (the same graph: never called faster)" if c.same_graph else ""
            pairs.append({"a": na, "b": nb, "identical": False, "comparison": c.to_dict(),
                          "text": f"{nb} vs {na}: {c.describe()}{same}"})
    if as_json:
        out = {"files": files, "target": tgt.name, "cached": False,
               "check": {f: msgspec.to_builtins(r) for f, r in checks.items()},
               "identical": {cands[i].name: cands[j].name for i, j in same_as.items()},
               "measurements": {c.name: m.to_dict() for c, m in zip(run, head.measurements)} if head else {},
               "rounds": head.rounds if head else 0, "seconds": head.seconds if head else 0.0,
               "stopped": head.reason if head else "", "pairs": pairs}
        click.echo(json.dumps(out, indent=2))
    else:
        for f in files:
            click.echo(f"{f}: {checks[f].describe()}")
        if head is not None:
            click.echo(head.header())
        for p in pairs:
            click.echo(p["text"])
    if head is not None:
        failed = [m for m in head.measurements if not m.ok]
        if failed:
            raise MeasureError(failed[0].error)


# --------------------------------------------------------------------------- profile


def costs_json(module, costs, info: dict | None = None) -> dict:
    """Human-inspectable costs: per device totals, per op name/type/FLOPs and time per device
    (seconds; null where the device does not support the op)."""
    import numpy as np

    from hdp.runtime.profile import coverage

    t = costs.op_time.numpy()
    cov = coverage(costs)
    devs = []
    for j, d in enumerate(costs.devices):
        row = {"name": d, "kind": costs.kind[j], "class": costs.device_class[j] if costs.device_class else None,
               "total_seconds": costs.measured_total[j] if costs.measured_total else None,
               "sum_seconds": float(t[np.isfinite(t[:, j]), j].sum()),
               "coverage": cov[j] if math.isfinite(cov[j]) else None}
        if info and d in info:
            row.update({f"profile_{k}": v for k, v in info[d].items()})
        devs.append(row)
    ops = []
    for i, op in enumerate(module.graph.ops):
        ops.append({"name": op.name, "type": op.type, "flops": op.flops,
                    "time": {d: (float(t[i, j]) if math.isfinite(t[i, j]) else None)
                             for j, d in enumerate(costs.devices)}})
    return {"model": module.meta.get("source", ""), "devices": devs,
            "link": {"latency": costs.link_latency, "bandwidth": costs.link_bandwidth,
                     "subgraph_overhead": costs.subgraph_overhead},
            "ops": ops}


@click.command("profile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Costs as JSON.")
@click.option("--target", default=None, help="Target name (see `hdp targets`) or TOML file.")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--runs", default=10, show_default=True, type=click.IntRange(1),
              help="At most this many timed runs per device (the devices take turns, run by run).")
@click.option("--warmup", default=1, show_default=True, type=click.IntRange(1))
@click.option("--seconds", default=1.0, show_default=True, type=click.FloatRange(0),
              help="After 2 timed runs per device, only as many more as keep the timed runs of all "
                   "devices within this many seconds (0: always --runs).")
@with_options(shape_options)
@click.option("--top", default=10, show_default=True, type=click.IntRange(0), help="Print the N costliest ops.")
@with_options(cache_options("the pass cache is there", "Do not read or write the pass cache (profile again)."))
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds a device may take to answer the support query, or to compile and run the "
                   "model, before its worker is killed (default 600).")
@user_errors
@cache_scoped
def profile_cmd(model, output, target, devices, runs, warmup, seconds, input_shape, seq_len, phase, top,
                cache_dir, no_cache, timeout):
    """Time every op of MODEL (.xml or a lowered .hdp) on every device of a target; write JSON."""
    import numpy as np

    from hdp.ir.serde import load
    from hdp.fsutil import atomic_write
    from hdp.pipeline import lower_cached, make_pass, run_passes

    check_paths(inputs={"MODEL": model, "--target": target_path(target)}, outputs={"-o": output},
                out_dirs={"--cache-dir": None if no_cache else cache_dir})
    tgt = _load_target(target, devices)
    cache = pass_cache(cache_dir, no_cache)
    if Path(model).suffix.lower() == ".hdp":
        module = load(model)
        check_paths(inputs={"MODEL": model, "MODEL's source model": module.meta.get("source"),
                            "--target": target_path(target)}, outputs={"-o": output})
    else:
        module = lower_cached(model, shape_request(input_shape, seq_len, phase), cache)
    sched = []
    if module.support is None or module.support.devices != tgt.device_names:
        sched.append(make_pass("support", {"target": tgt}))
    sched.append(make_pass("profile", {"target": tgt, "runs": runs, "warmup": warmup, "seconds": seconds}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = run_passes(module.replace(costs=None), sched, cache=cache, timeout=timeout)
    for w in caught:
        click.echo(f"hdp: warning: {w.message}", err=True)
    doc = costs_json(module, module.costs)
    atomic_write(output, json.dumps(doc, indent=1).encode())
    for d in doc["devices"]:
        cov = f", per-op sum {_ms(d['sum_seconds'])} ({d['coverage']:.2f} of it)" if d["coverage"] is not None \
            and d["kind"] == "measured" else ""
        same = [e["name"] for e in doc["devices"] if d["class"] and e["class"] == d["class"] and e is not d]
        what = d["kind"] + (f", {d['class']}" if d["class"] and d["kind"] == "measured" else "") + \
            (f"; one kind with {', '.join(same)}: one profile" if same else "")
        click.echo(f"{d['name']} ({what}): whole model {_ms(d['total_seconds'])}{cov}")
    if top:
        t = module.costs.op_time.numpy()
        finite = np.where(np.isfinite(t), t, 0.0)
        order = np.argsort(-finite.max(axis=1))[:top]
        width = max([len(module.graph.ops[i].name) for i in order] + [len("costliest ops")])
        click.echo(f"{'costliest ops':<{width + 2}} {'':<14} " + "  ".join(f"{d:>10}" for d in module.costs.devices))
        for i in order:
            op = module.graph.ops[i]
            click.echo(f"  {op.name:<{width}} {op.type:<14} " + "  ".join(f"{_ms(x):>10}" for x in t[i]))
    click.echo(f"{module.graph.n_ops} ops on {tgt.name} -> {output}")

"""Runtime commands of the ``hdp`` CLI: ``targets``, ``evaluate`` and ``profile``.

Registered on the main group in :mod:`hdp.cli.main` with ``main.add_command(...)``.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import click
import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.base.fsutil import atomic_write
from hdp.base.validation import AtLeastOne, Count, Duration, Percent, TimeLimit
from hdp.cli.common import (
    Bounded,
    cache_options,
    cache_scoped,
    check_paths,
    field_type,
    pass_cache,
    shape_options,
    shape_request,
    target_from,
    target_path,
    user_errors,
    with_options,
)
from hdp.cli.compare import evaluate_several
from hdp.cli.serve import evaluate_plan
from hdp.cli.show import placed_memory as read
from hdp.ir.plan import is_plan_file
from hdp.ir.serde import load
from hdp.pipeline.schedule import make_pass, run_passes
from hdp.pipeline.stages import lower_cached
from hdp.placement.objective import Throughput
from hdp.runtime.costs.profile import coverage
from hdp.runtime.measure.measurement import (
    MeasureError,
    placed_file,
    unplaced,
)
from hdp.runtime.measure.measurer import Measurer, evaluate_placed, placed_device_of
from hdp.runtime.measure.stats import SequentialPlan
from hdp.runtime.placed.model import ops_placed, placed_count_text, read_placed, sim_record
from hdp.runtime.serve.blob import measure_blob
from hdp.runtime.serve.serving import (
    serve_against_plain,
    served_lines,
    simulated_plain_rate,
)
from hdp.runtime.serve.verify import check_placed_file
from hdp.target.devices import device_status, host_kinds
from hdp.target.target import builtin_names, host_target, load_target


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
    import openvino as ov


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
@click.option("--runs", default=20, show_default=True, type=Bounded(AtLeastOne),
              help="Timed runs; with several files or --plain, the least number of interleaved rounds "
                   "(at least 6).")
@click.option("--warmup", default=3, show_default=True, type=Bounded(Count))
@click.option("--timeout", default=300.0, show_default=True, type=Bounded(TimeLimit),
              help="Seconds for one compile + warm-up + runs before the worker is killed.")
@click.option("--plain", default=None, metavar="DEVICE",
              help="Also run the model compiled directly on DEVICE (no HETERO), interleaved with the "
                   "placement(s) run by run, and say which is faster with a 95% confidence interval; "
                   "'default' (or default:KIND): this host's default plain compile, OpenVINO's defaults "
                   "on a device kind (the reference of compile's verdict).")
@click.option("--resolution", default=3.0, show_default=True, type=Bounded(Percent), help="With several files or --plain: run rounds until a difference of this "
                                   "many percent can be told apart (or --max-seconds).")
@click.option("--max-seconds", default=30.0, show_default=True, type=Bounded(TimeLimit),
              help="With several files or --plain: at most this long running interleaved rounds "
                   "(compiles excluded).")
@click.option("--execution", type=click.Choice(["sequential", "concurrent"]), default="sequential",
              show_default=True,
              help="How the placement runs: under HETERO, one subgraph after another, or by hdp's concurrent "
                   "executor (every device at once). concurrent runs one PLACED file head to head with the same "
                   "file under HETERO and with every op on each device it uses, and says how they compare.")
@click.option("--across-targets", "across", is_flag=True,
              help="Compare files placed for different targets, each on the devices it was placed for "
                   "(without it, such files are refused).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (times in seconds).")
@click.option("--objective", type=click.Choice(["latency", "throughput"]), default=None,
              help="latency (the default), or throughput (the default with --requests): keep --requests requests in "
                   "flight (an async infer queue on the HETERO compile) and report requests per second over --runs "
                   "windows with a 95% CI; with --plain, also the plain compile with its own streams.")
@click.option("--requests", type=Bounded(field_type(Throughput, "requests")), default=None,
              help="Requests in flight (implies --objective throughput)  [default: 2]")
@with_options(cache_options("a single placement's measurement goes to <cache-dir>/measure",
                            "Measure again and cache nothing."))
@user_errors
@cache_scoped
def evaluate_cmd(placed, target, devices, runs, warmup, timeout, plain, resolution, max_seconds, execution,
                 across, as_json, objective, requests, cache_dir, no_cache):
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

    check_paths(inputs={**{("PLACED" if len(placed) == 1 else f"PLACED #{i + 1}"): p for i, p in enumerate(placed)},
                        "--target": target_path(target)},
                out_dirs={"--cache-dir": None if no_cache else cache_dir})
    plans = [p for p in placed if is_plan_file(p)]
    if plans:
        if len(placed) > 1 or target or devices:
            raise click.UsageError("a serving plan is evaluated alone, on the devices it names (no --target, "
                                   "--devices or other files)")
        if objective != "throughput" or execution != "sequential":
            raise click.UsageError("a serving plan is measured for throughput: give --objective throughput "
                                   "[--requests N] [--plain DEV]")
        return evaluate_plan(plans[0], requests=requests, runs=runs, plain=plain, timeout=timeout, as_json=as_json)
    blobs = [p for p in placed if Path(p).suffix.lower() == ".blob"]
    if blobs:
        if len(placed) > 1 or target or devices or plain:
            raise click.UsageError("an exported .blob is evaluated alone, with the devices its record names "
                                   "(no --target, --devices, --plain or other files)")
        if objective not in (None, "latency") or requests is not None or execution != "sequential":
            raise click.UsageError("an exported .blob is timed one request at a time; --objective, --requests "
                                   "and --execution measure a placed .xml")
        return _evaluate_blob(blobs[0], runs=runs, warmup=warmup, timeout=timeout, as_json=as_json)
    tgt = _load_target(target, devices, default=None)
    if requests is not None:  # the request count says what is meant
        if objective == "latency":
            raise InputError(f"--requests {requests}: requests in flight are what --objective throughput measures; "
                             f"not with --objective latency")
        objective = "throughput"
    objective = objective or "latency"
    if objective == "throughput" and execution != "sequential":
        raise click.UsageError("--objective throughput measures HETERO's pipelining of requests in flight; "
                               "not with --execution concurrent")
    if execution == "concurrent":
        if len(placed) > 1 or plain:
            raise click.UsageError("--execution concurrent evaluates one placed file (against itself under HETERO "
                                   "and every single device it uses); no other files or --plain")
        return _evaluate_concurrent(placed[0], tgt, runs=runs, warmup=warmup, timeout=timeout,
                                    resolution=resolution, max_seconds=max_seconds, as_json=as_json)
    if objective == "throughput":
        requests = 2 if requests is None else requests
        if len(placed) > 1:
            raise click.UsageError("--objective throughput measures one placed model (with --plain: and the plain "
                                   "compile); give one file")
        return _evaluate_throughput(placed[0], tgt, requests=requests, runs=runs, warmup=warmup, timeout=timeout,
                                    plain=plain, as_json=as_json)
    if len(placed) > 1:
        return evaluate_several(list(placed), tgt, runs=runs, warmup=warmup, timeout=timeout, plain=plain,
                                 resolution=resolution, max_seconds=max_seconds, as_json=as_json, across=across)
    if across:
        raise click.UsageError("--across-targets compares several placed files")


    (placed,) = placed
    kw = dict(runs=runs, warmup=warmup, timeout=timeout, cache=True)
    plan = SequentialPlan(resolution=resolution / 100, min_rounds=max(runs, 6), max_rounds=max(runs, 1000),
                          max_seconds=max_seconds)
    checked = None
    try:
        checked = check_placed_file(placed, tgt, timeout=timeout)
        if not checked.passed:
            raise MeasureError(f"{placed}: the placed model {checked.describe()}")
        res = evaluate_placed(placed, tgt, unplaced_on=plain, plan=plan, **kw)
    except InputError as e:
        if not plain or "not a placed model" not in str(e):
            raise
        if plain.partition(":")[0] == "default":
            raise InputError(f"{placed}: not a placed model; --plain default compares a placement with the "
                             f"default plain compile") from None
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
            out["loaded"] = comparison.loaded
        click.echo(json.dumps(out, indent=2))
    else:
        if checked is not None:
            counts = ops_placed(read_placed(placed).model)
            click.echo((f"{placed}: {placed_count_text(counts)}; " if counts else "") + checked.describe())
        if memory is not None:
            click.echo(memory[0])
        for k, m in res.items():
            where = "this host" if m.what.startswith("default:") else m.target  # not a device of the target
            click.echo(f"{m.what} on {where}: {m.summary()}"
                       + (f"; compile {m.compile_seconds:.2f} s" if m.ok and not m.cached else ""))
        if cached:
            click.echo("cached: this figure was measured by an earlier hdp evaluate of the same placement on "
                       "this host (--no-cache measures again); two separate measurements are no comparison: "
                       "give several files to compare them head to head")
        if comparison is not None:
            note = ""
            if comparison.same_graph:
                note = f" (all ops on {plain}: same graph as the plain {plain} compile)"
            ref = comparison.a if comparison.a.startswith("default") else f"plain {plain}"
            click.echo(f"placement vs {ref}: {comparison.describe()}, interleaved over {comparison.rounds} rounds"
                       + (f" in {comparison.blocks} blocks" if comparison.blocks > 1 else "") + note)
    failed = [m for m in res.values() if not m.ok]
    if failed:
        raise MeasureError(failed[0].error)


def _evaluate_concurrent(xml: str, tgt, *, runs, warmup, timeout, resolution, max_seconds, as_json) -> None:
    """``hdp evaluate PLACED --execution concurrent``: the file checked as the concurrent executor
    runs it, then measured head to head by that executor, under HETERO and on every single device it
    uses; one verdict each against the concurrent run, the family holding at 95 %."""


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
    """:func:`hdp.cli.show.placed_memory` with JSON's null for an unlimited capacity."""

    got = read(path)
    if got is None:
        return None
    return got[0], [{**r, "capacity": r["capacity"] if math.isfinite(r["capacity"]) else None} for r in got[1]]


def _evaluate_throughput(placed: str, tgt, *, requests, runs, warmup, timeout, plain, as_json) -> None:
    """``hdp evaluate --objective throughput``: the placed model (and ``plain``) with ``requests``
    in flight; beside it the throughput simulated when it was placed, if for the same ``requests``."""

    dev, devs, tgt = placed_device_of(placed, tgt)
    sim = sim_record(read_placed(placed).model, placed)
    batches = max(runs, 6)
    against = None
    kind, _, on = (plain or "").partition(":")
    default = kind == "default"
    if default:  # this host's default plain compile, with the throughput hint
        plain = on or host_kinds()[0]
    if plain:  # side by side, window for window: the host's drift cancels in their ratio
        against = serve_against_plain(placed, tgt, dev, devs, plain, requests, batches=batches, warmup=warmup,
                                      timeout=timeout, default=default)
        res = {"placed": against.placed, "plain": against.plain}
    else:
        with Measurer(placed, tgt, runs=1, warmup=warmup, timeout=timeout, cache=False) as m:
            res = {"placed": m.serve(dev, devs, requests=requests, batches=batches)}
    versus = against.versus if against is not None else None
    simulated = None
    if sim.period and sim.requests == requests:
        simulated = 1.0 / sim.period
    elif sim.simulated and requests == 1:
        simulated = 1.0 / sim.simulated
    plain_sim = (simulated_plain_rate(tgt.device(plain), sim.singles, requests)
                 if plain and simulated and not default else None)
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
        if simulated is None and sim.period:
            click.echo(f"(placed for {sim.requests} requests in flight: no simulated figure for {requests})")
    failed = [v for v in res.values() if not v.ok]
    if failed:
        raise MeasureError(failed[0].error)


def _evaluate_blob(blob: str, *, runs, warmup, timeout, as_json) -> None:
    """``hdp evaluate placed.blob``: the exported placement imported and timed as an application
    runs it (never cached)."""

    m = measure_blob(blob, runs=runs, warmup=warmup, timeout=timeout)
    if as_json:
        click.echo(json.dumps({"blob": m.to_dict(), "cached": False}, indent=2))
    else:
        click.echo(f"{m.what} on {m.target}: {m.summary()}" + (f"; import {m.compile_seconds:.2f} s" if m.ok else ""))
    if not m.ok:
        raise MeasureError(m.error)


# --------------------------------------------------------------------------- profile


def costs_json(module, costs, info: dict | None = None) -> dict:
    """Human-inspectable costs: per device totals, per op name/type/FLOPs and time per device
    (seconds; null where the device does not support the op)."""


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
@click.option("--runs", default=10, show_default=True, type=Bounded(AtLeastOne),
              help="At most this many timed runs per device (the devices take turns, run by run).")
@click.option("--warmup", default=1, show_default=True, type=Bounded(AtLeastOne))
@click.option("--seconds", default=1.0, show_default=True, type=Bounded(Duration),
              help="After 3 timed runs per device, only as many more as keep the timed runs of all "
                   "devices within this many seconds (0: always --runs).")
@with_options(shape_options)
@click.option("--top", default=10, show_default=True, type=Bounded(Count), help="Print the N costliest ops.")
@with_options(cache_options("the pass cache is there", "Do not read or write the pass cache (profile again)."))
@click.option("--timeout", type=Bounded(TimeLimit), default=None,
              help="Seconds a device may take to answer the support query, or to compile and run the "
                   "model, before its worker is killed (default 600).")
@user_errors
@cache_scoped
def profile_cmd(model, output, target, devices, runs, warmup, seconds, input_shape, seq_len, phase, top,
                cache_dir, no_cache, timeout):
    """Time every op of MODEL (.xml or a lowered .hdp) on every device of a target; write JSON."""


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

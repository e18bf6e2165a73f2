"""The ``hdp`` command line."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import click
import msgspec
from click.core import ParameterSource

from hdp.base.errors import HdpError, InputError
from hdp.base.glossary import text
from hdp.base.validation import Duration
from hdp.cli.cache import cache_group
from hdp.cli.calibrate import calibrate_cmd
from hdp.cli.common import (
    Bounded,
    DeviceSize,
    HdpGroup,
    cache_options,
    cache_scoped,
    check_paths,
    field_type,
    pass_cache,
    shape_options,
    shape_request,
    target_from,
    target_path,
    timeout_option,
    user_errors,
    with_options,
    worker_scoped,
)
from hdp.cli.costgraph import costgraph_target, place_cmd
from hdp.cli.runtime import evaluate_cmd, profile_cmd, targets_cmd
from hdp.cli.serve import serve_cmd
from hdp.cli.show import show
from hdp.costgraph import read as read_costgraph
from hdp.costgraph.graph import is_costgraph
from hdp.costgraph.graph import lower as lower_costgraph
from hdp.ir.serde import load, save
from hdp.passes.instruments import DumpIR, Progress, Timing
from hdp.passes.partition import PartitionPass
from hdp.passes.registry import registry
from hdp.pipeline.compile import compile_model
from hdp.pipeline.phases import compile_phases, parse_phases, phase_path
from hdp.pipeline.schedule import default_text, make_pass, run_passes, takes_target
from hdp.pipeline.stages import lower_cached, raise_module
from hdp.pipeline.text import PipelineError, as_text
from hdp.placement.objective import EXECUTOR_COSTS, Throughput
from hdp.placers.options import METHODS
from hdp.runtime.costs.calibrate import calibration_for
from hdp.runtime.costs.links import fitted_links
from hdp.runtime.serve.blob import export_blob, sidecar_path
from hdp.target.devices import check_present
from hdp.target.hosts import link_text, with_links
from hdp.target.target import load_target
from hdp.zoo import models as zoo

pass_cache_options = cache_options("passes and measurements are cached there",
                                   "Do not read or write the pass or measurement caches.")


def _terms_epilog() -> str:
    return "\b\nTerms used in the output:\n" + text(96)


@click.group(cls=HdpGroup, context_settings={"help_option_names": ["-h", "--help"]}, epilog=_terms_epilog())
@click.version_option(package_name="hdp")
def main():
    """hdp: place every op of an OpenVINO model on the device that runs it fastest."""


@main.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(), help="Placed model .xml; with --objective "
              "throughput, or a directory: the serving plan (DIR/plan.json and its compiled stages).")
@click.option("--target", default=None, help="Target name (see `hdp targets`) or TOML file.")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--passes", default=None, help="The pipeline as text: passes and their options, e.g. "
              "'support,profile,coarsen{groups=64},partition{method=optimal},assign' (quote a value holding "
              "commas: partition{method=\"hetero-auto:NPU,CPU\"}). Default: the method's pipeline on the target "
              "(`hdp passes --target T` prints it). --method, --seed, --set, --budget, --reward and --policy fill "
              "partition's options the text leaves out, --refine assign's; one that disagrees with the text is an error.")
@click.option("--method", default=None, help="Placement method (default: auto when the target has several "
              "devices — every single device, optimal, heft and refined variants, the best measured head to "
              "head, then measured learning within --budget — else single). See `hdp passes`.")
@with_options(shape_options)
@click.option("--seed", default=None, type=Bounded(field_type(PartitionPass, "seed")),
              help="Seed of the partition pass  [default: 0]")
@click.option("--set", "sets", multiple=True, help="partition option key=value (repeatable).")
@click.option("--budget", type=Bounded(Duration), default=None, help="auto, hsdag: seconds for the whole placement, "
              "profile excluded (default: auto 30, hsdag 120; 0: no limit).")
@click.option("--reward", type=click.Choice(["auto", "simulate", "measure"]), default=None,
              help="hsdag: train on simulated or measured latency (auto: measure on real targets).")
@click.option("--policy", type=click.Path(dir_okay=False), default=None,
              help="hsdag: checkpoint to resume or whose trained policy to reuse.")
@click.option("--refine", is_flag=True, help="After placing, move boundary ops greedily while the "
              "simulated latency drops (assign{refine=true}).")
@click.option("--timings", type=click.Path(dir_okay=False), default=None, help="Write per-pass timings as JSON.")
@click.option("--dump-ir", type=click.Path(file_okay=False), default=None, help="Save the Module after each pass.")
@click.option("--emit-ir", type=click.Path(dir_okay=False), default=None, help="Save the final Module (.hdp).")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Before writing, run the placed model under HETERO against the original (modeled "
                   "devices on CPU stand-ins); repair or fall back to one device if it fails.")
@click.option("--compare/--no-compare", default=True, show_default=True,
              help="Measure the placement against the plain compile on each real device and say "
                   "which is faster (real targets only; skipped with --quiet).")
@click.option("--export-blob", type=click.Path(dir_okay=False), default=None,
              help="Also write the placed model compiled with HETERO (CompiledModel.export_model) to this "
                   ".blob, with the devices it needs in BLOB.json: it keeps the placement in OpenVINO "
                   "applications without hdp (core.import_model). See `hdp export`.")
@click.option("--quiet", "-q", is_flag=True)
@click.option("--verbose", "-v", is_flag=True, help="Print the whole report: every stage, candidate, comparison "
              "and figure (default: at most six lines: what was placed where, the check, the memory when capped, "
              "the verdict against this host's default plain compile, the time, the next command).")
@click.option("--objective", type=click.Choice(["latency", "throughput", "energy"]), default=None,
              help="What the placement minimises: one request's latency (HETERO runs its subgraphs one after "
                   "another; the default), seconds per request with --requests in flight (HETERO pipelines "
                   "them; the default with --requests), or the joules of one request (modeled targets whose "
                   "devices declare power_active/power_idle).")
@click.option("--requests", type=Bounded(field_type(Throughput, "requests")), default=None,
              help="Requests in flight (default 2): implies --objective throughput.")
@click.option("--execution", type=click.Choice(["sequential", "concurrent"]), default="sequential", show_default=True,
              help="How the placed model will run: under HETERO (its subgraphs one after another), or by hdp's "
                   "concurrent executor (compile_placed(..., execution='concurrent'): every device at once); "
                   "concurrent makes the executor's latency what the placement minimises, with the executor's "
                   "costs from `hdp calibrate` when it measured them.")
@click.option("--memory", "memory", multiple=True, type=DeviceSize(), metavar="DEV=SIZE",
              help="Device memory cap (like GPU=16GiB), over the target's or the device's own (repeatable).")
@click.option("--context", type=Bounded(field_type(PartitionPass, "context")), default=0,
              help="Tokens of state (KV cache) a stateful model holds, for its memory (0: as specialised).")
@click.option("--phases", default=None, is_flag=False, flag_value="prefill,decode", metavar="PHASE,...",
              help="Stateful LLMs: place each phase on its own (prefill: the --seq-len prompt; decode: one token "
                   "after it), the KV cache handed between them, and write one placed model per phase: "
                   "OUTPUT with .prefill or .decode before .xml (--phases alone: prefill,decode). `hdp show` "
                   "of either prints each phase's placement, time to first token and time per token.")
@timeout_option
@with_options(pass_cache_options)
@user_errors
@cache_scoped
@worker_scoped
def compile_cmd(model, output, target, devices, passes, method, input_shape, seq_len, phase, seed, sets, budget,
                reward, policy, refine, timings, dump_ir, emit_ir, export_blob, check, compare, quiet, verbose,
                objective, requests, execution, memory, context, phases, timeout, cache_dir, no_cache):
    """Place MODEL (an OpenVINO .xml or .onnx) on a target and write the placed model to OUTPUT (.xml).

    An ONNX model is read by OpenVINO's ONNX frontend. To make one from PyTorch, current torch's
    torch.onnx.export uses its dynamo exporter, which needs the onnxscript package
    (pip install onnxscript), or pass dynamo=False for the TorchScript exporter."""

    as_plan = Path(output).suffix.lower() != ".xml"
    if as_plan and objective != "throughput":
        raise click.UsageError(f"-o {output}: the placed model must be an .xml path (a directory holds a serving "
                               f"plan: with --objective throughput)")
    if as_plan and phases is not None:
        raise click.UsageError(f"-o {output}: a serving plan serves one phase; --phases writes placed .xml models")
    if export_blob and Path(export_blob).suffix.lower() != ".blob":
        raise click.UsageError(f"--export-blob {export_blob}: a compiled model is written to a .blob path")
    opts = _parse_sets(sets)
    placed = {"-o": output, "--timings": timings}
    if phases is not None:  # one placed model (and timings file) per phase, in place of -o's
        phase_list = _phases_options(phases, export_blob, emit_ir)
        placed = {f"{flag} ({p})": phase_path(path, p) if path else None
                  for flag, path in placed.items() for p in phase_list}
    check_paths(inputs={"MODEL": model, "--target": target_path(target), "--policy": policy,
                        "--set policy": opts.get("policy")},
                outputs={k: v for k, v in placed.items() if not (as_plan and k == "-o")}
                | {"--emit-ir": emit_ir, "--set checkpoint": opts.get("checkpoint"), "--export-blob": export_blob,
                   "--export-blob (its record)": _sidecar(export_blob)},
                out_dirs={**({"-o": output} if as_plan else {}), "--dump-ir": dump_ir,
                          "--cache-dir": None if no_cache else cache_dir,
                          "--set report": opts.get("report")},
                space={k: _model_bytes(model) * 3 // 2 for k in placed if k.startswith("-o") and not as_plan}  # rough: a placed
                | {"--timings": 1 << 16, "--emit-ir": _model_bytes(model)})  # pair is about the model and its affinities
    tgt = target_from(target, devices)
    if devices:  # real devices named on the command line: refused now, in the option's words
        check_present(tgt)
    tgt = _fitted_links(tgt, pass_cache(cache_dir, no_cache), quiet)
    flags = {k: v for k, v in (("budget", budget), ("reward", reward), ("policy", policy), ("objective", objective),
                               ("requests", requests)) if v is not None}
    labels = {k: f"--{k}" for k in flags}
    if execution != "sequential":
        flags["execution"], labels["execution"] = execution, "--execution"
    served = objective == "throughput" or (objective is None and requests is not None)
    for k, (v, label) in _calibrated_costs(tgt, served, execution, pass_cache(cache_dir, no_cache)).items():
        if k not in opts:  # a value the user gave with --set stands
            flags[k], labels[k] = v, label
    if memory:  # (device, bytes) pairs, read by --memory's type
        flags["memory"] = tuple(memory)
    if context:
        flags["context"] = context
    for k, v in flags.items():  # a flag and a --set of the same option must agree
        if k in opts and labels.get(k, "").startswith("--") and as_text(opts[k]) != as_text(v):
            raise HdpError(f"{labels[k]} {as_text(v)} and --set {k}={opts[k]} contradict each other: give one")
    progress = None if quiet else Progress(live=not verbose) if sys.stderr.isatty() \
        else Progress() if verbose else None
    instruments = ([progress] if progress else []) + ([DumpIR(dump_ir)] if dump_ir and phases is None else [])

    def echo(line: str) -> None:
        if progress is not None:
            progress.close()
        click.echo(line)

    if phases is not None:
        compile_phases(model, output, tgt, phase_list, shapes=shape_request(input_shape, seq_len, None),
                       echo=None if quiet else echo, timings=timings, dump_ir=dump_ir, instruments=instruments,
                       context=context, memory=tuple(memory or ()), passes=passes, method=method, seed=seed,
                       options=opts | flags, refine=refine, cache=pass_cache(cache_dir, no_cache), check=check,
                       compare=compare and not quiet, timeout=timeout,
                       labels=labels | {k: f"--{k}" for k in flags if k not in labels})
        return
    try:
        compile_model(model, output, tgt, passes=passes, method=method, seed=seed, options=opts | flags,
                      refine=refine, shapes=shape_request(input_shape, seq_len, phase),
                      cache=pass_cache(cache_dir, no_cache), instruments=instruments, check=check,
                      compare=compare and not quiet, timeout=timeout, emit_ir=emit_ir, export_blob=export_blob,
                      timings=timings, echo=None if quiet else echo, verbose=verbose,
                      labels=labels | {k: f"--{k}" for k in flags if k not in labels})
    except PipelineError as e:
        if e.column is None:
            raise
        raise HdpError(f"--passes: {e}") from None


def _fitted_links(tgt, cache, quiet: bool):
    """``tgt`` with the links ``hdp calibrate --link`` fitted in place of its own, saying which each
    pair of hosts uses (a target of one host as it is)."""
    if not tgt.multi_host:
        return tgt
    fits = fitted_links(tgt, None if cache is None else cache.dir)
    if not quiet:
        for ln in tgt.links:
            fit = fits.get(tuple(ln.hosts))
            a, b = ln.hosts
            if fit is None:
                click.echo(f"link {a}-{b}: the target's, {link_text(ln.latency, ln.bandwidth)}")
            else:
                click.echo(f"link {a}-{b}: fitted by hdp calibrate --link ({fit.created}, {fit.placed}), "
                           f"{link_text(fit.latency, fit.bandwidth)}, in place of the target's "
                           f"{link_text(ln.latency, ln.bandwidth)}")
    return with_links(tgt, {k: (f.latency, f.bandwidth) for k, f in fits.items()})


def _phases_options(phases: str, export_blob, emit_ir) -> tuple[str, ...]:
    """The phases of ``--phases``, refusing the options that name one placement's file."""
    phase_list = parse_phases(phases)
    if click.get_current_context().get_parameter_source("phase") == ParameterSource.COMMANDLINE:
        raise InputError("--phases: each phase is placed at its own --phase; give the phases to --phases only")
    for flag, value in (("--export-blob", export_blob), ("--emit-ir", emit_ir)):
        if value:
            raise InputError(f"--phases writes one placed model per phase; {flag} is for one placement "
                           f"(hdp export PLACED.xml exports each phase's file)")
    return phase_list


def _model_bytes(xml) -> int:
    """Bytes of a model's .xml and .bin (0 for what is missing)."""
    total = 0
    for p in (Path(xml), Path(xml).with_suffix(".bin")):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _sidecar(blob):
    if not blob:
        return None

    return sidecar_path(blob)


@main.command("export")
@click.argument("placed", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="The compiled model (.blob); its record goes to OUTPUT.json.")
@click.option("--target", default=None, help="Target (default: the one recorded in the placed model).")
@user_errors
def export_cmd(placed, output, target):
    """Compile a placed model (from `hdp compile`) with HETERO and export it as a .blob that keeps
    the placement in an OpenVINO application without hdp: `core.import_model(blob, "HETERO:...")`
    in C++ or Python, the same OpenVINO version. OUTPUT.json records the device string, the
    devices (with the plugin library and config of aliased ones, which the importing application
    must register) and the OpenVINO version; `hdp show OUTPUT` prints it, `hdp evaluate OUTPUT`
    imports and times it. The blob is imported back and run before anything is written."""

    if Path(output).suffix.lower() != ".blob":
        raise click.UsageError(f"-o {output}: a compiled model is written to a .blob path")
    check_paths(inputs={"PLACED": placed, "--target": target_path(target)},
                outputs={"-o": output, "-o (its record)": _sidecar(output)})
    rec = export_blob(placed, output, load_target(target) if target else None)
    click.echo(f"{placed} -> {output} ({rec.bytes / 1e6:.1f} MB, OpenVINO {rec.openvino}); import with "
               f"\"{rec.device}\"; devices: {', '.join(d.name + (' (alias of ' + d.plugin + ')' if d.alias else '') for d in rec.devices)}"
               f"; record: {_sidecar(output)}")


@main.command("lower")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Module file (.hdp).")
@click.option("--format", "fmt", type=click.Choice(["auto", "openvino", "hdp", "dnn-partitioning"]), default="auto",
              show_default=True, help="MODEL's format: an OpenVINO model, or a cost graph (JSON) in hdp's format or "
                                      "msr-fiddle/dnn-partitioning's (auto: .json files are cost graphs).")
@with_options(shape_options)
@with_options(pass_cache_options)
@user_errors
@cache_scoped
def lower_cmd(model, output, fmt, input_shape, seq_len, phase, cache_dir, no_cache):
    """Lower an OpenVINO model, or a cost graph, into an hdp Module file: the first step of
    running the passes one at a time (`hdp pass NAME`, then `hdp pass raise` for the placed model)."""

    check_paths(inputs={"MODEL": model}, outputs={"-o": output},
                out_dirs={"--cache-dir": None if no_cache else cache_dir})
    if fmt in ("hdp", "dnn-partitioning") or (fmt == "auto" and model.lower().endswith(".json")):
        m = lower_costgraph(read_costgraph(model, fmt))
        save(m, output)
        click.echo(f"{m.graph.n_ops} ops, {m.graph.n_edges} edges, devices {', '.join(m.costs.devices)} -> {output}")
        return

    m = lower_cached(model, shape_request(input_shape, seq_len, phase), pass_cache(cache_dir, no_cache))
    save(m, output)
    click.echo(f"{m.graph.n_ops} ops, {m.graph.n_edges} edges -> {output}")


def _calibrated_costs(tgt, served: bool, execution: str, cache) -> dict[str, tuple[float, str]]:
    """Partition options from ``hdp calibrate``'s stored fit for ``tgt`` on this host, each with the
    label compile's report gives it: the concurrent executor's costs (``--execution concurrent``),
    the served hand-off per subgraph (``served``: the throughput objective)."""
    if cache is None or (execution == "sequential" and not served):
        return {}

    cal = calibration_for(tgt, cache.dir)
    out: dict[str, tuple[str, str]] = {}
    if cal is None:
        return out
    if execution != "sequential" and cal.executor is not None:
        out |= {k: (getattr(cal.executor, k), "hdp calibrate's executor costs") for k in EXECUTOR_COSTS}
    if served and cal.handoff is not None:
        out["handoff"] = (cal.handoff, "hdp calibrate's served hand-off")
    if served and cal.streams:
        out["streams"] = ([[d, e] for d, e in cal.streams.items()], "hdp calibrate's stream efficiency")
    return out


def _parse_sets(sets) -> dict:
    opts = {}
    for s in sets:
        k, eq, v = s.partition("=")
        if not eq or not k.strip():
            raise click.UsageError(f"--set {s}: expected key=value")
        opts[k.strip().replace("-", "_")] = v.strip()
    return opts


@main.command("pass")
@click.argument("name")
@click.argument("input", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, help="Pass option key=value (repeatable).")
@click.option("--target", default=None, help="For passes that take a target (default: host; a lowered cost graph: "
                                             "its own devices).")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--timings", type=click.Path(dir_okay=False), default=None)
@timeout_option
@with_options(pass_cache_options)
@user_errors
@cache_scoped
def pass_cmd(name, input, output, sets, target, devices, timings, timeout, cache_dir, no_cache):
    """Run one pass NAME on a Module file INPUT and write the result to OUTPUT; NAME `raise` ends
    the chain: it writes INPUT's placement as the placed model OUTPUT (.xml) for --target, checked
    under HETERO first (--set check=false skips it), the file `hdp compile` writes with the same
    passes."""

    reg = registry()
    if name == "raise":
        return _raise_cmd(input, output, _parse_sets(sets), target, devices, timeout, cache_dir, no_cache)
    if name not in reg:
        raise HdpError(f"unknown pass '{name}' (known: {', '.join(sorted(reg))}, and raise, which writes the "
                       f"placed model)")
    opts = _parse_sets(sets)
    paths = dict(inputs={"INPUT": input, "--target": target_path(target), "--set policy": opts.get("policy")},
                 outputs={"-o": output, "--timings": timings, "--set checkpoint": opts.get("checkpoint")},
                 out_dirs={"--cache-dir": None if no_cache else cache_dir, "--set report": opts.get("report")})
    check_paths(**paths)
    module = load(input)
    if takes_target(reg[name]):
        # a cost graph declares its devices: they are the target unless one is given
        use_own = target is None and devices is None and is_costgraph(module)
        opts["target"] = costgraph_target(module) if use_own else target_from(target, devices)
    p = make_pass(name, opts)
    # passes read the module's source model again (support, profile): it is an input too
    check_paths(**(paths | {"inputs": paths["inputs"] | {"INPUT's source model": module.meta.get("source")}}))
    cache = pass_cache(cache_dir, no_cache)
    timing = Timing()
    out = run_passes(module, [p], cache=cache, timeout=timeout, instruments=[timing])
    save(out, output)
    if timings:
        timing.write(timings)
    row = timing.rows[-1]
    took = "cache hit" if row["cache_hit"] else f"{row['seconds']:.3f}s"
    click.echo(f"{name}: {took} -> {output}")


def _raise_cmd(input, output, opts, target, devices, timeout, cache_dir, no_cache) -> None:
    """``hdp pass raise MODULE.hdp -o placed.xml --target T``."""
    if Path(output).suffix.lower() != ".xml":
        raise click.UsageError(f"-o {output}: raise writes the placed model: an .xml path")
    unknown = sorted(set(opts) - {"check"})
    if unknown:
        raise click.UsageError(f"--set {unknown[0]}: raise takes only check=true|false")
    check = str(opts.get("check", "true")).lower()
    if check not in ("true", "false", "yes", "no", "1", "0"):
        raise click.UsageError(f"--set check={opts['check']}: expected true or false")
    paths = dict(inputs={"INPUT": input, "--target": target_path(target)}, outputs={"-o": output},
                 out_dirs={"--cache-dir": None if no_cache else cache_dir})
    check_paths(**paths)
    module = load(input)
    check_paths(**(paths | {"inputs": paths["inputs"] | {"INPUT's source model": module.meta.get("source")}}))
    if target is None and devices is None:
        raise click.UsageError("raise: give the --target (or --devices) the module was placed for")
    t0 = time.monotonic()
    result = raise_module(module, output, target_from(target, devices), check=check in ("true", "yes", "1"),
                          timeout=timeout)
    click.echo(f"raise: {time.monotonic() - t0:.3f}s -> {output}" + (f"; {result.describe()}" if result else ""))


@main.command("passes")
@click.option("--target", default=None, help="Print only the default pipeline of `hdp compile` on this target.")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--method", default=None, help="With --target/--devices: the default pipeline of this method.")
@user_errors
def passes_cmd(target, devices, method):
    """List the default pipelines, the passes and their options, and the placement methods with theirs."""

    if target or devices:
        click.echo(default_text(target_from(target, devices), method))
        return
    click.echo("default pipeline of `hdp compile` (its --passes; `hdp passes --target T` prints the one for T):")
    for kind, name in (("several real devices", "virtual"), ("modeled devices", "i9-flex170")):
        click.echo(f"  {kind + ' (e.g. ' + name + '):':<38} {default_text(load_target(name), method)}")
    click.echo(f"  {'one device D:':<38} support,partition{{method=single:D}},assign")
    click.echo("  (with a calibration of the target in the cache (`hdp calibrate`), boundary runs after profile)")
    click.echo("  one at a time: hdp lower MODEL -o m.hdp; hdp pass NAME m.hdp -o m.hdp --target T (each pass in "
               "turn); hdp pass raise m.hdp -o placed.xml --target T writes the placed model\n")
    click.echo("passes (options: in --passes as NAME{KEY=VALUE,...}; with `hdp pass NAME` as --set KEY=VALUE):")
    for name, cls in sorted(registry().items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        click.echo(f"{name}  (v{cls.version}; requires {', '.join(cls.requires) or '-'}; "
                   f"provides {', '.join(cls.provides)})\n    {doc}")
        for f, default in _defaults(cls):
            if f == "placer":
                click.echo("    --set method=hetero-auto  (and the method's options below)")
            elif f == "objective" and name == "partition":
                click.echo("    --set objective=latency  (latency | throughput | concurrent | energy; throughput takes "
                           "requests=N (default 2), handoff=SECONDS per served subgraph (default: hdp "
                           "calibrate's, else 0), and for serving plans dispatch=SECONDS per request routed to a "
                           "replica and streams=DEV=E,... each device's stream efficiency (default: hdp calibrate's, "
                           "else the target's defaults); execution=concurrent takes the executor's launch, handover, "
                           "request and convert)")
            else:
                click.echo(f"    --set {f}={default}")
    click.echo("\nmethods (compile --method NAME[:ARG] or --passes 'partition{method=NAME[:ARG],...}', "
               "partition --set method=...; options with --set):")
    for name, cls in sorted(METHODS.items()):
        needs = f"  [needs {', '.join(cls.needs)}]" if cls.needs else ""
        arg = f" (:ARG sets {cls.arg_field})" if cls.arg_field else ""
        click.echo(f"  {name:<12} {cls.summary}{arg}{needs}")
        for f, default in _defaults(cls):
            click.echo(f"      --set {f}={default}")

    click.echo("\nterms used in the output:")
    click.echo(text())


def _defaults(cls) -> list[tuple[str, str]]:
    out = []
    for f in msgspec.structs.fields(cls):
        if f.default is not msgspec.NODEFAULT:
            out.append((f.name, repr(f.default) if not hasattr(f.default, "__struct_fields__") else "..."))
        elif f.default_factory is not msgspec.NODEFAULT:
            out.append((f.name, repr(f.default_factory())))
        else:
            out.append((f.name, "<required>" if f.name != "target" else "<from --target>"))
    return out


@main.command("show")
@click.argument("file", type=click.Path(dir_okay=False))
@user_errors
def show_cmd(file):
    """Summarise a Module (.hdp), a model / placed model (.xml, .onnx) or an exported placement (.blob)."""

    click.echo(show(file))


@main.command("zoo")
@click.argument("name", required=False)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Where to write the model .xml.")
@click.option("--list", "listing", is_flag=True, help="List the models, their shapes and weight formats.")
@with_options(cache_options("generated models are kept under <cache-dir>/zoo",
                            "Generate the model afresh and keep no copy."))
@user_errors
def zoo_cmd(name, output, listing, cache_dir, no_cache):
    """Write a benchmark model with random weights: NAME[:OPTION,...], e.g. resnet50,
    gpt2-tiny:dynamic, llama-tiny:stateful,int4 (see --list)."""

    if listing or not name:
        for row in zoo.catalog():
            click.echo(f"{row['name']:<18} {row['size']:<6} shapes: {', '.join(row['shapes']):<26} "
                       f"{row['description']}")
        click.echo(f"weights (any model): {', '.join(zoo.catalog()[0]['weights'])}; e.g. "
                   f"hdp zoo llama-tiny:stateful,int4 -o model.xml")
        return
    if not output:
        raise click.UsageError("-o/--output is required to write a model")
    check_paths(outputs={"-o": output}, out_dirs={"--cache-dir": None if no_cache else cache_dir})
    path = zoo.export(name, output, cache_root=cache_dir, use_cache=not no_cache)
    click.echo(f"{name} -> {path}")


main.add_command(cache_group)
main.add_command(targets_cmd)
main.add_command(evaluate_cmd)
main.add_command(profile_cmd)
main.add_command(calibrate_cmd)
main.add_command(place_cmd)
main.add_command(serve_cmd)


if __name__ == "__main__":  # pragma: no cover
    main(prog_name="hdp")

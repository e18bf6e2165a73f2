"""The ``hdp`` command line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click
import msgspec

from hdp.cli_cache import cache_group
from hdp.cli_calibrate import calibrate_cmd
from hdp.cli_common import (cache_options, cache_scoped, check_paths, pass_cache, runtime_options, shape_options,
                             shape_request, target_from, target_path, timeout_option, user_errors, with_options,
                             worker_scoped)
from hdp.cli_runtime import evaluate_cmd, profile_cmd, targets_cmd
from hdp.errors import HdpError


pass_cache_options = cache_options("passes and measurements are cached there",
                                   "Do not read or write the pass or measurement caches.")


def _terms_epilog() -> str:
    from hdp.glossary import text

    return "\b\nTerms used in the output:\n" + text(96)


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, epilog=_terms_epilog())
@click.version_option(package_name="hdp")
def main():
    """hdp: place every op of an OpenVINO model on the device that runs it fastest."""


@main.command("compile")
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Placed model .xml.")
@click.option("--target", default=None, help="Target name (see `hdp targets`) or TOML file.")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--method", default=None, help="Placement method (default: auto when the target has several "
              "devices — every single device, optimal, heft and refined variants, the best measured head to "
              "head, then measured learning within --budget — else single). See `hdp passes`.")
@with_options(shape_options)
@click.option("--seed", default=0, show_default=True, type=int)
@click.option("--set", "sets", multiple=True, help="partition option key=value (repeatable).")
@click.option("--budget", type=float, default=None, help="auto, hsdag: seconds for the whole placement, "
              "profile excluded (default: auto 30, hsdag 120; 0: no limit).")
@click.option("--reward", type=click.Choice(["auto", "simulate", "measure"]), default=None,
              help="hsdag: train on simulated or measured latency (auto: measure on real targets).")
@click.option("--policy", type=click.Path(dir_okay=False), default=None,
              help="hsdag: checkpoint to resume or whose trained policy to reuse.")
@click.option("--refine", is_flag=True, help="After placing, move boundary ops greedily while the "
              "simulated latency drops (assign --set refine=true).")
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
@timeout_option
@with_options(pass_cache_options)
@user_errors
@cache_scoped
@worker_scoped
def compile_cmd(model, output, target, devices, method, input_shape, seq_len, phase, seed, sets, budget, reward,
                policy, refine, timings, dump_ir, emit_ir, export_blob, check, compare, quiet, timeout, cache_dir,
                no_cache):
    """Place MODEL (an OpenVINO .xml or .onnx) on a target and write the placed model to OUTPUT (.xml)."""
    import time

    from hdp.ir.openvino_backend import write_placed
    from hdp.ir.serde import save
    from hdp.passes.instruments import DumpIR, Progress, Timing
    from hdp.passes.boundary import with_calibration
    from hdp.passes.manager import PassManager
    from hdp.pipeline import compile_schedule, default_method, lower_cached, recompute_if_stale
    from hdp.placers import measured_heads, stage_times

    t_start = time.monotonic()
    out = Path(output)
    if out.suffix.lower() != ".xml":
        raise click.UsageError(f"-o {output}: the placed model must be an .xml path")
    opts = _parse_sets(sets)
    check_paths(inputs={"MODEL": model, "--target": target_path(target), "--policy": policy,
                        "--set policy": opts.get("policy")},
                outputs={"-o": output, "--timings": timings, "--emit-ir": emit_ir,
                         "--set checkpoint": opts.get("checkpoint"), "--export-blob": export_blob,
                         "--export-blob (its record)": _sidecar(export_blob)},
                out_dirs={"--dump-ir": dump_ir, "--cache-dir": None if no_cache else cache_dir,
                          "--set report": opts.get("report")},
                space={"-o": _model_bytes(model) * 3 // 2, "--timings": 1 << 16,  # rough: a placed pair is
                       "--emit-ir": _model_bytes(model)})  # about the model and its affinities
    tgt = target_from(target, devices)
    if export_blob:
        _blob_target_check(tgt, export_blob)
    method = method or default_method(tgt)
    shapes = shape_request(input_shape, seq_len, phase)
    cache = pass_cache(cache_dir, no_cache)
    timing = Timing()
    instruments = [timing] + ([] if quiet else [Progress()]) + ([DumpIR(dump_ir)] if dump_ir else [])
    for key, value in (("budget", budget), ("reward", reward), ("policy", policy)):
        if value is not None:
            opts[key] = value
    schedule = compile_schedule(tgt, method, seed, opts, refine=refine)
    schedule = runtime_options(schedule, timeout, cache)
    schedule = with_calibration(schedule, tgt, cache)  # the host's boundary model, if `hdp calibrate` made one
    if check or any(d.kind == "real" for d in tgt.devices):
        from hdp.runtime.worker_client import prestart_worker

        prestart_worker(model, shapes)  # the worker imports OpenVINO and reads the model while this lowers it
    spent: dict[str, float] = {}  # wall seconds of the steps after the passes

    def place_and_write():
        module = lower_cached(model, shapes, cache, instruments)
        with stage_times() as stage_rows, measured_heads() as heads:
            module = PassManager(schedule, cache=cache, instruments=instruments).run(module)
        report: list[str] = []
        checker = None
        try:
            t0 = time.monotonic()
            if check:
                from hdp.runtime.verify import PlacementChecker, verify_and_repair

                def replace(m, ties):
                    partition = msgspec.structs.replace(schedule[-2], extra_ties=ties)
                    base = m.replace(partition=None, placement=None)
                    return PassManager([partition, schedule[-1]], cache=cache, instruments=instruments).run(base)

                for ins in instruments:
                    ins.before("check", "")
                checker = PlacementChecker(module, tgt, **({"timeout": timeout} if timeout else {}))
                verified = verify_and_repair(module, tgt, replace, checker)
                module = verified.module
                report += [f"learned: {line}" for line in verified.learned] + verified.lines
                if verified.fallback:
                    report.append(f"fell back to every op on {verified.fallback}: the placement did not run "
                                  f"({module.placement.info.get('fallback_reason')})")
                report.append(verified.result.describe())
                for ins in instruments:
                    ins.after("check", "", False, module)
                spent["check"] = time.monotonic() - t0
            t0 = time.monotonic()
            for ins in instruments:
                ins.before("raise", "")
            used = sorted({module.placement.devices[int(d)] for d in module.placement.device_of.numpy()})
            write_placed(module, out, tgt, check=(lambda tmp: checker.check_file(tmp, used)) if checker else None)
            for ins in instruments:
                ins.after("raise", "", False, module)
            spent["writing"] = time.monotonic() - t0
        finally:
            if checker is not None:
                checker.close()
        return module, report, stage_rows, heads

    # a cached module of another model (it decoded, but its ops are not the file's) is discarded
    # and everything recomputed once, instead of failing every later run
    module, report, stage_rows, heads = recompute_if_stale(cache, place_and_write)
    if emit_ir:
        save(module, emit_ir)
    if export_blob:
        from hdp.runtime.blob import export_blob as export

        t0 = time.monotonic()
        try:
            rec = export(out, export_blob, tgt)
            spent["export"] = time.monotonic() - t0
        except HdpError as e:
            raise HdpError(f"{out} was written (checked); --export-blob {export_blob} was not: {e}") from None
        if not quiet:
            click.echo(f"exported the compiled placement -> {export_blob} ({rec.bytes / 1e6:.1f} MB; import with "
                       f"\"{rec.device}\", devices in {_sidecar(export_blob)})")
    if timings:  # the placer's own stages as rows of the partition pass, marked with "stage"
        rows = Timing()
        rows.rows = timing.rows + [{"pass": "partition", "stage": n, "key": "", "seconds": s, "cache_hit": False}
                                   for n, s in stage_rows]
        rows.write(timings)
    if not quiet:
        pl = module.placement
        counts = Counter(pl.devices[int(d)] for d in pl.device_of.numpy())
        share = ", ".join(f"{d}: {counts.get(d, 0)} ops" for d in pl.devices)
        click.echo(f"placed {module.graph.n_ops} ops with {pl.method} on {tgt.name} ({share}) -> {out}")
        info = pl.info
        if info.get("message"):
            click.echo(info["message"])
        for line in report:
            click.echo(line)
        for line in _method_report(module, tgt, schedule, timing.rows, stage_rows):
            click.echo(line)
        compared = None
        if compare and tgt.is_real:
            from hdp.runtime.report import compare_with_plain, plain_from_heads

            # measured fresh and interleaved, run by run (never cached): a figure from another
            # moment (another load on the machine) would make the comparison meaningless. A
            # head-to-head the placer ran moments ago in this process, of this very placement beside
            # every device's whole graph, is such a measurement: it is reused, not repeated.
            t0 = time.monotonic()
            reused = plain_from_heads(heads, module, tgt)
            if reused is not None:
                click.echo("compared with the plain compiles in the placer's head-to-head above "
                           "(measured in this run, not repeated):")
            result = reused or compare_with_plain(module, tgt, **({"timeout": timeout} if timeout else {}))
            click.echo(result.text)
            if reused is None and result.head is not None:
                click.echo(_final_sim_vs_measured(module, result))
            compared = time.monotonic() - t0
        if compared is not None:
            spent["final comparison"] = compared
        line = _time_line(schedule, timing.rows, stage_rows, spent, time.monotonic() - t_start)
        if line:
            click.echo(line)


def _model_bytes(xml) -> int:
    """Bytes of a model's .xml and .bin (0 for what is missing)."""
    total = 0
    for p in (Path(xml), Path(xml).with_suffix(".bin")):
        try:
            total += p.stat().st_size
        except OSError:
            pass
    return total


def _method_report(module, tgt, schedule, timing_rows: list[dict], stage_rows: list) -> list[str]:
    """What the placement stages contributed, labelled simulated or measured."""
    pl = module.placement
    info = pl.info
    lines: list[str] = []
    method = info.get("method", pl.method).partition(":")[0]
    if "report" in info:  # auto
        lines += [f"{method}: {x}" for x in info["report"].splitlines()]
    if info.get("best_source"):  # hsdag
        lat = info.get("best_latency_s")
        what = f"{float(lat) * 1e3:.3f} ms" if lat else "not measured"
        lines.append(f"hsdag ({info.get('reward')} reward): kept {info['best_source']} {what}; "
                     f"{info.get('placements_evaluated')} placements, stopped: {info.get('stopped')}")
        if info.get("final"):
            lines.append(f"hsdag: lowest sampled median {info.get('sampled_best')}; final choice:")
            lines += [f"hsdag: {x}" for x in info["final"].splitlines()]
    if info.get("untangled_groups"):
        was = f"; simulated {float(info['untangled_from_s']) * 1e3:.3f} ms before" if info.get("untangled_from_s") else ""
        lines.append(f"{method}: moved {info['untangled_groups']} tie groups to other devices so that HETERO "
                     f"cuts no subgraph holding a state (ReadValue/Assign; see hdp.placement.subgraphs){was}")
    if info.get("fallback"):
        lines.append(f"(the placement above failed its check; written instead: every op on {info['fallback'][7:]})")
    if "simulated" in info:
        lines.append(_simulated_line(module, tgt))
    return lines


def _time_line(schedule, timing_rows: list[dict], stage_rows: list, spent: dict[str, float], total: float) -> str:
    """``time: 41.2 s in all: profile 3.8 s (not counted in the budget); placement 6.0 s of a 30 s
    budget (...); check 1.1 s; writing 0.9 s; final comparison 30.1 s (--no-compare skips it)
    (load average ...)``: where the whole command's time went."""
    import os

    first_part = next((r for r in timing_rows if r["pass"] == "partition" and "stage" not in r), None)
    prof = next((r for r in timing_rows if r["pass"] == "profile"), None)
    load = ""
    if hasattr(os, "getloadavg"):
        load = f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    parts = []
    budget = getattr(schedule[-2].placer, "budget", None) if first_part is not None else None
    if prof is not None:
        parts.append("profile cached" if prof["cache_hit"] else f"profile {prof['seconds']:.1f} s"
                     + (" (not counted in the budget)" if budget else ""))
    if first_part is not None:
        if first_part["cache_hit"]:
            parts.append("placement cached (its stages ran in an earlier compile)")
        else:
            stages = ", ".join(f"{n} {s:.1f} s" for n, s in stage_rows)
            cap = f" of a {budget:g} s budget" if budget else ""
            parts.append(f"placement {first_part['seconds']:.1f} s{cap}" + (f" ({stages})" if stages else ""))
    for name, seconds in spent.items():
        parts.append(f"{name} {seconds:.1f} s" + (" (--no-compare skips it)" if name == "final comparison" else ""))
    return f"time: {total:.1f} s in all: " + "; ".join(parts) + load


def _final_sim_vs_measured(module, result) -> str:
    """The final placement's and each plain compile's simulated latency against their medians in
    the final comparison (a plain compile is priced as every op on its device)."""
    from hdp.placement.problem import problem_of
    from hdp.runtime.report import sim_vs_measured
    from hdp.runtime.simulate import Simulator

    pl = module.placement
    head = result.head
    ties = module.partition.extra_ties.numpy() if module.partition is not None and \
        module.partition.extra_ties is not None else ()
    p = problem_of(module, pl.devices, ties)
    singles = {p.devices[j]: t for j, t in Simulator(p).singles().items()}
    pairs = []
    for name, m in zip(head.names, head.measurements):
        if not m.ok:
            continue
        if name == "placement" and "simulated" in pl.info:
            pairs.append(("placement", float(pl.info["simulated"]), m.median))
        elif name.startswith("plain ") and name[6:] in singles:
            pairs.append((name, singles[name[6:]], m.median))
    return sim_vs_measured(pairs)


def _simulated_line(module, tgt) -> str:
    """The final placement's simulated latency beside the best single device and the lower bound."""
    from hdp.placement.problem import problem_of
    from hdp.runtime.simulate import Simulator

    pl = module.placement
    info = pl.info
    ties = module.partition.extra_ties.numpy() if module.partition is not None and \
        module.partition.extra_ties is not None else ()
    p = problem_of(module, pl.devices, ties)
    sim = Simulator(p)
    singles = {p.devices[j]: t for j, t in sim.singles().items()}
    best = min(singles, key=singles.get) if singles else None
    label = "simulated" if not tgt.is_real else "simulated by the cost model (not measured)"
    one = f"best single device {best} {singles[best] * 1e3:.3f} ms" if best else "no single device runs every op"
    return (f"{label}: this placement {float(info['simulated']) * 1e3:.3f} ms, {one}, "
            f"lower bound {float(info['lower_bound']) * 1e3:.3f} ms")


def _sidecar(blob):
    if not blob:
        return None
    from hdp.runtime.blob import sidecar_path

    return sidecar_path(blob)


def _blob_target_check(tgt, blob) -> None:
    """Refuse ``--export-blob`` up front where it cannot be written: a .blob path is wanted, and
    a blob is compiled for real devices only."""
    from hdp.errors import InputError

    if Path(blob).suffix.lower() != ".blob":
        raise click.UsageError(f"--export-blob {blob}: a compiled model is written to a .blob path")
    modeled = [d.name for d in tgt.devices if d.kind != "real"]
    if modeled:
        raise InputError(f"--export-blob {blob}: target '{tgt.name}' has modeled devices ({', '.join(modeled)}); "
                         f"a compiled model exists only for devices this host has")


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
    from hdp.runtime.blob import export_blob
    from hdp.runtime.target import load_target

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
@with_options(shape_options)
@user_errors
def lower_cmd(model, output, input_shape, seq_len, phase):
    """Lower an OpenVINO model into an hdp Module file."""
    from hdp.ir.openvino_frontend import lower
    from hdp.ir.serde import save

    check_paths(inputs={"MODEL": model}, outputs={"-o": output})
    m = lower(model, shape_request(input_shape, seq_len, phase))
    save(m, output)
    click.echo(f"{m.graph.n_ops} ops, {m.graph.n_edges} edges -> {output}")


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
@click.option("--target", default=None, help="For passes that take a target.")
@click.option("--devices", default=None, help="Comma-separated real devices, instead of --target.")
@click.option("--timings", type=click.Path(dir_okay=False), default=None)
@timeout_option
@with_options(pass_cache_options)
@user_errors
@cache_scoped
def pass_cmd(name, input, output, sets, target, devices, timings, timeout, cache_dir, no_cache):
    """Run one pass NAME on a Module file INPUT and write the result to OUTPUT."""
    from hdp.ir.serde import load, save
    from hdp.passes.registry import registry
    from hdp.passes.instruments import Timing
    from hdp.passes.manager import PassManager
    from hdp.pipeline import make_pass, takes_target

    reg = registry()
    if name not in reg:
        raise HdpError(f"unknown pass '{name}' (known: {', '.join(sorted(reg))})")
    opts = _parse_sets(sets)
    paths = dict(inputs={"INPUT": input, "--target": target_path(target), "--set policy": opts.get("policy")},
                 outputs={"-o": output, "--timings": timings, "--set checkpoint": opts.get("checkpoint")},
                 out_dirs={"--cache-dir": None if no_cache else cache_dir, "--set report": opts.get("report")})
    check_paths(**paths)
    if takes_target(reg[name]):
        opts["target"] = target_from(target, devices)
    p = make_pass(name, opts)
    module = load(input)
    # passes read the module's source model again (support, profile): it is an input too
    check_paths(**(paths | {"inputs": paths["inputs"] | {"INPUT's source model": module.meta.get("source")}}))
    cache = pass_cache(cache_dir, no_cache)
    (p,) = runtime_options([p], timeout, cache)
    timing = Timing()
    out = PassManager([p], cache=cache, instruments=[timing]).run(module)
    save(out, output)
    if timings:
        timing.write(timings)
    row = timing.rows[-1]
    took = "cache hit" if row["cache_hit"] else f"{row['seconds']:.3f}s"
    click.echo(f"{name}: {took} -> {output}")


@main.command("passes")
def passes_cmd():
    """List the passes, their options and the placement methods with theirs."""
    from hdp.passes.registry import registry
    from hdp.placers.options import METHODS

    for name, cls in sorted(registry().items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        click.echo(f"{name}  (v{cls.version}; requires {', '.join(cls.requires) or '-'}; "
                   f"provides {', '.join(cls.provides)})\n    {doc}")
        for f, default in _defaults(cls):
            if f == "placer":
                click.echo("    --set method=hetero-auto  (and the method's options below)")
            else:
                click.echo(f"    --set {f}={default}")
    click.echo("\nmethods (compile --method NAME[:ARG], partition --set method=...; options with --set):")
    for name, cls in sorted(METHODS.items()):
        needs = f"  [needs {', '.join(cls.needs)}]" if cls.needs else ""
        arg = f" (:ARG sets {cls.arg_field})" if cls.arg_field else ""
        click.echo(f"  {name:<12} {cls.summary}{arg}{needs}")
        for f, default in _defaults(cls):
            click.echo(f"      --set {f}={default}")
    from hdp.glossary import text

    click.echo("\nterms used in the output:")
    click.echo(text())


def _defaults(cls) -> list[tuple[str, str]]:
    import msgspec

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
    from hdp.show import show

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
    from hdp import zoo

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


def run():  # pragma: no cover
    main(prog_name="hdp")


if __name__ == "__main__":  # pragma: no cover
    run()

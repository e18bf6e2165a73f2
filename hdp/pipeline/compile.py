"""``compile_model``: what ``hdp compile`` does, callable from Python.

One pipeline, run by one :class:`~hdp.passes.manager.PassManager` (one cache, one list of
instruments): :class:`~hdp.pipeline.stages.Lower`, the passes of the pipeline text (the default
for the method on the target, or the caller's, see :mod:`hdp.pipeline.schedule`), with a
calibrated ``boundary`` pass after ``profile`` when the cache holds a calibration for the target
on this host, then :class:`~hdp.pipeline.stages.Check` (unless ``check=False``) and
:class:`~hdp.pipeline.stages.Raise`. The whole pipeline is validated before anything runs. A
cached module that turns out to belong to another model is discarded and everything recomputed once
(:func:`~hdp.pipeline.stages.recompute_if_stale`).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hdp.base.errors import HdpError, InputError
from hdp.base.fsutil import output_now, outputs_together
from hdp.ir.plan import PLAN_FILE
from hdp.ir.serde import save
from hdp.ir.types import Module
from hdp.passes.boundary import with_calibration
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument, Timing
from hdp.passes.manager import PassManager, unmet, unmet_message
from hdp.passes.partition import MAX_CONTEXT, PartitionPass
from hdp.pipeline.report import (
    check_lines,
    checked_line,
    concurrent_priced,
    final_sim_vs_measured,
    memory_line,
    method_lines,
    next_line,
    placed_line,
    simulated_verdict,
    time_line,
)
from hdp.pipeline.schedule import build_passes, pipeline_specs, plan, runtime_options
from hdp.pipeline.stages import Check, Lower, Raise, RaisePlan, recompute_if_stale
from hdp.pipeline.text import PipelineError, print_pipeline
from hdp.placers import measured_heads, stage_times
from hdp.runtime.measure.cache import cache_scope
from hdp.runtime.measure.worker_client import prestart_worker, worker_reuse
from hdp.runtime.serve.blob import export_blob, sidecar_path
from hdp.runtime.serve.plan_serve import plan_verdict, serve_in_subprocess, served_lines
from hdp.runtime.serve.report import compare_with_plain, reused_head
from hdp.runtime.serve.serving import fastest_plain, plain_streams_config, serve_against_plain, simulated_plain_rate
from hdp.runtime.serve.verify import tolerance
from hdp.target.devices import host_kinds
from hdp.target.target import Target, load_target


@dataclass
class CompileResult:
    """What :func:`compile_model` did."""

    module: Module  #: the final Module (placement as written)
    pipeline: str  #: the pipeline text that ran between lower and check (boundary not shown)
    lines: list[str]  #: the report, as ``hdp compile`` prints it
    timings: list[dict]  #: a row per stage run (lower, passes, check, raise), then the placer's own stages
    check: object | None = None  #: the final :class:`~hdp.runtime.serve.verify.CheckResult` (None: not checked)
    comparison: object | None = None  #: the :class:`~hdp.runtime.serve.report.PlainComparison` (None: not compared)
    written: dict[str, Path] = field(default_factory=dict)  #: "placed", "ir", "blob", "timings" -> path
    seconds: float = 0.0  #: wall time of the whole call
    summary: list[str] = field(default_factory=list)  #: the short report (at most six lines)


def compile_model(model: str | Path, output: str | Path, target: Target | str, *, passes: str | None = None,
                  method: str | None = None, seed: int | None = None, options: dict | None = None,
                  refine: bool = False, shapes=None, cache: PassCache | None = None,
                  instruments: Sequence[Instrument] = (), check: bool = True, compare: bool = False,
                  timeout: float | None = None, emit_ir: str | Path | None = None,
                  export_blob: str | Path | None = None, timings: str | Path | None = None,
                  echo: Callable[[str], None] | None = None, labels: dict[str, str] | None = None,
                  verbose: bool = False) -> CompileResult:
    """Place ``model`` (an OpenVINO .xml or .onnx) on ``target`` and write the placed model to
    ``output`` (.xml, with its .bin).

    ``passes``: a pipeline text (``support,profile,coarsen{groups=64},partition{method=optimal},assign``);
    None: the default for the method on the target (:func:`hdp.pipeline.default_text`). ``method``,
    ``seed`` and ``options`` (the placer's options, as ``--set`` gives them) fill the partition pass,
    ``refine`` the assign pass; given with ``passes``, they fill what the text leaves out and must
    agree with what it states (``labels`` names their flags in errors). ``shapes``: a
    :class:`~hdp.ir.specialise.ShapeRequest` (or ``{input: shape}``). ``cache``: the pass
    cache (None: none); measurements are cached beside it (``<cache>/measure``). ``instruments``
    observe every stage (a :class:`~hdp.passes.instruments.Timing` is always added for the
    report). ``check``: run the placement under HETERO against the original before writing, repair
    or fall back. ``compare``: on a real target, measure the placement against each device's plain
    compile. ``emit_ir``, ``export_blob`` and ``timings``: further files to write. ``echo`` is
    called with each report line as soon as it is known (the lines are also in the result): the
    short report (at most six lines: what was placed where, the check, the memory when capped, the
    verdict against the host's default plain compile, the time, the next command), or with
    ``verbose`` every line of the detail.

    Errors are :class:`~hdp.base.errors.HdpError` (one line); a mistake in the pipeline text is a
    :class:`~hdp.pipeline.text.PipelineError` naming its column. Nothing is written unless the
    whole placement succeeded (and passed its check), and then every output at once: an error or
    an interrupt before the end leaves none of them (:func:`hdp.base.fsutil.outputs_together`)."""

    t_start = time.monotonic()
    if Path(model).suffix.lower() == ".hdp":
        raise InputError(f"{model}: a Module from `hdp lower` or `hdp pass`, not a model; run its remaining passes "
                         f"with `hdp pass NAME {model} -o next.hdp` and write its placed model with "
                         f"`hdp pass raise {model} -o placed.xml` (`hdp passes` lists them)")
    tgt = load_target(target) if isinstance(target, str) else target
    out = Path(output)
    as_plan = out.suffix.lower() != ".xml"
    if as_plan:
        _plan_check(tgt, out, options, export_blob)
    if export_blob:
        _blob_check(tgt, export_blob)
    if as_plan:  # auto keeps a plan of any shape
        specs = _with_plans(pipeline_specs(tgt, passes, method, seed, options, refine, labels))
        schedule = build_passes(specs, tgt)
    else:
        specs, schedule = plan(tgt, passes, method, seed, options, refine, labels)
    text = print_pipeline(specs)
    schedule = runtime_options(schedule, timeout, cache)
    schedule = with_calibration(schedule, tgt, cache)  # the host's boundary model, if `hdp calibrate` made one
    lower = Lower(model, shapes)
    raise_plan = RaisePlan(out, tgt) if as_plan else None
    found = unmet([lower, *schedule, Raise(out, tgt)], ())
    if found is not None:  # the passes are checked already: only the written placement can lack its input
        raise PipelineError(unmet_message([lower, *schedule, Raise(out, tgt)], (), *found)
                            + " (end the pipeline with partition and assign)",
                            len(passes) + 1 if passes is not None else None)
    timing = Timing()
    manager = PassManager(schedule, cache=cache, instruments=[timing, *instruments])
    lines: list[str] = []
    summary: list[str] = []

    def emit(line: str, short: bool = False, detail: bool = True) -> None:
        """``line`` into the detail (``detail``) and, ``short``, into the short report."""
        if detail:
            lines.append(line)
        if short:
            summary.append(line)
        if echo is not None and (detail if verbose else short):
            echo(line)

    def place_and_write():
        checking = Check(tgt, manager, schedule, timeout, output=None if as_plan else out) if check else None
        writer = raise_plan if as_plan else Raise(out, tgt, checking)
        try:
            module = manager.run(None, [lower])
            _applies(module, model, options or {}, labels or {})
            with stage_times() as stage_rows, measured_heads() as heads:
                module = manager.run(module)
            module = manager.run(module, [s for s in (checking, writer) if s is not None])
        finally:
            if checking is not None:
                checking.close()
        return module, (checking.verified if checking is not None else None), stage_rows, heads

    written: dict[str, Path] = {}
    spent: dict[str, float] = {}  # wall seconds of the steps after the passes
    outputs = [out, out.with_suffix(".bin"), emit_ir, timings] + ([export_blob, sidecar_path(export_blob)]
                                                                   if export_blob else [])
    with worker_reuse(), cache_scope(cache.dir if cache is not None else None, enabled=cache is not None), \
            outputs_together() as written_together:
        written_together.declare(outputs)  # all of them at the end, or none (an error, an interrupt)
        if check or any(d.kind == "real" for d in tgt.devices):
            prestart_worker(model, lower.request)  # the worker imports OpenVINO and reads the model while this lowers it
        module, verified, stage_rows, heads = recompute_if_stale(cache, place_and_write)
        written["plan" if as_plan else "placed"] = out
        for name, label in (("check", "check"), ("raise", "writing")):
            row = next((r for r in reversed(timing.rows) if r["pass"] == name), None)
            if row is not None:
                spent[label] = row["seconds"]
        if emit_ir:
            save(module, emit_ir)
            written["ir"] = Path(emit_ir)
        exported = None
        if export_blob:
            spent["export"], exported = _export(out, export_blob, tgt, emit)
            written["blob"] = Path(export_blob)
        rows = timing.rows + [{"pass": "partition", "stage": n, "key": "", "seconds": s, "cache_hit": False}
                              for n, s in stage_rows]  # the placer's own stages, marked with "stage"
        if timings:
            report = Timing()
            report.rows = rows
            report.write(timings)
            written["timings"] = Path(timings)
        comparison, measured = _report(module, out, tgt, verified, heads, compare, timeout, spent, emit,
                                       raise_plan)

    partition = next((p for p in reversed(schedule) if isinstance(p, PartitionPass)), None)
    total = time.monotonic() - t_start
    emit(time_line(partition, timing.rows, stage_rows, spent, total, verbose=True))
    emit(time_line(partition, timing.rows, stage_rows, spent, total), short=True, detail=False)
    emit(next_line(out, tgt, measured, exported), short=True)
    return CompileResult(module=module, pipeline=text, lines=lines, timings=rows,
                         check=verified.result if verified is not None else None, comparison=comparison,
                         written=written, seconds=time.monotonic() - t_start, summary=summary)


def _applies(module: Module, model, options: dict, labels: dict) -> None:
    """Refuse options that do not apply to the lowered model (``--context`` on a model without
    state), and say what the lowering fixed that the user did not choose (a dynamic batch)."""
    raw = options.get("context", 0) or 0  # --context is an int; a --set context=... is still its text
    try:
        context = int(raw)
    except (TypeError, ValueError):
        context = -1
    if not 0 <= context <= MAX_CONTEXT:
        raise InputError(f"{labels.get('context', '--context')} {raw}: must be an integer in [0, {MAX_CONTEXT}] "
                         f"(tokens of state)")
    if context and not any(op.type == "ReadValue" for op in module.graph.ops):
        raise InputError(f"{labels.get('context', '--context')} {context}: {model} holds no state (no KV cache: "
                         f"no ReadValue/Assign); the tokens of state apply to a stateful model only")
    if module.meta.get("defaulted"):
        warnings.warn(f"{model}: {module.meta['defaulted']}; placed and measured at these shapes "
                      f"(--input-shape NAME:D0,D1,... chooses others; the written model keeps its dynamic shapes)",
                      stacklevel=2)


def _report(module, out, tgt, verified, heads, compare, timeout, spent, emit, raise_plan=None):
    """Emit the placement, check and method lines (the detail, ``-v``), then (``compare``) the
    final comparison, each line marked for the short report or the detail. Returns (the
    :class:`~hdp.runtime.serve.report.PlainComparison` or None, whether anything was measured)."""

    if raise_plan is not None:
        return _plan_report(module, out, tgt, verified, compare, timeout, spent, emit, raise_plan)
    emit(placed_line(module, tgt, out), short=True)
    if module.placement.info.get("message"):
        emit(module.placement.info["message"])
    if verified is not None:
        for line in check_lines(verified):
            emit(line)
        emit(checked_line(verified), short=True, detail=False)
    for line in method_lines(module, tgt):
        emit(line)
    mem = memory_line(module, tgt)
    if mem is not None:
        emit(mem, short=True)
    if not tgt.is_real:
        emit(simulated_verdict(module, tgt), short=True)
        return None, False
    if not compare:
        emit(f"verdict: not measured (--no-compare or --quiet); `hdp evaluate {out} --plain default` measures it "
             f"against the default plain compile", short=True)
        return None, False

    # measured fresh and interleaved, run by run (never cached): a figure from another moment
    # (another load on the machine) would make the comparison meaningless. A head-to-head the
    # placer ran moments ago in this process, of this very placement beside every device's whole
    # graph, is such a measurement: it is reused, not repeated (the default plain compiles, which
    # it does not hold, are measured beside the placement).
    t0 = time.monotonic()
    part = module.partition
    if part is not None and "period" in part.info:  # throughput: served beside the plain compiles' streams
        detail, verdict = _served_against_plain(module, tgt, part, timeout, out)
        for line in detail:
            emit(line)
        emit(verdict, short=True)
        spent["comparison"] = time.monotonic() - t0
        return None, True
    reuse = reused_head(heads, module, tgt)
    if reuse is not None:
        emit("compared with the plain compiles in the placer's head-to-head above (measured in this run, not "
             "repeated); the default plain compiles measured beside the placement:")

    execution = "concurrent" if concurrent_priced(module) is not None else "sequential"
    result = compare_with_plain(module, tgt, execution=execution, reuse=reuse,
                                **({"timeout": timeout} if timeout else {}))
    body = result.text.splitlines()
    for line in body[:-1] if body and body[-1] == result.verdict else body:
        emit(line)
    emit(result.verdict or body[-1], short=True)
    if reuse is None and result.head is not None:
        emit(final_sim_vs_measured(module, result))
    spent["comparison"] = time.monotonic() - t0
    return result, True


#: Windows each side when ``hdp compile --objective throughput`` serves its placement beside the
#: plain compile (``hdp evaluate --objective throughput --runs N`` takes more), in two blocks.
SERVED_WINDOWS = 12


def _served_against_plain(module, tgt: Target, part, timeout, out) -> tuple[list[str], str]:
    """The final comparison under ``--objective throughput``: the placement served with the
    objective's requests in flight beside the host's default plain compile (the throughput hint)
    and beside the plain compile, with its own streams, of the real device the simulator makes
    fastest alone (:func:`hdp.runtime.serve.serving.fastest_plain`), windows alternating, in two
    blocks each; the measured rate against the simulated one. (detail lines, the verdict line)."""

    n = int(part.info.get("requests", 2))
    plain = fastest_plain(tgt, part.info.get("singles"))
    pl = module.placement
    if plain is None or pl is None:
        return [], "verdict: not measured: the target has no real device to serve a plain compile on"
    kw = {"timeout": timeout} if timeout else {}
    got = serve_against_plain(module, tgt, pl.device_of.numpy(), pl.devices, plain, n, batches=SERVED_WINDOWS, **kw)
    kinds = host_kinds()
    dflt = (serve_against_plain(module, tgt, pl.device_of.numpy(), pl.devices, kinds[0], n, batches=SERVED_WINDOWS,
                                default=True, **kw) if kinds else None)
    simulated = 1.0 / float(part.info["period"]) if float(part.info["period"]) > 0 else None
    plain_sim = simulated_plain_rate(tgt.device(plain), part.info.get("singles"), n) if simulated else None
    head = (f"served with {n} requests in flight beside the plain {plain} compile with its own streams "
            f"(windows side by side, measured in this run; `hdp evaluate {out} --objective throughput "
            f"--requests {n} --plain {plain}` measures it again):")
    lines = [head, *got.lines(simulated, plain_sim), got.verdict("against the target's devices: ")]
    if dflt is None:
        return lines, got.verdict()
    lines += [f"served beside {dflt.reference()}:", *dflt.lines()]
    return lines, dflt.verdict() + f"; beside the target's devices: {got.brief()}"


def _plan_check(tgt: Target, out: Path, options: dict | None, blob) -> None:
    """Refuse a plan directory up front where none can be written: a plan is compiled for real
    devices, planned for throughput, and replaces only a directory hdp wrote."""
    modeled = [d.name for d in tgt.devices if d.kind != "real"]
    if modeled:
        raise InputError(f"-o {out}: a serving plan is compiled for the devices this host has; target '{tgt.name}' "
                         f"has modeled devices ({', '.join(modeled)}): `-o placed.xml` gives the plan simulated")
    if blob:
        raise InputError(f"--export-blob {blob}: a serving plan holds its compiled stages already")
    if out.exists() and not (out.is_dir() and (out / PLAN_FILE).is_file()):
        raise InputError(f"-o {out}: exists and is not a plan directory hdp wrote (no {PLAN_FILE} in it); "
                         f"not replaced")


def _with_plans(specs: list) -> list:
    """``auto``'s partition keeps a plan of any shape (``plans=yes``) when the pipeline's method is
    auto and the text says nothing of it."""
    out = list(specs)
    for i, sp in enumerate(out):
        if sp.name != "partition":
            continue
        requests = sp.get("requests") is not None  # the request count says what is meant
        if (sp.get("objective") or ("throughput" if requests else "latency")) != "throughput":
            raise InputError("-o DIR: a directory is a serving plan, planned for --objective throughput; a placement "
                             "for latency is written to a .xml path")
        if (sp.get("method") or "").partition(":")[0] == "auto" and sp.get("plans") is None:
            out[i] = sp.with_option("plans", "yes", "-o DIR")
    return out


def _plan_report(module, out, tgt, verified, compare, timeout, spent, emit, raise_plan) -> None:
    """The lines of a compile that wrote a serving plan, then (``compare``) the plan served beside
    the plain compile, with its own streams, of the device the simulator makes fastest alone."""
    plan = raise_plan.written
    pl = module.placement
    emit(f"planned {module.graph.n_ops} ops with {pl.method} on {tgt.name}: {plan.shape} {plan.describe()} "
         f"({len(plan.stages)} stage{'s' if len(plan.stages) > 1 else ''}, {plan.requests} requests in flight) "
         f"-> {out / PLAN_FILE}", short=True)
    for line in (check_lines(verified) if verified is not None else []) + method_lines(module, tgt):
        emit(line)
    if verified is not None:
        emit(checked_line(verified), short=True, detail=False)
    if raise_plan.note:
        emit(raise_plan.note)
    for note in plan.notes:
        emit(f"plan: {note}")
    if not compare:
        emit(f"verdict: not measured (--no-compare or --quiet); `hdp evaluate {out / PLAN_FILE} --objective throughput "
             f"--plain default` measures it", short=True)
        return None, False
    t0 = time.monotonic()
    part = module.partition
    n = plan.requests
    plain = fastest_plain(tgt, part.info.get("singles"))
    if plain is None:
        emit("not served: the target has no real device to serve a plain compile on", short=True)
        return None, False
    config = plain_streams_config(tgt.device(plain), n)
    got = serve_in_subprocess(output_now(out), requests=n, batches=SERVED_WINDOWS, plain_on=plain, plain_config=config,
                              plain_model=module.meta.get("source", ""),
                              tolerance=tolerance(tgt, plan.device_names()),
                              **({"timeout": timeout * 10} if timeout else {}))
    emit(f"served with {n} requests in flight beside the plain {plain} compile with its own streams (windows side by "
         f"side, measured in this run; `hdp evaluate {out / PLAN_FILE} --objective throughput --requests {n} --plain "
         f"{plain}` measures it again):")
    for line in served_lines(got):
        emit(line)
    emit(plan_verdict(got, plain, n, config), short=True)
    spent["final comparison"] = time.monotonic() - t0
    return None, True


def _blob_check(tgt: Target, blob) -> None:
    """Refuse ``export_blob`` up front where it cannot be written: a .blob path is wanted, and a
    blob is compiled for real devices only."""
    if Path(blob).suffix.lower() != ".blob":
        raise InputError(f"--export-blob {blob}: a compiled model is written to a .blob path")
    modeled = [d.name for d in tgt.devices if d.kind != "real"]
    if modeled:
        raise InputError(f"--export-blob {blob}: target '{tgt.name}' has modeled devices ({', '.join(modeled)}); "
                         f"a compiled model exists only for devices this host has")


def _export(out: Path, blob, tgt: Target, emit) -> tuple[float, str]:
    """Export the written placement compiled with HETERO to ``blob``; (the seconds it took, what
    the short report says of it)."""

    t0 = time.monotonic()
    try:  # the placed model waits beside its destination until every output is written
        rec = export_blob(output_now(out), blob, tgt, source=out)
    except HdpError as e:
        raise HdpError(f"--export-blob {blob}: {e}; nothing was written") from None
    seconds = time.monotonic() - t0
    emit(f"exported the compiled placement -> {blob} ({rec.bytes / 1e6:.1f} MB; import with "
         f"\"{rec.device}\", devices in {sidecar_path(blob)})")
    return seconds, f"exported the compiled placement -> {blob} (import with \"{rec.device}\")"

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hdp.errors import HdpError, InputError
from hdp.ir.types import Module
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument, Timing
from hdp.passes.manager import PassManager, unmet, unmet_message
from hdp.pipeline.schedule import build_passes, pipeline_specs, runtime_options
from hdp.pipeline.stages import Check, Lower, Raise, recompute_if_stale
from hdp.pipeline.text import PipelineError, print_pipeline
from hdp.runtime.target import Target


@dataclass
class CompileResult:
    """What :func:`compile_model` did."""

    module: Module  #: the final Module (placement as written)
    pipeline: str  #: the pipeline text that ran between lower and check (boundary not shown)
    lines: list[str]  #: the report, as ``hdp compile`` prints it
    timings: list[dict]  #: a row per stage run (lower, passes, check, raise), then the placer's own stages
    check: object | None = None  #: the final :class:`~hdp.runtime.verify.CheckResult` (None: not checked)
    comparison: object | None = None  #: the :class:`~hdp.runtime.report.PlainComparison` (None: not compared)
    written: dict[str, Path] = field(default_factory=dict)  #: "placed", "ir", "blob", "timings" -> path
    seconds: float = 0.0  #: wall time of the whole call


def compile_model(model: str | Path, output: str | Path, target: Target | str, *, passes: str | None = None,
                  method: str | None = None, seed: int | None = None, options: dict | None = None,
                  refine: bool = False, shapes=None, cache: PassCache | None = None,
                  instruments: Sequence[Instrument] = (), check: bool = True, compare: bool = False,
                  timeout: float | None = None, emit_ir: str | Path | None = None,
                  export_blob: str | Path | None = None, timings: str | Path | None = None,
                  echo: Callable[[str], None] | None = None, labels: dict[str, str] | None = None) -> CompileResult:
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
    called with each report line as soon as it is known (the lines are also in the result).

    Errors are :class:`~hdp.errors.HdpError` (one line); a mistake in the pipeline text is a
    :class:`~hdp.pipeline.text.PipelineError` naming its column. Nothing is written unless the
    whole placement succeeded (and passed its check)."""
    from hdp.passes.boundary import with_calibration
    from hdp.placers import measured_heads, stage_times
    from hdp.runtime.measure_cache import cache_scope
    from hdp.runtime.target import load_target
    from hdp.runtime.worker_client import prestart_worker, worker_reuse

    t_start = time.monotonic()
    tgt = load_target(target) if isinstance(target, str) else target
    out = Path(output)
    if out.suffix.lower() != ".xml":
        raise InputError(f"{output}: the placed model must be an .xml path")
    if export_blob:
        _blob_check(tgt, export_blob)
    specs = pipeline_specs(tgt, passes, method, seed, options, refine, labels)
    schedule = build_passes(specs, tgt)
    text = print_pipeline(specs)
    schedule = runtime_options(schedule, timeout, cache)
    schedule = with_calibration(schedule, tgt, cache)  # the host's boundary model, if `hdp calibrate` made one
    lower = Lower(model, shapes)
    found = unmet([lower, *schedule, Raise(out, tgt)], ())
    if found is not None:  # the passes are checked already: only the written placement can lack its input
        raise PipelineError(unmet_message([lower, *schedule, Raise(out, tgt)], (), *found)
                            + " (end the pipeline with partition and assign)",
                            len(passes) + 1 if passes is not None else None)
    timing = Timing()
    manager = PassManager(schedule, cache=cache, instruments=[timing, *instruments])
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if echo is not None:
            echo(line)

    def place_and_write():
        checking = Check(tgt, manager, schedule, timeout, output=out) if check else None
        try:
            module = manager.run(None, [lower])
            with stage_times() as stage_rows, measured_heads() as heads:
                module = manager.run(module)
            module = manager.run(module, [s for s in (checking, Raise(out, tgt, checking)) if s is not None])
        finally:
            if checking is not None:
                checking.close()
        return module, (checking.verified if checking is not None else None), stage_rows, heads

    written: dict[str, Path] = {}
    spent: dict[str, float] = {}  # wall seconds of the steps after the passes
    with worker_reuse(), cache_scope(cache.dir if cache is not None else None, enabled=cache is not None):
        if check or any(d.kind == "real" for d in tgt.devices):
            prestart_worker(model, lower.request)  # the worker imports OpenVINO and reads the model while this lowers it
        module, verified, stage_rows, heads = recompute_if_stale(cache, place_and_write)
        written["placed"] = out
        for name, label in (("check", "check"), ("raise", "writing")):
            row = next((r for r in reversed(timing.rows) if r["pass"] == name), None)
            if row is not None:
                spent[label] = row["seconds"]
        if emit_ir:
            from hdp.ir.serde import save

            save(module, emit_ir)
            written["ir"] = Path(emit_ir)
        if export_blob:
            spent["export"] = _export(out, export_blob, tgt, emit)
            written["blob"] = Path(export_blob)
        rows = timing.rows + [{"pass": "partition", "stage": n, "key": "", "seconds": s, "cache_hit": False}
                              for n, s in stage_rows]  # the placer's own stages, marked with "stage"
        if timings:
            report = Timing()
            report.rows = rows
            report.write(timings)
            written["timings"] = Path(timings)
        comparison = _report(module, out, tgt, verified, heads, compare, timeout, spent, emit)
    from hdp.passes.partition import PartitionPass
    from hdp.pipeline.report import time_line

    partition = next((p for p in reversed(schedule) if isinstance(p, PartitionPass)), None)
    emit(time_line(partition, timing.rows, stage_rows, spent, time.monotonic() - t_start))
    return CompileResult(module=module, pipeline=text, lines=lines, timings=rows,
                         check=verified.result if verified is not None else None, comparison=comparison,
                         written=written, seconds=time.monotonic() - t_start)


def _report(module, out, tgt, verified, heads, compare, timeout, spent, emit):
    """Emit the placement, check and method lines, then (``compare``) the final comparison."""
    from hdp.pipeline.report import check_lines, final_sim_vs_measured, method_lines, placed_line

    emit(placed_line(module, tgt, out))
    if module.placement.info.get("message"):
        emit(module.placement.info["message"])
    for line in (check_lines(verified) if verified is not None else []) + method_lines(module, tgt):
        emit(line)
    if not (compare and tgt.is_real):
        return None
    from hdp.runtime.report import compare_with_plain, plain_from_heads

    # measured fresh and interleaved, run by run (never cached): a figure from another moment
    # (another load on the machine) would make the comparison meaningless. A head-to-head the
    # placer ran moments ago in this process, of this very placement beside every device's whole
    # graph, is such a measurement: it is reused, not repeated.
    t0 = time.monotonic()
    part = module.partition
    if part is not None and "period" in part.info:  # throughput: served beside the plain compile's streams
        emit(_served_against_plain(module, tgt, part, timeout, out))
        spent["final comparison"] = time.monotonic() - t0
        return None
    reused = plain_from_heads(heads, module, tgt)
    if reused is not None:
        emit("compared with the plain compiles in the placer's head-to-head above (measured in this run, not repeated):")
    from hdp.pipeline.report import concurrent_priced

    execution = "concurrent" if concurrent_priced(module) is not None else "sequential"
    result = reused or compare_with_plain(module, tgt, execution=execution,
                                          **({"timeout": timeout} if timeout else {}))
    emit(result.text)
    if reused is None and result.head is not None:
        emit(final_sim_vs_measured(module, result))
    spent["final comparison"] = time.monotonic() - t0
    return result


#: Windows each side when ``hdp compile --objective throughput`` serves its placement beside the
#: plain compile (``hdp evaluate --objective throughput --runs N`` takes more).
SERVED_WINDOWS = 12


def _served_against_plain(module, tgt: Target, part, timeout, out) -> str:
    """The final comparison under ``--objective throughput``: the placement served with the
    objective's requests in flight beside the plain compile, with its own streams, of the real
    device the simulator makes fastest alone (:func:`hdp.runtime.serving.fastest_plain`), windows
    alternating; the measured rate against the simulated one, and a verdict."""
    from hdp.runtime.serving import fastest_plain, serve_against_plain, simulated_plain_rate

    n = int(part.info.get("requests", 2))
    plain = fastest_plain(tgt, part.info.get("singles"))
    pl = module.placement
    if plain is None or pl is None:
        return "not measured: the target has no real device to serve a plain compile on"
    got = serve_against_plain(module, tgt, pl.device_of.numpy(), pl.devices, plain, n, batches=SERVED_WINDOWS,
                              **({"timeout": timeout} if timeout else {}))
    simulated = 1.0 / float(part.info["period"]) if float(part.info["period"]) > 0 else None
    plain_sim = simulated_plain_rate(tgt.device(plain), part.info.get("singles"), n) if simulated else None
    head = (f"served with {n} requests in flight beside the plain {plain} compile with its own streams "
            f"(windows side by side, measured in this run; `hdp evaluate {out} --objective throughput "
            f"--requests {n} --plain {plain}` measures it again):")
    return "\n".join([head, *got.lines(simulated, plain_sim), got.verdict()])


def _blob_check(tgt: Target, blob) -> None:
    """Refuse ``export_blob`` up front where it cannot be written: a .blob path is wanted, and a
    blob is compiled for real devices only."""
    if Path(blob).suffix.lower() != ".blob":
        raise InputError(f"--export-blob {blob}: a compiled model is written to a .blob path")
    modeled = [d.name for d in tgt.devices if d.kind != "real"]
    if modeled:
        raise InputError(f"--export-blob {blob}: target '{tgt.name}' has modeled devices ({', '.join(modeled)}); "
                         f"a compiled model exists only for devices this host has")


def _export(out: Path, blob, tgt: Target, emit) -> float:
    """Export the written placement compiled with HETERO to ``blob``; the seconds it took."""
    from hdp.runtime.blob import export_blob, sidecar_path

    t0 = time.monotonic()
    try:
        rec = export_blob(out, blob, tgt)
    except HdpError as e:
        raise HdpError(f"{out} was written (checked); --export-blob {blob} was not: {e}") from None
    seconds = time.monotonic() - t0
    emit(f"exported the compiled placement -> {blob} ({rec.bytes / 1e6:.1f} MB; import with "
         f"\"{rec.device}\", devices in {sidecar_path(blob)})")
    return seconds

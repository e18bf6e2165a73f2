"""Checking a placement before it is written: it must run under HETERO and match the original.

A check compiles the placement as hdp writes it (:func:`hdp.ir.openvino_legalize.legalize` on the
user's original model, dynamic shapes kept) with HETERO, in the measuring worker (a crash costs a
failed check, not the compile), runs it on seeded inputs — at the specialisation, a dynamic model
also at a second shape, a stateful model as a prefill and two generation steps with the state
carried (:func:`hdp.ir.specialise.check_runs`) — and compares every output with the
original compiled on the plain CPU plugin in f32 (f32 KV cache): when ``profile`` ran in the same
worker on a static, stateless model, the outputs of its compile on a device that computes the same
(the CPU plugin in f32, its config changing no result) are that reference, and each device's own
error below comes from its profiled compile too, so the check compiles the placement only
(:meth:`hdp.runtime.measure.worker.Worker.profile`). The relative L2 error must stay
below :func:`tolerance`, or :data:`PRECISION_MARGIN` times the error of the original compiled on the
least precise used device alone when that is larger (:func:`calibrated`): a placement is held to
its devices' precision, not to a precision none of them has. A deep model in bf16 drifts further
than :data:`TOLERANCE_REDUCED` whatever the placement (Inception-V3 with random weights all on
``virtual``'s bf16 CPU_B: 0.129), and so does a decoder through a reduced-precision KV cache.

Modeled devices cannot run here; their placements are checked for the same cut structure on
stand-ins (the CPU plugin registered again per modeled device, in f32), which is what HETERO's
legality depends on.

:func:`verify_and_repair` is what ``hdp compile`` runs: check; on failure find the groups whose
moves break it (:mod:`hdp.placement.repair`), tie them to their neighbours, place again; after
``rounds`` failed repairs, or :data:`REPAIR_BUDGET` seconds, fall back to the best single device.
It never returns an unchecked placement except when asked not to check.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.ir.types import Array, Module, Placement
from hdp.placement.problem import problem_of
from hdp.placement.repair import Deadline, best_single_device, failing_groups, neighbour_ties, single_devices
from hdp.placement.simulate import SIMULATED_KEYS, Simulator
from hdp.placement.subgraphs import untangle
from hdp.runtime.measure.measurer import Measurer, placed_device_of
from hdp.runtime.placed.model import read_placed
from hdp.target.capacity import capacities, device_memory, max_allocations, parse_caps_record
from hdp.target.devices import hetero_config, hetero_name, make_core
from hdp.target.target import Device, Target
from hdp.zoo import models as zoo

#: Stand-in names start with CPU: OpenVINO lists an aliased CPU plugin only under such a name.
STANDIN = "CPU_HDPCHK"
#: Relative L2 error allowed when every device runs in f32, and when some run in bf16/f16.
TOLERANCE_F32 = 1e-3
TOLERANCE_REDUCED = 5e-2
#: A placement may be this many times further from the original than its least precise device is
#: on its own (a deep model in bf16, or a decoder with a u8 KV cache, drifts further than
#: TOLERANCE_REDUCED whatever the placement: an 8-layer tiny int4 Llama all on one CPU plugin with
#: the default u8 cache was 7e-2 off its f32 self, Inception-V3 all in bf16 0.129).
PRECISION_MARGIN = 2.0


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    passed: bool
    error: str = ""
    max_error: float = 0.0
    tolerance: float = 0.0
    runs: int = 0
    seconds: float = 0.0
    stand_ins: bool = False  # modeled devices were checked on CPU stand-ins
    floor: float = 0.0  # the largest error of the original on one of the used devices alone
    execution: str = "sequential"  # run under HETERO, or by hdp's concurrent executor

    def describe(self) -> str:
        where = " (modeled devices on CPU stand-ins: the cut structure was checked)" if self.stand_ins else ""
        why = (f", {PRECISION_MARGIN:g}x the {self.floor:.1e} of its least precise device alone"
               if self.tolerance > self.floor > 0 and self.tolerance == PRECISION_MARGIN * self.floor else "")
        how = "concurrently (hdp's executor)" if self.execution == "concurrent" else "under HETERO"
        if self.passed:
            return (f"checked: runs {how} and matches the original (relative error "
                    f"{self.max_error:.1e} <= {self.tolerance:.1e}{why} over {self.runs} run(s)){where}")
        return f"check failed{where}: {self.error}"


def calibrated(tol: float, device_errors) -> float:
    """``tol``, or :data:`PRECISION_MARGIN` times the largest of ``device_errors`` (each used
    device's own error on the whole model) when that is larger."""
    return max(tol, PRECISION_MARGIN * max(device_errors, default=0.0))


def check_target(target: Target) -> tuple[Target, dict[str, str]]:
    """``target`` with every modeled device replaced by a CPU plugin stand-in (f32), and the
    renaming {modeled name: stand-in name}. A target of real devices only is returned as it is,
    so the check loads the model as ``support`` and ``profile`` did and takes over their worker,
    model read (:func:`hdp.runtime.measure.worker_client.worker_reuse`)."""
    if all(d.kind == "real" for d in target.devices):
        return target, {}
    devs, rename = [], {}
    for i, d in enumerate(target.devices):
        if d.kind == "real":
            devs.append(d)
            continue
        name = f"{STANDIN}{i}"
        devs.append(Device(name=name, kind="real", plugin="CPU", alias=True,
                           config={"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"},
                           description=f"stands in for {d.name}"))
        rename[d.name] = name
    return Target(name=f"{target.name}-check", devices=devs, link=target.link), rename


def tolerance(target: Target, used: list[str], stateful: bool = False) -> float:
    """:data:`TOLERANCE_REDUCED` when a used real device may compute in bf16/f16 (its precision
    hint says so, or it has none and the plugin picks) or, for a stateful model, keeps its KV cache
    in less than f32 (the CPU plugin's default is u8); else :data:`TOLERANCE_F32`."""
    for name in used:
        d = target.device(name)
        if d.kind != "real":
            continue
        if d.config.get("INFERENCE_PRECISION_HINT", "").lower() != "f32":
            return TOLERANCE_REDUCED
        if stateful and d.config.get("KV_CACHE_PRECISION", "").lower() != "f32":
            return TOLERANCE_REDUCED
    return TOLERANCE_F32


class PlacementChecker:
    """Checks placements of one module on one target, reusing one worker. ``execution``: how
    :meth:`check` runs a placement (HETERO, or hdp's concurrent executor); a written file
    (:meth:`check_file`) is always checked under HETERO, so a placement placed for the concurrent
    executor is checked both ways. With ``stage`` (a function that saves a module's placement as
    hdp writes it and returns the ``.xml``: :meth:`hdp.runtime.placed.model.StagedPlaced.stage`) and
    sequential execution, :meth:`check_module` checks that file: the file to be committed is then
    what was checked, compiled once."""

    def __init__(self, module: Module, target: Target, timeout: float = 300.0, execution: str = "sequential",
                 stage: Callable[[Module], object] | None = None):

        self.stage = stage
        self.module = module
        self.target = target
        self.execution = execution
        self.check_target, self.rename = check_target(target)
        self.measurer = Measurer(module, self.check_target, runs=1, warmup=0, timeout=timeout, cache=False)
        self.stateful = "state_shapes" in module.meta

    def _result(self, reply: dict, used: list[str], execution: str = "sequential") -> CheckResult:
        floor = max(reply.get("device_errors", {}).values(), default=0.0)
        tol = calibrated(tolerance(self.target, used, bool(reply.get("stateful"))), [floor])
        stand = any(d in self.rename for d in used)
        if not reply.get("passed"):
            return CheckResult(passed=False, error=str(reply.get("error", "failed")), tolerance=tol, stand_ins=stand,
                               seconds=float(reply.get("seconds", 0.0)), execution=execution)
        err = float(reply.get("max_error", 0.0))
        ok = err <= tol
        return CheckResult(passed=ok, max_error=err, tolerance=tol, runs=int(reply.get("runs", 0)), stand_ins=stand,
                           seconds=float(reply.get("seconds", 0.0)), floor=floor, execution=execution,
                           error="" if ok else f"outputs differ from the original: relative error {err:.3g} "
                                               f"at {reply.get('where')} (tolerance {tol:.0e})")

    def check(self, device_of: np.ndarray, devices: tuple[str, ...]) -> CheckResult:
        """Check a device per op (indices into ``devices``, the target's names)."""
        dev = np.asarray(device_of, np.int16)
        used = [devices[int(k)] for k in np.unique(dev)]
        names = tuple(self.rename.get(d, d) for d in devices)
        base = tolerance(self.target, used, self.stateful)
        return self._result(self.measurer.check(dev, names, tolerance=base, execution=self.execution), used,
                            self.execution)

    def check_module(self, module: Module) -> CheckResult:
        """Check ``module``'s placement: the file ``stage`` saves when the checker has one and runs
        it under HETERO, else the placement as the worker builds it (the same legalization)."""
        pl = module.placement
        if self.stage is None or self.execution != "sequential":
            return self.check(pl.device_of.numpy(), pl.devices)
        used = [pl.devices[int(k)] for k in np.unique(pl.device_of.numpy())]
        return self.check_file(self.stage(module), used)

    def check_file(self, xml, used: list[str]) -> CheckResult:
        """Check a written placed model file (as a reader will load it)."""
        base = tolerance(self.target, used, self.stateful)
        return self._result(self.measurer.check(xml=str(xml), rename=self.rename, tolerance=base), used)

    def close(self) -> None:
        self.measurer.close()

    def __enter__(self) -> "PlacementChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_placed_file(xml, target: Target | None = None, timeout: float = 300.0,
                      execution: str = "sequential") -> CheckResult:
    """Check a placed model file (from ``hdp compile``) against its own plain CPU compile: what
    ``hdp evaluate`` does before measuring. ``target`` defaults to the one the file records;
    ``execution="concurrent"`` runs it by hdp's concurrent executor instead of HETERO."""

    dev, devices, tgt = placed_device_of(xml, target)
    used = [devices[int(k)] for k in np.unique(dev)]
    check_tgt, rename = check_target(tgt)
    with Measurer(xml, check_tgt, runs=1, warmup=0, timeout=timeout, cache=False) as m:
        reply = m.check(xml=xml, rename=rename, execution=execution, tolerance=tolerance(tgt, used))
    floor = max(reply.get("device_errors", {}).values(), default=0.0)
    tol = calibrated(tolerance(tgt, used, bool(reply.get("stateful"))), [floor])
    err = float(reply.get("max_error", 0.0))
    ok = bool(reply.get("passed")) and err <= tol
    return CheckResult(passed=ok, max_error=err, tolerance=tol, runs=int(reply.get("runs", 0)),
                       stand_ins=any(d in rename for d in used), floor=floor, execution=execution,
                       error="" if ok else str(reply.get("error") or f"outputs differ from the plain compile: "
                                                                       f"relative error {err:.3g} (tolerance {tol:.0e})"))


class GenerationCheck(msgspec.Struct, frozen=True, kw_only=True):
    """A placed causal LM generating teacher-forced against the original (see :func:`check_generation`)."""

    errors: list[float]  # relative L2 error of each step's logits (prefill, then one per decode step)
    tolerance: float
    floor: float  # the largest error of the original on one of the used devices alone
    used: list[str]  # the devices the placement uses (target names)

    @property
    def passed(self) -> bool:
        return max(self.errors) <= self.tolerance


def check_generation(placed_xml, original_xml, target: Target | None = None, steps: int = 4,
                     batch: int = 2, prompt: int = 6, seed: int = 0) -> GenerationCheck:
    """Generate with a placed causal LM (from ``hdp compile``; modeled devices on the f32 CPU
    stand-ins of :func:`check_target`) fed the original's greedy tokens (:func:`hdp.zoo.models.generate`
    with ``follow``): a prefill of ``prompt`` random tokens then ``steps`` steps, against the original
    on the plain CPU plugin in f32 (f32 KV cache). The tolerance is the one ``hdp compile`` holds the
    placement to (:func:`tolerance`, :func:`calibrated` by each used device running the original
    alone, on the same tokens)."""
    import openvino as ov


    pm = read_placed(placed_xml)
    tgt = target or pm.target
    check_tgt, rename = check_target(tgt)
    for op in pm.model.get_ordered_ops():
        rt = op.get_rt_info()
        rt["affinity"] = rename.get(rt["affinity"].astype(str), rt["affinity"].astype(str))
    devices = [rename.get(d, d) for d in pm.devices]
    core = make_core(check_tgt, devices)
    reference = ov.Core().compile_model(str(original_xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                                   "KV_CACHE_PRECISION": "f32"})
    vocab = reference.outputs[0].get_partial_shape()[-1]
    high = vocab.get_length() if vocab.is_static else 100
    ids = np.random.default_rng(seed).integers(1, high, (batch, prompt))
    want = zoo.generate(reference, ids, steps=steps)

    def errors(compiled) -> list[float]:
        got = zoo.generate(compiled, ids, steps=steps, follow=want.tokens)
        return [float(np.linalg.norm(a.astype(np.float64) - b) / np.linalg.norm(b.astype(np.float64)))
                for a, b in zip(got.logits, want.logits)]

    floor = 0.0
    for d in pm.used:
        try:
            alone = max(errors(core.compile_model(str(original_xml), rename.get(d, d))))
        except RuntimeError:  # the device cannot run the whole model
            continue
        floor = max(floor, alone if np.isfinite(alone) else 0.0)
    tol = calibrated(tolerance(tgt, pm.used, stateful=True), [floor])
    placed = core.compile_model(pm.model, hetero_name(devices), hetero_config(check_tgt, devices))
    return GenerationCheck(errors=errors(placed), tolerance=tol, floor=floor, used=list(pm.used))


def _fits_memory(module: Module, problem, target: Target):
    """``feasible(group_device)`` under the device memory the module was placed with (the target's
    capacities, with the ``--memory`` caps its partition records, and each device's memory model;
    every tensor within its device's ``max_allocation``), or None when no device's memory is bounded."""

    info = module.partition.info if module.partition is not None else {}
    over = parse_caps_record(info.get("memory_caps"))
    try:
        caps = capacities(target, over)
    except InputError:
        return None
    alloc = max_allocations(target)
    bounded = np.isfinite(caps).any() or np.isfinite(alloc).any()
    if not bounded or tuple(target.device_names) != tuple(problem.devices):
        return None
    held = problem.with_capacity(caps).with_device_memory(device_memory(target))
    largest = held.largest_allocation()
    feasible = Simulator(held).feasible

    def fits(group_device) -> bool:  # within each device's memory, and each tensor within its max_allocation
        gd = np.asarray(group_device, np.int64)
        return feasible(group_device) and bool((largest[np.arange(gd.shape[0]), gd] <= alloc[gd]).all())

    return fits


class Verified(msgspec.Struct, kw_only=True):
    """What :func:`verify_and_repair` did: the final module and the report lines."""

    module: Module
    result: CheckResult
    lines: list[str] = []
    learned: list[str] = []  # one line per tie rule learned from a failure
    fallback: str = ""  # the single device fallen back to, if any


#: Seconds :func:`verify_and_repair` may spend checking and repairing one placement before it
#: falls back to one device (the fallback's own check comes on top).
REPAIR_BUDGET = 30.0


def verify_and_repair(module: Module, target: Target, replace: Callable[[Module, tuple], Module],
                      checker: PlacementChecker, rounds: int = 3, budget: float = REPAIR_BUDGET) -> Verified:
    """Check ``module.placement``; on failure learn ties and re-place (``replace(module,
    extra_ties) -> module`` reruns partition and assign) up to ``rounds`` times, then fall back to
    the fastest single device that holds the model within its memory and whose own placement
    passes the check. ``budget`` bounds the seconds spent checking and repairing; the
    placements tried while narrowing a failure down obey the same rules as any placement
    (:func:`hdp.placement.subgraphs.untangle`)."""

    deadline = time.monotonic() + budget
    ties: tuple = tuple(map(tuple, module.partition.extra_ties.numpy())) if module.partition.extra_ties is not None else ()
    failed_before: dict[bytes, CheckResult] = {}  # device per op -> its failed check (never checked twice)

    def check(m: Module) -> CheckResult:
        key = np.asarray(m.placement.device_of.numpy(), np.int16).tobytes()
        if key in failed_before:
            return failed_before[key]
        result = checker.check_module(m)
        if not result.passed:
            failed_before[key] = result
        return result

    out = Verified(module=module, result=check(module))
    first_error = out.result.error
    for _ in range(rounds):
        if out.result.passed:
            return out
        if time.monotonic() > deadline:
            out.lines.append(f"repair stopped: its {budget:g} s budget ran out")
            break
        pl = out.module.placement
        problem = problem_of(out.module, pl.devices, ties)
        base_dev = best_single_device(problem)
        if base_dev < 0:
            break
        st = problem.structure
        gd = st.group_devices(pl.device_of.numpy())
        base = problem.single(base_dev)

        def fails(trial: np.ndarray) -> bool:
            trial = untangle(problem, trial)[0]
            return not checker.check(problem.op_devices(trial), pl.devices).passed

        try:
            culprits = failing_groups(problem, gd, base, fails, deadline)
        except Deadline:
            out.lines.append(f"repair stopped: its {budget:g} s budget ran out")
            break
        names = [out.module.graph.ops[int(st.members(g)[0])] for g in culprits]
        new = neighbour_ties(problem, culprits)
        if not new:
            break
        out.learned.append(
            f"keep {', '.join(f'{op.name} ({op.type})' for op in names[:4])}"
            f"{' and more' if len(names) > 4 else ''} on the device of their neighbours "
            f"({len(new)} ties), because: {out.result.error}")
        ties = tuple(sorted(set(ties) | set(new)))
        out.module = replace(out.module, ties)
        out.result = check(out.module)
    if out.result.passed:
        return out
    problem = problem_of(out.module, out.module.placement.devices, ties)
    ranked = single_devices(problem)
    if not ranked:
        raise InputError(f"the placement does not run ({first_error}) and no single device of "
                         f"{list(problem.devices)} can run every op; nothing to write")

    held = _fits_memory(out.module, problem, target)
    if held is not None:  # a fallback holds the model within the device's memory, as every placement does
        fits = [d for d in ranked if held(problem.single(d))]
        if not fits:
            raise InputError(f"the placement does not run ({first_error}) and no single device of "
                             f"{list(problem.devices)} holds the whole model within its memory; nothing to write")
        ranked = fits

    pl = out.module.placement
    failed = []
    for base_dev in ranked:  # the fastest single device whose own placement passes the check
        single = problem.single(base_dev)
        dev = problem.op_devices(single)
        info = {k: v for k, v in pl.info.items() if k not in SIMULATED_KEYS}
        info.update(fallback=f"single:{problem.devices[base_dev]}", fallback_reason=first_error)
        if problem.has_costs:
            info.update({k: str(v) for k, v in Simulator(problem).report(single).items()})
        module = out.module.replace(placement=Placement(method=pl.method, devices=pl.devices,
                                                        device_of=Array.of(dev, np.int16), info=info))
        result = check(module)  # (a placement already on that device alone is not checked again)
        if result.passed:
            out.module, out.result, out.fallback = module, result, problem.devices[base_dev]
            if failed:
                out.lines.append(f"fell back past {'; '.join(failed)}")
            return out
        failed.append(f"every op on {problem.devices[base_dev]} fails the check: {result.error}")
    hint = ""
    if failed and all("timed out" in f for f in failed):  # OpenVINO's own compile, not the placement
        hint = (" (no check finished in time: the model itself may take OpenVINO longer to compile; "
                "raise --timeout, or write the placement unchecked with --no-check)")
    raise InputError(f"even {'; '.join(failed)}{hint}")

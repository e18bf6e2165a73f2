"""Checking a placement before it is written: it must run under HETERO and match the original.

A check compiles the placement as hdp writes it (:func:`hdp.ir.openvino_legalize.legalize` on the
user's original model, dynamic shapes kept) with HETERO, in the measuring worker (a crash costs a
failed check, not the compile), runs it on seeded inputs — at the specialisation, a dynamic model
also at a second shape, a stateful model as a prefill and two generation steps with the state
carried (:func:`hdp.ir.openvino_frontend.check_runs`) — and compares every output with the
original compiled on the plain CPU plugin in f32 (f32 KV cache). The relative L2 error must stay
below :func:`tolerance`.

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

from hdp.errors import InputError
from hdp.ir.types import Module
from hdp.runtime.target import Device, Target

#: Stand-in names start with CPU: OpenVINO lists an aliased CPU plugin only under such a name.
STANDIN = "CPU_HDPCHK"
#: Relative L2 error allowed when every device runs in f32, and when some run in bf16/f16.
TOLERANCE_F32 = 1e-3
TOLERANCE_REDUCED = 5e-2


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    passed: bool
    error: str = ""
    max_error: float = 0.0
    tolerance: float = 0.0
    runs: int = 0
    seconds: float = 0.0
    stand_ins: bool = False  # modeled devices were checked on CPU stand-ins

    def describe(self) -> str:
        where = " (modeled devices on CPU stand-ins: the cut structure was checked)" if self.stand_ins else ""
        if self.passed:
            return (f"checked: runs under HETERO and matches the original (relative error "
                    f"{self.max_error:.1e} <= {self.tolerance:.0e} over {self.runs} run(s)){where}")
        return f"check failed{where}: {self.error}"


def check_target(target: Target) -> tuple[Target, dict[str, str]]:
    """``target`` with every modeled device replaced by a CPU plugin stand-in (f32), and the
    renaming {modeled name: stand-in name}."""
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
    """Checks placements of one module on one target, reusing one worker."""

    def __init__(self, module: Module, target: Target, timeout: float = 300.0):
        from hdp.runtime.measure import Measurer

        self.module = module
        self.target = target
        self.check_target, self.rename = check_target(target)
        self.measurer = Measurer(module, self.check_target, runs=1, warmup=0, timeout=timeout, cache=False)

    def _result(self, reply: dict, used: list[str]) -> CheckResult:
        tol = tolerance(self.target, used, bool(reply.get("stateful")))
        stand = any(d in self.rename for d in used)
        if not reply.get("passed"):
            return CheckResult(passed=False, error=str(reply.get("error", "failed")), tolerance=tol, stand_ins=stand,
                               seconds=float(reply.get("seconds", 0.0)))
        err = float(reply.get("max_error", 0.0))
        ok = err <= tol
        return CheckResult(passed=ok, max_error=err, tolerance=tol, runs=int(reply.get("runs", 0)), stand_ins=stand,
                           seconds=float(reply.get("seconds", 0.0)),
                           error="" if ok else f"outputs differ from the original: relative error {err:.3g} "
                                               f"at {reply.get('where')} (tolerance {tol:.0e})")

    def check(self, device_of: np.ndarray, devices: tuple[str, ...]) -> CheckResult:
        """Check a device per op (indices into ``devices``, the target's names)."""
        dev = np.asarray(device_of, np.int16)
        used = [devices[int(k)] for k in np.unique(dev)]
        names = tuple(self.rename.get(d, d) for d in devices)
        return self._result(self.measurer.check(dev, names), used)

    def check_module(self, module: Module) -> CheckResult:
        pl = module.placement
        return self.check(pl.device_of.numpy(), pl.devices)

    def check_file(self, xml, used: list[str]) -> CheckResult:
        """Check a written placed model file (as a reader will load it)."""
        return self._result(self.measurer.check(xml=str(xml), rename=self.rename), used)

    def close(self) -> None:
        self.measurer.close()

    def __enter__(self) -> "PlacementChecker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def check_placed_file(xml, target: Target | None = None, timeout: float = 300.0) -> CheckResult:
    """Check a placed model file (from ``hdp compile``) against its own plain CPU compile: what
    ``hdp evaluate`` does before measuring. ``target`` defaults to the one the file records."""
    from hdp.runtime.measure import Measurer, placed_device_of

    dev, devices, tgt = placed_device_of(xml, target)
    used = [devices[int(k)] for k in np.unique(dev)]
    check_tgt, rename = check_target(tgt)
    with Measurer(xml, check_tgt, runs=1, warmup=0, timeout=timeout, cache=False) as m:
        reply = m.check(xml=xml, rename=rename)
    tol = tolerance(tgt, used, bool(reply.get("stateful")))
    err = float(reply.get("max_error", 0.0))
    ok = bool(reply.get("passed")) and err <= tol
    return CheckResult(passed=ok, max_error=err, tolerance=tol, runs=int(reply.get("runs", 0)),
                       stand_ins=any(d in rename for d in used),
                       error="" if ok else str(reply.get("error") or f"outputs differ from the plain compile: "
                                                                       f"relative error {err:.3g} (tolerance {tol:.0e})"))


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
    the best single device. ``budget`` bounds the seconds spent checking and repairing; the
    placements tried while narrowing a failure down obey the same rules as any placement
    (:func:`hdp.placement.subgraphs.untangle`)."""
    from hdp.ir.types import Array, Placement
    from hdp.placement.problem import problem_of
    from hdp.placement.repair import Deadline, best_single_device, failing_groups, neighbour_ties
    from hdp.placement.subgraphs import untangle

    deadline = time.monotonic() + budget
    ties: tuple = tuple(map(tuple, module.partition.extra_ties.numpy())) if module.partition.extra_ties is not None else ()
    out = Verified(module=module, result=checker.check_module(module))
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
        out.result = checker.check_module(out.module)
    if out.result.passed:
        return out
    problem = problem_of(out.module, out.module.placement.devices, ties)
    base_dev = best_single_device(problem)
    if base_dev < 0:
        raise InputError(f"the placement does not run ({first_error}) and no single device of "
                         f"{list(problem.devices)} can run every op; nothing to write")
    from hdp.passes.assign import SIMULATED_KEYS

    pl = out.module.placement
    single = problem.single(base_dev)
    dev = problem.op_devices(single)
    info = {k: v for k, v in pl.info.items() if k not in SIMULATED_KEYS}
    info.update(fallback=f"single:{problem.devices[base_dev]}", fallback_reason=first_error)
    if problem.has_costs:
        from hdp.runtime.simulate import Simulator

        info.update({k: str(v) for k, v in Simulator(problem).report(single).items()})
    out.module = out.module.replace(placement=Placement(method=pl.method, devices=pl.devices,
                                                         device_of=Array.of(dev, np.int16), info=info))
    out.fallback = problem.devices[base_dev]
    out.result = checker.check_module(out.module)
    if not out.result.passed:
        raise InputError(f"even every op on {out.fallback} fails the check: {out.result.error}")
    return out

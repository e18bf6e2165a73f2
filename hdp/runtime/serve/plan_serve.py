"""Serving a plan, measured: ``hdp serve plan.json``, ``hdp evaluate plan.json [--plain DEV]``, and the
plans ``auto`` and ``hdp compile`` serve (the runtime is :mod:`hdp.runtime.serve.plan_run`'s).

:func:`serve_plan` loads a plan, checks its first requests against the unsplit model, warms it up
and serves windows (:func:`hdp.runtime.serve.plan_run.plan_window`) for a number of windows or
seconds; beside it, optionally, the plain compile of the model it was planned from with its own
streams, windows alternating (ABBA), so both see the same host. :func:`served_lines` and
:func:`plan_verdict` say what was measured: requests/s and the p50/p99 latency as Hodges-Lehmann
estimates over the windows with their 95 % intervals, each stage's utilisation, the paired ratio.
``python -m hdp.runtime.serve.plan_serve`` serves a plan in a process of its own (JSON request on
stdin, JSON result on stdout; it dies with its parent): :func:`serve_in_subprocess`.
:func:`describe_plan` is ``hdp show plan.json``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.ir.plan import PLAN_FILE, plan_file, read_plan
from hdp.runtime.measure.protocol import PARENT_ENV
from hdp.runtime.measure.stats import compare, hodges_lehmann
from hdp.runtime.measure.worker import die_with_parent, ov_message, steady_window
from hdp.runtime.serve.plan_run import (
    CHECK_FILE,
    WINDOW_SECONDS,
    LoadedPlan,
    Window,
    check_blobs,
    check_host,
    check_outputs,
    load_plan,
    plan_window,
)


def describe_plan(path) -> str:
    """``hdp show plan.json``: the shape, every stage with its replicas, streams, ops and blobs, the
    edges between stages, what the planner simulated, and whether this host can run it."""
    import openvino as ov

    f = plan_file(path)
    plan = read_plan(f)
    lines = [f"serving plan ({plan.shape}): {plan.describe()} for {plan.requests} requests in flight"
             + (f"; from {plan.model} ({plan.method} on {plan.target})" if plan.model else ""),
             f"OpenVINO {plan.openvino or '?'}" + (f" (this host: {ov.get_version()}; the blobs import only into "
                                                   f"the same version)" if plan.openvino != ov.get_version() else "")]
    if plan.placed:
        lines.append(f"a pipeline: {plan.placed} beside {PLAN_FILE}, run under HETERO")
    for s, st in enumerate(plan.stages):
        reps = ", ".join(f"{r.device}" + (f" x{r.streams} streams" if r.streams > 1 else "")
                         + (f" on {r.host}" if r.host else "") for r in st.replicas)
        blobs = ", ".join(f"{b.file} {b.bytes / 1e6:.1f} MB" for b in st.blobs)
        lines.append(f"  stage {s}: {len(st.groups)} tie groups, {st.ops} ops; replicas: {reps}"
                     + (f"; {len(st.inputs)} inputs, {len(st.outputs)} outputs; {blobs}" if blobs else ""))
    edges = plan.edges()
    if edges:
        lines.append("edges: " + ", ".join(f"stage {a} -> stage {b} ({n} tensor{'s' if n > 1 else ''})"
                                           for a, b, n in edges))
    if plan.simulated is not None:
        sim = plan.simulated
        gap = f", gap {sim.gap:.2%}" if sim.gap is not None else ""
        lines.append(f"simulated when planned: {1 / sim.period:.1f} requests/s"
                     + (f" (bound {1 / sim.bound:.1f}/s{gap}; {'proven' if sim.exact else 'not proven'})"
                        if sim.bound > 0 else "") + (f"; bound by {sim.bound_by}" if sim.bound_by else ""))
    lines.append("inputs: " + ", ".join(plan.inputs))
    lines += [f"note: {n}" for n in plan.notes]
    try:
        check_host(plan, str(f), list(ov.Core().available_devices))
        if not plan.placed:
            check_blobs(plan, f.parent, ov.get_version())
        lines.append("this host can run it (every device present, every blob intact)")
    except InputError as e:
        lines.append(f"this host cannot run it: {e}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- serving


class PlanServed(msgspec.Struct, frozen=True, kw_only=True):
    """A plan served with ``requests`` in flight (see :func:`serve_plan`); ``plain_*``: the plain
    compile beside it, when one was."""

    what: str
    shape: str
    requests: int
    per_batch: int
    rates: list[float] = []
    p50: list[float] = []
    p99: list[float] = []
    utilisation: list[list[float]] = []  # per window, per stage
    cpu: list[float] = []
    load_seconds: float = 0.0
    checked: int = 0
    check_error: float = 0.0
    check_passed: bool = True
    tolerance: float = 0.0
    notes: list[str] = []
    plain_on: str = ""
    plain_config: dict[str, str] = {}
    plain_rates: list[float] = []
    plain_per_batch: int = 0
    checks: list[float] = []  # relative errors of the seeded requests rerun while serving
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and len(self.rates) > 0

    def estimate(self, values=None) -> tuple[float, float, float]:
        v = self.rates if values is None else values
        if len(v) < 2:
            x = float(v[0]) if v else math.nan
            return x, math.nan, math.nan
        return tuple(float(x) for x in hodges_lehmann(np.asarray(v)))

    def versus(self):
        """The plan's seconds per request over the plain compile's, window beside window (None
        without a plain compile)."""
        if not self.plain_rates or len(self.plain_rates) != len(self.rates):
            return None
        return compare(1 / np.asarray(self.plain_rates), 1 / np.asarray(self.rates),
                       names=(f"plain {self.plain_on}", "plan"))


def _interval(est, lo, hi, scale=1.0, unit="", digits=1) -> str:
    if math.isfinite(lo) and math.isfinite(hi):
        return f"{est * scale:.{digits}f}{unit} (95 % CI {lo * scale:.{digits}f}-{hi * scale:.{digits}f})"
    return f"{est * scale:.{digits}f}{unit} (no 95 % interval: too few windows)"


def served_lines(s: PlanServed) -> list[str]:
    """What ``hdp serve`` prints: requests/s, p50 and p99 latency with their intervals, each stage's
    utilisation, the CPU seconds per second, and the output check."""
    if not s.ok:
        return [f"{s.what}: failed: {s.error}"]
    out = [f"{s.what} ({s.shape}), {s.requests} requests in flight, {len(s.rates)} windows of {s.per_batch}: "
           f"{_interval(*s.estimate(), unit=' requests/s')}",
           f"latency p50 {_interval(*s.estimate(s.p50), scale=1e3, unit=' ms', digits=2)}, "
           f"p99 {_interval(*s.estimate(s.p99), scale=1e3, unit=' ms', digits=2)}"]
    util = np.asarray(s.utilisation).mean(axis=0) if s.utilisation else np.zeros(0)
    out.append("stage utilisation (share of the window its lanes spent inferring): "
               + ", ".join(f"stage {i} {u:.0%}" for i, u in enumerate(util))
               + f"; CPU {np.mean(s.cpu):.2f} s per second (this process)")
    if s.checked:
        out.append(f"outputs of the first {s.checked} requests "
                   + (f"match the unsplit model (relative error {s.check_error:.1e} <= {s.tolerance:.0e})"
                      if s.check_passed else
                      f"DIFFER from the unsplit model: relative error {s.check_error:.2e} > {s.tolerance:.0e}"))
    out += s.notes
    return out


def plan_verdict(s: PlanServed, plain: str, requests: int, config: dict) -> str:
    """One line: does the plan serve faster than the plain compile with its own streams?"""
    streams = f"the plain {plain} compile with its own streams"
    c = s.versus() if s.ok else None
    if c is None:
        return f"verdict: not compared with {streams}: {s.error or 'no paired windows'}"
    ratio = (f"requests/s plan over plain {1 / c.ratio:.3f} (95 % CI {1 / c.high:.3f}-{1 / c.low:.3f})"
             if c.low > 0 and math.isfinite(c.high) else f"requests/s plan over plain {1 / c.ratio:.3f}")
    if c.verdict == "faster":
        return f"verdict: the {s.shape} plan serves {requests} requests in flight faster than {streams} beyond noise: {ratio}"
    if c.verdict == "equal":
        return f"verdict: the {s.shape} plan serves as fast as {streams} (no difference beyond noise): {ratio}"
    how = f"{config['NUM_STREAMS']} streams" if "NUM_STREAMS" in config else ", ".join(f"{k}={v}" for k, v in config.items())
    return (f"verdict: {streams} serves {requests} requests in flight faster beyond noise ({ratio}): for throughput "
            f"alone on this host, compile the unplaced model on {plain} with {how}")


def _inputs_for(loaded: LoadedPlan):
    if loaded.check_inputs:
        return loaded.check_inputs[0]
    raise InputError(f"{loaded.directory}: no {CHECK_FILE} (the seeded requests hdp records with a plan); "
                     f"write the plan again")


def serve_plan(path, *, requests: int | None = None, batches: int = 10, per_batch: int = 0, seconds: float = 0.0,
               plain_on: str | None = None, plain_config: dict | None = None, plain_model: str | None = None,
               tolerance: float = 1e-3, warmup: int = 3, on_window=None, check_every: float = 0.0) -> PlanServed:
    """Serve the plan in ``path`` with ``requests`` in flight: ``batches`` windows (with ``seconds``
    > 0: windows until that many seconds have passed) of ``per_batch`` requests each (0: about
    :data:`WINDOW_SECONDS`, judged by the warm-up); with ``plain_on``, the plain compile of
    ``plain_model`` on that device with ``plain_config`` served beside it, windows alternating.
    ``on_window(i, Window)`` is called after each of the plan's windows; with ``check_every`` > 0 the
    recorded seeded requests run through the plan again (between windows) every that many seconds,
    their largest relative error kept in ``checks``."""
    import openvino as ov

    loaded = load_plan(path, requests)
    runner = loaded.runner.start()
    n = runner.requests
    plan = loaded.plan
    try:
        passed, err, checked = check_outputs(loaded, tolerance)
        inputs = _inputs_for(loaded)
        for _ in range(max(warmup, 1)):
            plan_window(runner, inputs, max(n, 1))
        t0 = time.perf_counter()
        plan_window(runner, inputs, 4 * n)
        first = time.perf_counter() - t0
        if per_batch <= 0:
            per_batch = max(4 * n, int(WINDOW_SECONDS * 6 * n / max(first, 1e-9)))
        plain_run = None
        plain_cfg = {}
        if plain_on is not None:
            if not plain_model:
                raise InputError("serving a plan beside a plain compile needs the model it was planned from "
                                 f"({PLAN_FILE}: model)")
            model = ov.Core().read_model(plain_model)
            plain_cfg = {k: str(v) for k, v in (plain_config or {}).items()}
            compiled = loaded.core.compile_model(model, plain_on, plain_cfg)
            q = ov.AsyncInferQueue(compiled, n)
            for ireq in q:
                for i, a in enumerate(inputs):
                    ireq.set_input_tensor(i, ov.Tensor(a))
            stamps: list[float] = []
            q.set_callback(lambda _r, _d: stamps.append(time.perf_counter()))
            for _ in range(max(warmup, 1) * n):
                q.start_async()
            q.wait_all()
            plain_run = steady_window(q, n, per_batch, stamps)
        windows: list[Window] = []
        plain_rates: list[float] = []
        checks: list[float] = []
        start = time.perf_counter()
        last_check = start
        b = 0
        while (seconds > 0 and time.perf_counter() - start < seconds) or (seconds <= 0 and b < batches):
            pair = [lambda: windows.append(plan_window(runner, inputs, per_batch))]
            if plain_run is not None:
                pair.append(lambda: plain_rates.append(plain_run()))
            for fn in (pair if b % 2 == 0 else pair[::-1]):
                fn()
            if on_window is not None:
                on_window(b, windows[-1])
            if check_every > 0 and time.perf_counter() - last_check >= check_every:
                ok, worst, _ = check_outputs(loaded, tolerance)
                checks.append(worst)
                passed &= ok
                err = max(err, worst)
                last_check = time.perf_counter()
            b += 1
    except InputError:
        raise
    except RuntimeError as e:
        return PlanServed(what=str(plan_file(path)), shape=plan.shape, requests=n, per_batch=per_batch,
                          error=ov_message(e))
    finally:
        runner.close()
    return PlanServed(what=str(plan_file(path)), shape=plan.shape, requests=n, per_batch=per_batch,
                      rates=[w.rate for w in windows], p50=[w.p50 for w in windows], p99=[w.p99 for w in windows],
                      utilisation=[w.utilisation for w in windows], cpu=[w.cpu for w in windows],
                      load_seconds=loaded.seconds, checked=checked, check_error=err, check_passed=passed,
                      tolerance=tolerance, notes=loaded.notes, plain_on=plain_on or "", plain_config=plain_cfg,
                      plain_rates=plain_rates, plain_per_batch=per_batch if plain_run is not None else 0,
                      checks=checks)


# --------------------------------------------------------------------------- in a process of its own


def serve_in_subprocess(path, *, timeout: float = 3600.0, **kwargs) -> PlanServed:
    """:func:`serve_plan` in a process of its own (``python -m hdp.runtime.serve.plan_serve``), which
    dies with this one; a crash or a timeout is the result's ``error``, an InputError is raised."""
    req = json.dumps({"path": str(path), **kwargs}).encode()
    env = dict(os.environ, **{PARENT_ENV: str(os.getpid())})
    try:
        done = subprocess.run([sys.executable, "-m", "hdp.runtime.serve.plan_serve"], input=req, capture_output=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return PlanServed(what=str(path), shape="", requests=int(kwargs.get("requests") or 0), per_batch=0,
                          error=f"timed out after {timeout:g} s")
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return PlanServed(what=str(path), shape="", requests=int(kwargs.get("requests") or 0), per_batch=0,
                          error=f"the serving process died: {tail[0]}")
    out = json.loads(done.stdout.decode())
    if "input_error" in out:
        raise InputError(out["input_error"])
    return msgspec.convert(out, PlanServed)


def main() -> None:
    die_with_parent()
    args = json.loads(sys.stdin.buffer.read().decode())
    path = args.pop("path")
    try:
        res = serve_plan(path, **args)
        sys.stdout.write(json.dumps(msgspec.to_builtins(res)))
    except InputError as e:
        sys.stdout.write(json.dumps({"input_error": str(e)}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

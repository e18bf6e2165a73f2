"""Serving plans for the throughput objective, as placers see them: every shape searched
(:func:`hdp.placement.planner.plan_throughput`), named, compared and recorded.

``auto`` under ``--objective throughput`` asks :func:`search` for the best plan of each shape —
``single`` (one device with the streams that serve best), ``replicas`` (the whole model on several
devices), ``pipeline`` (stages of one replica and one stream each: a placement HETERO runs) and
``mixed`` — and keeps one (:mod:`hdp.placers.auto`). A placement chosen with a plan carries it in
its ``info`` (:func:`plan_info`: ``plan``, the plan as :meth:`~hdp.placement.plan.GroupPlan.to_text`,
with its shape, simulated period, bound and gap); its group devices are the plan's representative
placement (each stage on its first replica's device), which ``hdp compile`` checks like any
placement before it writes the plan (:mod:`hdp.runtime.serve.plan_write`).

The plan model's device words (stream efficiency, streams, shared compute and memory) come from the
target (:func:`hdp.target.streams.plan_devices`), with ``hdp calibrate``'s fitted stream efficiency
and dispatch cost when the objective carries them.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np

from hdp.base.errors import HdpError
from hdp.placement.objective import Throughput
from hdp.placement.plan import GroupPlan, PlanDevices
from hdp.placement.plan_search import Found
from hdp.placement.planner import PlanSearch, plan_throughput
from hdp.runtime.serve.plan_serve import serve_in_subprocess
from hdp.runtime.serve.plan_write import write_plan
from hdp.target.streams import plan_devices

#: Among plans simulated within this share of the fastest, the simplest is kept (fewer stages, then
#: fewer replicas, then fewer streams): a difference this small is below what a profile can rank.
PLAN_TIE = 0.01
SHAPE_ORDER = ("single", "replicas", "pipeline", "mixed")


def devices_of(ctx):
    """The plan model's devices of the problem (see the module docstring)."""
    p = ctx.problem
    ob = p.objective if isinstance(p.objective, Throughput) else Throughput()
    if ctx.target is None:
        return PlanDevices.independent(p.n_devices)
    return plan_devices(ctx.target, p.devices, fitted=dict(ob.streams), dispatch=ob.dispatch)


def search(ctx, time_limit: float = 60.0) -> PlanSearch:
    """Every shape for the problem's throughput objective within about ``time_limit`` seconds."""
    p = ctx.problem
    n = p.objective.requests if isinstance(p.objective, Throughput) else 2
    return plan_throughput(p, devices_of(ctx), n, time_limit=time_limit)


def complexity(plan: GroupPlan) -> tuple:
    return (plan.n_stages, sum(len(r) for r in plan.replicas), sum(x.streams for r in plan.replicas for x in r))


def ranked(s: PlanSearch) -> list[tuple[str, Found]]:
    """The best plan of each shape, fastest first (simulated)."""
    shapes = s.shapes()
    return sorted(((k, f) for k, f in shapes.items()), key=lambda kf: (kf[1].value, SHAPE_ORDER.index(kf[0])))


def kept(s: PlanSearch) -> tuple[Found, str]:
    """The plan kept on a simulated verdict, and why: the fastest, or the simplest within
    :data:`PLAN_TIE` of it."""
    rows = ranked(s)
    if not rows:
        return s.best, "no plan fits"
    low = rows[0][1].value
    near = [f for _, f in rows if f.value <= low * (1 + PLAN_TIE)]
    pick = min(near, key=lambda f: (complexity(f.plan), f.value))
    if pick is rows[0][1]:
        return pick, "it serves fastest of every shape"
    return pick, (f"the simplest within {PLAN_TIE:.0%} of the fastest ({rows[0][0]} "
                  f"{rows[0][1].plan.describe(s.pricer.problem.devices)} {1 / low:.1f}/s)")


def rate(f: Found) -> str:
    return f"{1 / f.value:.1f}/s" if f.value > 0 and math.isfinite(f.value) else "-"


def summary(s: PlanSearch) -> str:
    """One line: each shape's best plan and its simulated rate, the bound and gap."""
    dev = s.pricer.problem.devices
    parts = [f"{k} {f.plan.describe(dev)} {rate(f)}" for k, f in ranked(s)]
    b = s.best
    bound = (f"; bound {1 / b.bound:.1f}/s, gap {b.gap:.2%}" if b.plan is not None and b.bound > 0
             and math.isfinite(b.bound) else "")
    how = "proven within the plans searched" if b.exact else "not proven"
    return (f"plans (simulated requests/s with {s.pricer.requests} in flight): " + ", ".join(parts)
            + bound + f" ({how})")


def against_single(s: PlanSearch, f: Found) -> str:
    """``1.95x the best single device (GPU x2 505.0/s)``."""
    single = s.best_single
    if single is None or single.plan is None:
        return "no single device holds the model"
    dev = s.pricer.problem.devices
    return f"{single.value / f.value:.2f}x the best single device ({single.plan.describe(dev)} {rate(single)})"


def plan_info(s: PlanSearch, f: Found) -> dict:
    """What a placement chosen with plan ``f`` records (see the module docstring)."""
    pr = s.pricer
    price = pr.price(f.plan)
    return {"plan": f.plan.to_text(), "plan_shape": f.plan.shape, "plan_text": f.plan.describe(pr.problem.devices),
            "plan_period": f"{f.value:.6g}", "plan_latency": f"{price.latency:.6g}",
            "plan_bound": f"{min(s.best.bound, f.value):.6g}", "plan_exact": str(bool(s.best.exact)),
            "plan_bound_by": pr.bound_text(price, f.plan),
            "plan_gap": f"{max(f.value - s.best.bound, 0.0) / f.value:.6g}" if f.value > 0 else "0",
            "plan_shapes": "; ".join(f"{k}={f2.value:.6g}" for k, f2 in ranked(s))}


def representative(f: Found) -> np.ndarray:
    return np.asarray(f.plan.representative(), np.int16)


def from_placement(s: PlanSearch, group_device) -> Found:
    """A placement as a plan (one stage per device, one replica and one stream each), priced."""
    gp = GroupPlan.from_placement(group_device)
    return Found(gp, s.pricer.price(gp).period, s.best.bound, s.best.exact)


def serve_candidate(ctx, f: Found, plain: str, requests: int, batches: int, timeout: float):
    """Serve plan ``f`` beside ``plain``'s compile as the target configures it (one stream), windows
    alternating, in a process of its own: ``(ratio, low, high)`` of the plan's seconds per request
    over the plain compile's (95 % interval), or a string saying why it could not be served. The
    plan is written to a temporary directory first (compiled, exported and checked as ``hdp
    compile`` writes it)."""
    p = ctx.problem
    src = ctx.module.meta.get("source", "")
    with tempfile.TemporaryDirectory(prefix="hdp-plan-") as tmp:
        out = Path(tmp) / "plan"
        try:
            write_plan(ctx.module, out, ctx.target, requests=requests, plan=f.plan, anchor=p.structure.anchor,
                       devices=p.devices, method="auto", auto_check=False)
            served = serve_in_subprocess(out, timeout=timeout, requests=requests, batches=batches, plain_on=plain,
                                         plain_config={str(k): str(v) for k, v in ctx.target.device(plain).config.items()},
                                         plain_model=src, tolerance=1.0)
        except HdpError as e:
            return str(e)
    if not served.ok:
        return served.error
    c = served.versus()
    if c is None:
        return "no paired windows"
    return float(c.ratio), float(c.low), float(c.high)


def better_plan(s: PlanSearch, best: Found, group_device) -> str | None:
    """A line naming ``best`` when it is no pipeline and serves faster than the placement
    ``group_device`` as a plan by more than :data:`PLAN_TIE` (simulated); None otherwise."""
    if best.plan is None or best.plan.shape == "pipeline":
        return None
    mine = from_placement(s, group_device)
    if best.value >= mine.value * (1 - PLAN_TIE):
        return None
    dev = s.pricer.problem.devices
    return (f"the best serving plan, {best.plan.shape} {best.plan.describe(dev)} ({rate(best)} simulated), would "
            f"serve {mine.value / best.value:.2f}x this placement's rate ({mine.plan.describe(dev)} {rate(mine)}): a "
            f"placed .xml holds one placement; `hdp compile ... -o DIR` writes the plan (DIR/plan.json and its blobs)")


def kept_line(s: PlanSearch, f: Found, why: str, where: str) -> str:
    """``kept the replicas plan CPU+CPU_B (...simulated, 1.95x the best single device ...): why (where)``."""
    return (f"kept the {f.plan.shape} plan {f.plan.describe(s.pricer.problem.devices)} ({rate(f)} simulated, "
            f"{against_single(s, f)}): {why} ({where})")


def queue(s: PlanSearch | None, shapes: tuple[str, ...]) -> list[tuple[str, np.ndarray, Found]]:
    """The best plan of each of ``shapes`` (a single device only with several streams) as served
    candidates ``(name, representative placement, plan)``."""
    if s is None:
        return []
    best = s.shapes()
    out = []
    for shape in shapes:
        f = best.get(shape)
        if f is not None and not (shape == "single" and f.plan.replicas[0][0].streams == 1):
            out.append((f"plan:{shape} {f.plan.describe(s.pricer.problem.devices)}", representative(f), f))
    return out

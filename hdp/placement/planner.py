"""The serving planner for throughput: every shape searched, the best kept with its bound.

:func:`plan_throughput` runs the searches of :mod:`hdp.placement.plan_search` (each device alone
with its best streams, the whole model replicated, the best contiguous plan, the best pipeline) and,
where the walk could not prove its plan, the program of :mod:`hdp.placement.plan_milp` over the
same space, then a work bound; :class:`PlanSearch` holds the best of each shape and of all.

On several hosts (:func:`plan_across_hosts`) the searches above price every crossing alike, so they
run on views of the problem and every plan they find is priced again on the hosts (each crossing
by its link, each host's memory a cap, :class:`~hdp.placement.plan.PlanPricer`): each host that may
hold the model alone (its devices only, its memory folded into theirs), then all hosts with every
crossing between stages priced as the slowest link would (plans that cut where little crosses) and
as ``t_cost`` (plans that use every device), each with the hosts' memory folded into their
devices' caps three ways: all of it on the host's device that stores the model in the fewest bytes;
shared in proportion to its devices' own memory; each device up to the host's memory, repaired (a
plan that overfills a host is searched again with that host's devices capped at what the plan put
on them, scaled down to the host's memory, up to :data:`REPAIR_ROUNDS` times). The best plan so
priced is kept; it is not proven (the result's bound is 0 and ``exact`` False). A replica's inputs
and outputs are not priced across hosts (where requests come from is not part of the problem).
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field

import msgspec
import numpy as np

from hdp.placement.ideals import MAX_IDEALS
from hdp.placement.maxload import MaxLoad
from hdp.placement.memory import smallest_need
from hdp.placement.objective import Throughput
from hdp.placement.plan import PlanDevices, PlanPricer
from hdp.placement.plan_milp import milp_plan, work_bound
from hdp.placement.plan_search import (
    TOLERANCE,
    Found,
    contiguous_plan,
    plan_dag,
    plan_space,
    single_streams,
    whole_replicas,
)


@dataclass
class PlanSearch:
    """What :func:`plan_throughput` found: the best plan of all, the best of each family, the bound
    and how each search ended."""

    best: Found
    singles: dict[int, Found]  # device -> its best stream count alone
    replicas: Found  # the whole model on several devices
    pipeline: Found  # one replica with one stream per stage, two stages or more
    contiguous: Found  # the best contiguous plan (any options)
    pricer: PlanPricer
    info: dict = field(default_factory=dict)

    def shapes(self) -> dict[str, Found]:
        """The best plan found of each shape (those that exist)."""
        out: dict[str, Found] = {}
        for f in [*self.singles.values(), self.replicas, self.pipeline, self.contiguous, self.best]:
            if f.plan is None:
                continue
            sh = f.plan.shape
            if sh not in out or f.value < out[sh].value:
                out[sh] = f
        return out

    @property
    def best_single(self) -> Found | None:
        return min(self.singles.values(), key=lambda f: f.value, default=None)


def plan_throughput(problem, devices: PlanDevices, requests: int | None = None, *, time_limit: float = 60.0,
                    milp: bool | None = None, max_ideals: int = MAX_IDEALS, ml: MaxLoad | None = None,
                    tolerance: float = TOLERANCE) -> PlanSearch:
    """Every shape for the throughput objective (see the module docstring), within about
    ``time_limit`` seconds: the best stream count of each device alone, the whole model replicated,
    the best contiguous plan (the walk: a third of the time), the best pipeline (until half the
    time); with ``milp`` (default: when the walk was not exact) the program over the same space
    until 90 % of the time, asked to beat the best.
    The result's ``best`` holds the best plan, its bound (the contiguous search's, or HiGHS's) and
    gap; None as plan when no plan fits."""
    t0 = _time.monotonic()
    p = problem
    if requests is None:
        requests = p.objective.requests if isinstance(p.objective, Throughput) else 2
    if p.multi_host:
        return plan_across_hosts(p, devices, requests, time_limit=time_limit, max_ideals=max_ideals, ml=ml,
                                 tolerance=tolerance)
    pr = PlanPricer(p, devices, requests)
    space = plan_space(pr)
    dag = plan_dag(pr, ml)
    singles = single_streams(pr)
    reps = whole_replicas(pr)
    cont = contiguous_plan(pr, space, dag, max_ideals=max_ideals, deadline=t0 + 0.35 * time_limit, tolerance=tolerance)
    pipe = contiguous_plan(pr, space, dag, pipelines_only=True, min_slots=2, max_ideals=max_ideals,
                           deadline=t0 + 0.5 * time_limit, tolerance=tolerance)
    found = [f for f in [*singles.values(), reps, cont, pipe] if f.plan is not None and np.isfinite(f.value)]
    best = min(found, key=lambda f: (f.value, f.plan.n_stages, sum(len(r) for r in f.plan.replicas)), default=None)
    info = {"contiguous": cont.info, "pipeline": pipe.info, "replica_plans": reps.info.get("plans", 0),
            "options": int(space.opt_col.size), "slots": [len(s) for s in space.slots]}
    # a proven bound over the whole space: the contiguous one (whole-model replicas are enumerated)
    bound = min(cont.bound, reps.value) if cont.exact else 0.0
    exact = cont.exact
    if milp or (milp is None and not cont.exact):
        left = 0.9 * time_limit - (_time.monotonic() - t0)
        if left > 1.0:
            m = milp_plan(pr, space, dag, time_limit=left, below=best.value * (1 - 1e-9) if best else None)
            info["milp"] = m.info
            if m.plan is not None and m.value < (best.value if best else np.inf):
                best = m
            bound = max(bound, min(m.bound, reps.value))
            exact = exact or m.exact
    if not exact:
        wb = work_bound(pr)
        if wb > bound:
            bound = wb
            info["bound"] = "the work over every resource's streams (an LP), the search proved none better"
    if best is None:
        best = Found(None, np.inf, np.inf, exact, {})
    else:
        best = Found(best.plan, best.value, min(bound, best.value), exact, best.info)
    info["seconds"] = _time.monotonic() - t0
    return PlanSearch(best, singles, reps, pipe, cont, pr, info)


def _host_views(p) -> list[tuple[str, object]]:
    """The views of a problem on several hosts the searches run on (see the module docstring):
    ``(what, problem of one host)``, each with ``hosts`` None."""
    h = p.hosts
    caps = np.asarray(p.caps, np.float64)
    nb = np.asarray(p.structure.t_bytes, np.float64)
    views = []
    least = smallest_need(p)
    for i, name in enumerate(h.names):  # each host alone, when it may hold the model
        on = h.devices_of(i)
        if min(float(h.capacity[i]), float(caps[on].sum())) < least:
            continue
        keep = np.zeros(p.n_devices, bool)
        keep[on] = True
        allowed = p.allowed & keep[None, :]
        if not allowed.any(axis=1).all():
            continue
        cap = np.where(keep, np.minimum(caps, h.capacity[i]), caps)
        q = msgspec.structs.replace(p, allowed=allowed, time=np.where(allowed, p.time, np.inf), hosts=None)
        views.append((f"host {name} alone", q.with_capacity(cap)))
    lat, inv = h.pair_terms()
    cross = h.cross()
    worst_lat = float(lat[cross].max()) if cross.any() else 0.0
    worst_inv = float(inv[cross].max()) if cross.any() else 0.0
    slow = np.maximum(np.asarray(p.t_cost, np.float64), worst_lat + nb * worst_inv)
    loose, shared = caps.copy(), caps.copy()
    for i in range(h.n_hosts):
        on = h.devices_of(i)
        hc = float(h.capacity[i])
        if not np.isfinite(hc):
            continue
        loose[on] = np.minimum(caps[on], hc)
        own = np.where(np.isfinite(caps[on]), caps[on], hc)
        shared[on] = np.minimum(caps[on], hc * own / own.sum())
    fixed = p.memory_terms()[0]
    bytes_on = np.where(np.isfinite(fixed), fixed, 0.0).sum(axis=0) + np.where(p.allowed.all(axis=0), 0.0, np.inf)
    cheapest = caps.copy()
    for i in range(h.n_hosts):
        on = h.devices_of(i)
        hc = float(h.capacity[i])
        if np.isfinite(hc):
            best = on[int(np.argmin(bytes_on[on]))]
            cheapest[on] = 0.0
            cheapest[best] = min(caps[best], hc)
    folds = {"the host's memory on its device that stores the model in the fewest bytes": cheapest, LOOSE: loose,
             "the host's memory shared by its devices": shared}
    for cost_what, t_cost in (("crossings at the slowest link", slow), ("crossings at t_cost", p.t_cost)):
        t_cost = np.array(t_cost, np.float64)
        t_cost.setflags(write=False)
        for fold_what, cap in folds.items():
            q = msgspec.structs.replace(p, t_cost=t_cost, hosts=None).with_capacity(cap)
            views.append((f"all hosts, {fold_what}, {cost_what}", q))
    return views


#: The fold of the hosts' memory into their devices' that the repair rounds start from.
LOOSE = "each device up to its host's memory"
#: Rounds of the repair: a plan overfilling a host is searched again with that host's devices capped
#: at what the plan put on them, scaled down to the host's memory.
REPAIR_ROUNDS = 4


def plan_across_hosts(problem, devices: PlanDevices, requests: int, *, time_limit: float = 60.0,
                      max_ideals: int = MAX_IDEALS, ml: MaxLoad | None = None,
                      tolerance: float = TOLERANCE) -> PlanSearch:
    """:func:`plan_throughput` on a problem of several hosts (see the module docstring)."""
    t0 = _time.monotonic()
    p = problem
    pr = PlanPricer(p, devices, requests)
    singles = single_streams(pr)
    reps = whole_replicas(pr)
    views = _host_views(p)
    per = max(time_limit * 0.9 / max(len(views), 1), 0.5)
    found: dict[bytes, Found] = {}
    tried = []

    def consider(f: Found, what: str) -> None:
        if f.plan is None or not pr.allowed(f.plan):
            return
        price = pr.price(f.plan)
        if not price.feasible or not np.isfinite(price.period):
            return
        key = repr(f.plan.key()).encode()
        if key not in found or price.period < found[key].value:
            found[key] = Found(f.plan, price.period, 0.0, False, {"view": what})

    for f in [*singles.values(), reps]:
        consider(f, "whole model")
    for what, q in views:
        for round_ in range(REPAIR_ROUNDS + 1 if LOOSE in what else 1):
            sub = plan_throughput(q, devices, requests, time_limit=per, milp=False, max_ideals=max_ideals,
                                  tolerance=tolerance)
            label = what if not round_ else f"{what}, repaired {round_}x"
            tried.append(label)
            subs = [f for f in [*sub.singles.values(), sub.replicas, sub.pipeline, sub.contiguous, sub.best]
                    if f.plan is not None and np.isfinite(f.value)]
            for f in subs:
                consider(f, label)
            over = [(pr.price(f.plan), f) for f in subs if pr.allowed(f.plan)]
            over = [(pp, f) for pp, f in over if not pp.feasible]
            if not over:
                break
            pp, _ = min(over, key=lambda x: x[0].period)
            cap = np.array(q.caps, np.float64)
            h = p.hosts
            for i in range(h.n_hosts):  # each overfilled host's devices down to their share of its memory
                on = h.devices_of(i)
                used = float(pp.memory[on].sum())
                if used > float(h.capacity[i]):
                    cap[on] = np.minimum(cap[on], pp.memory[on] * float(h.capacity[i]) / used * 0.98)
            q = q.with_capacity(cap)
    plans = sorted(found.values(), key=lambda f: (f.value, f.plan.n_stages, sum(len(r) for r in f.plan.replicas)))
    best = plans[0] if plans else Found(None, np.inf, np.inf, False, {})
    pipes = [f for f in plans if f.plan.n_stages >= 2 and f.plan.shape == "pipeline"]
    conts = [f for f in plans if f.plan.n_stages >= 2]
    none = Found(None, np.inf, 0.0, False, {})
    info = {"hosts": len(p.hosts.names), "views": tried, "plans": len(plans), "seconds": _time.monotonic() - t0,
            "bound": "none: plans across hosts are searched on views of the problem and priced on the hosts"}
    return PlanSearch(best, singles, reps, pipes[0] if pipes else none, conts[0] if conts else none, pr, info)

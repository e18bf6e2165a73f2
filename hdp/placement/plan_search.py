"""Searching serving plans for throughput (the plans and their price are :mod:`hdp.placement.plan`'s).

The space: contiguous plans (a chain of ideals of the groups' DAG, :mod:`hdp.placement.ideals`; every
plan whose stages form an acyclic graph is one, its stages listed in a topological order), each
stage on ``r`` interchangeable compute *slots* of one class with ``S`` streams each (a slot is a
compute resource: a device, or the devices of a ``[[shares]]`` compute group, of which the stage
takes the one that serves it best; no slot holds two stages), plus the whole model replicated on
any set of devices (of any kinds, each with its own streams). Searches:

- :func:`contiguous_plan` — exact over the contiguous plans: the ideals walk with a replica count
  and streams per stage (Piper's recurrence, Tarnawski et al., NeurIPS 2021:
  :func:`~hdp.placement._plan_kernels.plan_ideal_dp`) finds the least bottleneck; the latency term
  (a request's latency over the ``N`` in flight, not a maximum over stages) is then met by
  bisection on the bottleneck allowed: for each ``P`` the walk finds the least latency among plans
  whose stages all keep ``P``, and ``max(P, latency / N)`` brackets the optimum from both sides
  (the bracket is the proven bound). When the DAG has too many ideals it searches the chains of one
  topological order instead (a heuristic: every prefix of that order is an ideal).
- :func:`whole_replicas` — every set of devices that hold the whole model, each with the streams
  that serve best (enumerated).
- :func:`hdp.placement.plan_milp.milp_plan` — the same contiguous space as a mixed-integer program (HiGHS through
  ``scipy.optimize.milp``, as hdp's other programs): a position per stage, each choosing an option
  (column, integer replica count, streams) one-hot, the period ``T >= L_k / (r sp(S)) + dispatch``
  linearised per option with big-M rows, the latency ``Σ_k λ_k <= N T``, copies, replicated chains
  and memory per position, nodes ordered by position along every edge; HiGHS's dual bound certifies
  a plan the walk could not prove.
- :func:`hdp.placement.planner.plan_throughput` — all of these: the best plan, the best of each
  shape, the bound and gap.
"""

from __future__ import annotations

import itertools
import time as _time
from dataclasses import dataclass, field

import numpy as np

from hdp.placement import _maxload_kernels as MK
from hdp.placement import _plan_kernels as K
from hdp.placement.ideals import MAX_IDEALS, PipelineDag, pipeline_dag
from hdp.placement.maxload import MaxLoad
from hdp.placement.plan import MAX_STREAMS, GroupPlan, PlanPricer, Replica, speedup

#: Ideal pairs one walk visits at most before it stops with what it has.
MAX_VISITS = 200_000_000
#: Ideal pairs of the first walk under a deadline, which measures how fast the host walks.
PROBE_VISITS = 2_000_000
#: Bisection on the bottleneck stops when its bracket is this narrow (relative).
TOLERANCE = 1e-4
#: ... or after this many walks.
MAX_STEPS = 48


# --------------------------------------------------------------------------- the space


@dataclass
class PlanSpace:
    """The slots, their classes, the price columns and the options of one problem (see the module
    docstring). ``slots[i]``: its devices; ``cls_slots[c]``: the slots of class ``c``; ``cols``: a
    device per column with its class; options as parallel arrays."""

    slots: list[list[int]]
    cls_slots: list[list[int]]
    col_device: np.ndarray  # int64 per column
    col_class: np.ndarray  # int64 per column
    opt_col: np.ndarray
    opt_r: np.ndarray
    opt_s: np.ndarray
    opt_mult: np.ndarray
    opt_lat: np.ndarray
    opt_delta: np.ndarray

    @property
    def size_cls(self) -> np.ndarray:
        return np.array([len(c) for c in self.cls_slots], np.int64)

    def only(self, keep: np.ndarray) -> "PlanSpace":
        """The same space with the options ``keep`` (bool) alone."""
        return PlanSpace(self.slots, self.cls_slots, self.col_device, self.col_class, self.opt_col[keep],
                         self.opt_r[keep], self.opt_s[keep], self.opt_mult[keep], self.opt_lat[keep],
                         self.opt_delta[keep])


def _slot_key(pr: PlanPricer, d: int) -> bytes:
    p, devs = pr.problem, pr.devs
    parts = [p.allowed[:, d].tobytes(), np.where(p.allowed[:, d], p.time[:, d], 0).tobytes(),
             pr.r_time[:, d].tobytes() if pr.r_time.size else b"", pr.m_fixed[:, d].tobytes(),
             pr.m_units[:, d].tobytes() if pr.m_units.size else b"", np.float64(pr.m_over[d]).tobytes(),
             np.float64(pr.caps[d]).tobytes(), np.float64(devs.efficiency[d]).tobytes(),
             np.int64(devs.max_streams[d]).tobytes(), bytes([bool(pr.free[d])])]
    return b"|".join(parts)


def plan_space(pr: PlanPricer, max_streams: int = MAX_STREAMS) -> PlanSpace:
    """The slots (compute resources), their classes of interchangeable ones, the columns and options
    of the problem priced by ``pr``: per column, every replica count its class allows (a shared
    slot: one) and every stream count up to the requests in flight, the device's limit and
    ``max_streams``."""
    devs = pr.devs
    slots = devs.compute_groups()
    classes: dict[bytes, list[int]] = {}
    cls_slots: list[list[int]] = []
    for i, sl in enumerate(slots):
        if len(sl) == 1:
            key = _slot_key(pr, sl[0])
            if key in classes:
                cls_slots[classes[key][0]].append(i)
                continue
            classes[key] = [len(cls_slots)]
        cls_slots.append([i])
    col_device, col_class = [], []
    for c, members in enumerate(cls_slots):
        for d in slots[members[0]]:
            col_device.append(d)
            col_class.append(c)
    opts = []
    for col, (d, c) in enumerate(zip(col_device, col_class)):
        rmax = len(cls_slots[c]) if len(slots[cls_slots[c][0]]) == 1 else 1
        smax = int(max(1, min(pr.requests, devs.max_streams[d], max_streams)))
        for r in range(1, rmax + 1):
            for s in range(1, smax + 1):
                sp = speedup(devs.efficiency[d], s)
                opts.append((col, r, s, r * sp, s / sp, devs.dispatch if r > 1 else 0.0))
    a = np.array(opts, np.float64).reshape(-1, 6)
    return PlanSpace(slots, cls_slots, np.array(col_device, np.int64), np.array(col_class, np.int64),
                     a[:, 0].astype(np.int64), a[:, 1].astype(np.int64), a[:, 2].astype(np.int64),
                     np.ascontiguousarray(a[:, 3]), np.ascontiguousarray(a[:, 4]), np.ascontiguousarray(a[:, 5]))


def _csr(n: int, keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(keys, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(keys, minlength=n), out=ptr[1:])
    return ptr, np.ascontiguousarray(values[order], np.int64)


class KernelArrays:
    """The problem as the plan kernel's arrays, for the columns of ``space``."""

    def __init__(self, pr: PlanPricer, space: PlanSpace):
        p = pr.problem
        st = p.structure
        cols = space.col_device
        k = p.n_groups
        self.time_col = np.ascontiguousarray(np.where(p.allowed, p.time, np.inf)[:, cols])
        fits = pr.m_fixed[:, cols] + pr.m_act[:, None] + pr.m_over[cols][None, :] <= pr.caps[cols][None, :]
        self.time_col = np.ascontiguousarray(np.where(fits, self.time_col, np.inf))
        self.gr_ptr, self.gr_unit = _csr(k, pr.r_groups, pr.r_unit)
        self.r_col = np.ascontiguousarray(pr.r_time[:, cols] if pr.r_time.size else np.zeros((0, cols.size)))
        self.t_prod = st.t_prod.astype(np.int64)
        self.t_ptr = st.t_ptr.astype(np.int64)
        self.t_cons = st.t_cons.astype(np.int64)
        self.t_cost = np.ascontiguousarray(p.t_cost, np.float64)
        per = np.repeat(np.arange(st.n_tensors, dtype=np.int64), np.diff(self.t_ptr))
        g = np.concatenate([self.t_prod, self.t_cons])
        t = np.concatenate([np.arange(st.n_tensors, dtype=np.int64), per])
        self.g_ptr, self.g_tens = _csr(k, g, t)
        self.paid_col = np.ascontiguousarray(~pr.free[cols])
        self.fix_col = np.ascontiguousarray(pr.m_fixed[:, cols])
        self.gm_ptr, self.gm_unit = _csr(k, pr.u_groups, pr.u_unit)
        self.mu_col = np.ascontiguousarray(pr.m_units[:, cols] if pr.m_units.size else np.zeros((0, cols.size)))
        self.over_col = np.ascontiguousarray(pr.m_over[cols], np.float64)
        self.act = np.ascontiguousarray(pr.m_act, np.float64)
        self.state = np.ascontiguousarray(pr.m_state, np.float64)
        self.cap_col = np.ascontiguousarray(pr.caps[cols], np.float64)


# --------------------------------------------------------------------------- contiguous plans


@dataclass
class Found:
    """A plan and what is known of it: its period (priced), a proven lower bound on the best plan of
    the space searched, whether the search was exact, and how it went."""

    plan: GroupPlan | None
    value: float
    bound: float
    exact: bool
    info: dict = field(default_factory=dict)

    @property
    def gap(self) -> float:
        if self.plan is None or not np.isfinite(self.value) or self.value <= 0:
            return float("nan")
        return max(self.value - self.bound, 0.0) / self.value


def plan_dag(pr: PlanPricer, ml: MaxLoad | None = None) -> PipelineDag:
    """The DAG whose ideals the plans chain (:func:`hdp.placement.ideals.pipeline_dag`; ``ml`` for a
    cost graph's backward ops, else the problem's bytes and caps)."""
    p = pr.problem
    if ml is None:
        gbytes = np.where(p.allowed, pr.m_fixed, np.inf).min(axis=1)
        ml = MaxLoad(np.where(np.isfinite(gbytes), gbytes, 0.0), np.asarray(pr.caps, np.float64), pr.free.copy())
    return pipeline_dag(p, ml)


def chain_dag(n_groups: int, order: np.ndarray | None = None) -> PipelineDag:
    """A DAG whose ideals are the prefixes of ``order`` (a topological order of the groups; default
    theirs): its chains of ideals are the pipelines of that order."""
    order = np.arange(n_groups, dtype=np.int64) if order is None else np.asarray(order, np.int64)
    node_of = np.empty(n_groups, np.int64)
    node_of[order] = np.arange(n_groups)
    ptr = np.zeros(n_groups + 1, np.int64)
    ptr[2:] = np.arange(1, n_groups)
    return PipelineDag(node_of, ptr, np.arange(max(n_groups - 1, 0), dtype=np.int64), {"chain": n_groups})


class _Walk:
    """The ideals of a DAG and the kernel arrays, made once for several walks."""

    def __init__(self, pr: PlanPricer, space: PlanSpace, dag: PipelineDag, max_ideals: int = MAX_IDEALS):
        self.pr, self.space, self.dag = pr, space, dag
        n = dag.n_nodes
        keys = np.random.default_rng(0x91a4).integers(1, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
        count = -1
        for cap in sorted({min(4096, max_ideals), min(65536, max_ideals), max_ideals}):
            bits, tptr, tnode, tchild, count = MK.ml_ideals(n, dag.pred_ptr, dag.pred_idx, keys, cap)
            if count >= 0:
                break
        self.count = int(count)
        self.bits, self.tptr, self.tnode, self.tchild = bits, tptr, tnode, tchild
        self.order = np.argsort(dag.node_of, kind="stable").astype(np.int64)
        self.node_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(dag.node_of, minlength=n), out=self.node_ptr[1:])
        self.a = KernelArrays(pr, space)
        self.visits = 0

    @property
    def ok(self) -> bool:
        return self.count >= 0

    def run(self, space: PlanSpace, mode: int, bound: float, min_slots: int = 1, max_visits: int = MAX_VISITS,
            sum_bound: float = np.inf):
        a, pr = self.a, self.pr
        dp, back_j, back_o, visits, complete = K.plan_ideal_dp(
            self.tptr, self.tnode, self.tchild, self.node_ptr, self.order, space.col_class, space.size_cls,
            a.time_col, a.gr_ptr, a.gr_unit, a.r_col, a.t_prod, a.t_ptr, a.t_cost, a.g_ptr, a.g_tens, a.paid_col,
            pr.receive, pr.send, pr.served_overhead, a.fix_col, a.gm_ptr, a.gm_unit, a.mu_col, a.over_col, a.act,
            a.state, a.cap_col, space.opt_col, space.opt_r, space.opt_s, space.opt_mult, space.opt_lat,
            space.opt_delta, int(mode), float(bound), float(sum_bound), int(min_slots), int(max_visits))
        self.visits += int(visits)
        return dp, back_j, back_o, bool(complete)

    def run_until(self, space: PlanSpace, mode: int, bound: float, min_slots: int, deadline: float | None,
                  sum_bound: float = np.inf):
        """:meth:`run` within ``deadline``: a first walk of :data:`PROBE_VISITS` pairs measures how
        fast this host walks; if it did not finish, one more walk gets the pairs the time left allows."""
        if deadline is None:
            return self.run(space, mode, bound, min_slots, MAX_VISITS, sum_bound)
        t0 = _time.monotonic()
        got = self.run(space, mode, bound, min_slots, PROBE_VISITS, sum_bound)
        if got[3]:
            return got
        rate = PROBE_VISITS / max(_time.monotonic() - t0, 1e-3)
        left = deadline - _time.monotonic()
        if left <= 0:
            return got
        return self.run(space, mode, bound, min_slots, int(min(MAX_VISITS, rate * left)), sum_bound)

    def plan(self, space: PlanSpace, dp, back_j, back_o, min_slots: int = 1) -> GroupPlan | None:
        """The chain ending in the best full state using ``min_slots`` slots or more, as a plan."""
        full = self.count - 1
        size = space.size_cls
        stride = np.cumprod(np.concatenate([[1], size[:-1] + 1])).astype(np.int64)
        states = np.arange(dp.shape[0])
        slots_used = sum((states // stride[c]) % (size[c] + 1) for c in range(size.size))
        cand = np.where(slots_used >= min_slots, dp[:, full], np.inf)
        s = int(np.argmin(cand))
        if not np.isfinite(cand[s]):
            return None
        n = self.dag.n_nodes
        k = self.pr.problem.n_groups
        stage_of = np.full(k, -1, np.int64)
        blocks = []
        i = full
        while i != 0:
            j, o = int(back_j[s, i]), int(back_o[s, i])
            diff = self.bits[i] & ~self.bits[j]
            members = np.flatnonzero(np.unpackbits(diff.view(np.uint8), bitorder="little")[:n])
            groups = np.concatenate([self.order[self.node_ptr[v]:self.node_ptr[v + 1]] for v in members])
            blocks.append((groups, o))
            c = int(space.col_class[space.opt_col[o]])
            s -= int(space.opt_r[o]) * int(stride[c])
            i = j
        blocks.reverse()
        next_slot = [0] * len(space.cls_slots)
        reps = []
        for b, (groups, o) in enumerate(blocks):
            stage_of[groups] = b
            col = int(space.opt_col[o])
            c = int(space.col_class[col])
            chosen = space.col_device[col]
            rr = []
            for _ in range(int(space.opt_r[o])):
                slot = space.slots[space.cls_slots[c][next_slot[c]]]
                next_slot[c] += 1
                # a class of one-device slots: the slot's device; a shared slot: the device chosen
                dev = slot[0] if len(slot) == 1 else int(chosen)
                rr.append(Replica(int(dev), int(space.opt_s[o])))
            reps.append(tuple(rr))
        return GroupPlan(stage_of, tuple(reps))


def _best_of(walk: _Walk, space: PlanSpace, min_slots: int, deadline: float | None, start: GroupPlan | None = None,
             tolerance: float = TOLERANCE) -> Found:
    """The least ``max(bottleneck, latency / N)`` over the walk's chains using ``min_slots`` slots
    or more (see the module docstring): the least bottleneck ``P0`` first (no plan goes below it),
    then bisection on the bottleneck allowed, ``P``: where the least latency of the plans keeping
    ``P`` exceeds ``N P``, every plan is slower than ``P`` (the bound rises to ``P``); else the plan
    found serves within ``P``. ``start``: a plan of the walk's space (its bottleneck prunes the
    first walk, its latency the later ones)."""
    pr = walk.pr
    n = max(pr.requests, 1)
    full = walk.count - 1
    info: dict = {"walks": 1}

    def value(plan):
        pp = pr.price(plan)
        return pp.period if pp.feasible else np.inf

    p_start = float(pr.price(start).stage_period.max()) if start is not None else np.inf
    dp, bj, bo, exact = walk.run_until(space, 0, p_start * (1 + 1e-9) + 1e-300, min_slots, deadline)
    plan = walk.plan(space, dp, bj, bo, min_slots)
    if plan is None and start is not None and exact:  # nothing below the start's bottleneck: it is the least
        plan = start
    if plan is None:
        return Found(None, np.inf, np.inf, exact, info)
    states = np.arange(dp.shape[0])
    size = space.size_cls
    stride = np.cumprod(np.concatenate([[1], size[:-1] + 1])).astype(np.int64)
    enough = sum((states // stride[c]) % (size[c] + 1) for c in range(size.size)) >= min_slots
    lo = float(np.where(enough, dp[:, full], np.inf).min())
    if not np.isfinite(lo):
        lo = float(pr.price(plan).stage_period.max())
    if not exact:
        lo = 0.0  # the walk stopped early: its least is no bound
    best_plan, best = plan, value(plan)
    if start is not None and value(start) < best:
        best_plan, best = start, value(start)
    steps = 0
    while exact and best > lo * (1 + tolerance) and steps < MAX_STEPS:
        if deadline is not None and _time.monotonic() > deadline:
            exact = False
            info["stopped"] = "time"
            break
        hi = best if np.isfinite(best) else 2 * lo + 1e-12
        mid = 0.5 * (lo + hi)
        bp = pr.price(best_plan)
        known = bp.latency if float(bp.stage_period.max()) <= mid else np.inf
        dp, bj, bo, done = walk.run_until(space, 1, mid, min_slots, deadline, known * (1 + 1e-9) + 1e-300)
        steps += 1
        if not done:
            exact = False
            info["stopped"] = "visits"
            break
        cand = walk.plan(space, dp, bj, bo, min_slots)
        if cand is None:
            if known < np.inf:  # none below the best plan's latency: the best plan is the least here
                cand = best_plan
            else:  # no chain keeps every stage within mid
                lo = mid
                continue
        v = value(cand)
        if v < best:
            best, best_plan = v, cand
        if not np.isfinite(v):  # a shared memory (not in the walk) overfilled: no proof either way
            exact = False
            info["stopped"] = "a shared memory overfilled"
            break
        lat = pr.price(cand).latency / n
        if lat > mid * (1 + 1e-12):
            lo = mid
    info["walks"] += steps
    info["bracket"] = (lo, best)
    return Found(best_plan, best, min(lo, best), exact, info)


def contiguous_plan(pr: PlanPricer, space: PlanSpace | None = None, dag: PipelineDag | None = None, *,
                    pipelines_only: bool = False, min_slots: int = 1, max_ideals: int = MAX_IDEALS,
                    deadline: float | None = None, tolerance: float = TOLERANCE) -> Found:
    """The best contiguous plan (see the module docstring); ``pipelines_only``: one replica with one
    stream per stage; ``min_slots``: plans using at least that many slots (2 with
    ``pipelines_only``: split plans). The chains of the groups' own topological order are searched
    first (a plan, cheap: every prefix of that order is an ideal) and prune the search over every
    ideal, which is exact when the DAG has at most ``max_ideals`` ideals and no walk ran out of time
    (``deadline``); the bisection stops within ``tolerance`` (relative)."""
    t0 = _time.perf_counter()
    space = space or plan_space(pr)
    if pipelines_only:
        space = space.only((space.opt_r == 1) & (space.opt_s == 1))
    dag = dag or plan_dag(pr)
    chain = _Walk(pr, space, chain_dag(pr.problem.n_groups))
    first = _best_of(chain, space, min_slots, deadline, tolerance=tolerance)
    walk = _Walk(pr, space, dag, max_ideals)
    if walk.ok:
        found = _best_of(walk, space, min_slots, deadline, first.plan, tolerance)
        how = "ideals"
        if found.plan is None or (first.plan is not None and first.value < found.value):
            found = Found(first.plan, first.value, found.bound if found.exact else 0.0, found.exact and
                          first.plan is not None and first.value <= found.value, found.info)
    else:
        found, how = first, "chains of one order"
        found.exact, found.bound = False, 0.0
    found.info.update(search=how, ideals=walk.count if walk.ok else "too many", nodes=dag.n_nodes,
                      pairs=walk.visits + chain.visits, seconds=_time.perf_counter() - t0)
    return found


# --------------------------------------------------------------------------- whole-model replicas


def whole_replicas(pr: PlanPricer, max_streams: int = MAX_STREAMS, min_devices: int = 2) -> Found:
    """The best plan of one stage on ``min_devices`` or more devices, each holding the whole model
    with its own streams (every set of such devices and stream counts, enumerated)."""
    p = pr.problem
    k = p.n_groups
    stage = np.zeros(k, np.int64)
    L = pr.stage_loads(stage, 1)
    whole = [d for d in range(p.n_devices) if p.allowed[:, d].all() and np.isfinite(L[0, d])]
    best, best_v = None, np.inf
    tried = 0
    for m in range(min_devices, len(whole) + 1):
        for sub in itertools.combinations(whole, m):
            ranges = [range(1, int(max(1, min(pr.requests, pr.devs.max_streams[d], max_streams))) + 1) for d in sub]
            for streams in itertools.product(*ranges):
                plan = GroupPlan(stage, (tuple(Replica(d, s) for d, s in zip(sub, streams)),))
                pr_ = pr.price(plan, L)
                tried += 1
                if pr_.feasible and pr_.period < best_v:
                    best, best_v = plan, pr_.period
    return Found(best, best_v, best_v, True, {"plans": tried})


def single_streams(pr: PlanPricer, max_streams: int = MAX_STREAMS) -> dict[int, Found]:
    """Per device that holds the whole model: its best stream count alone."""
    p = pr.problem
    stage = np.zeros(p.n_groups, np.int64)
    L = pr.stage_loads(stage, 1)
    out = {}
    for d in range(p.n_devices):
        if not (p.allowed[:, d].all() and np.isfinite(L[0, d])):
            continue
        best, best_v = None, np.inf
        for s in range(1, int(max(1, min(pr.requests, pr.devs.max_streams[d], max_streams))) + 1):
            plan = GroupPlan.single(p.n_groups, d, s)
            pp = pr.price(plan, L)
            if pp.feasible and pp.period < best_v * (1 - 1e-12):
                best, best_v = plan, pp.period
        if best is not None:
            out[d] = Found(best, best_v, best_v, True)
    return out

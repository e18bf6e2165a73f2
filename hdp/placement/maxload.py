"""Throughput as the largest per-device load, with a per-device memory cap: pricing and the exact
placer (a MILP over the tie groups, HiGHS through scipy).

The load of device ``d`` under a placement (time per request at steady state when requests are
pipelined across the devices, no overlap of compute and transfers on one device)::

    load[d] = Σ_(g on d) time[g, d]                      (compute; replicated units once per device)
            + Σ_(tensor t produced on d, read on some other device) t_cost[t]      (the sender)
            + Σ_(tensor t read on d, produced elsewhere) t_cost[t]             (each receiving device once)

A device flagged ``free_comm`` pays no transfer terms (the host CPU of Tarnawski et al.,
msr-fiddle/dnn-partitioning, whose scoring rule this is). ``memory[d] = Σ_(g on d) bytes[g]``
must stay within ``capacity[d]``. The objective is ``max_d load[d]``.

:func:`solve` is exact up to HiGHS's gap: binary ``x[g, d]``; continuous ``send[t, d] >= x[p, d] -
x[q, d]`` and ``recv[t, d] >= x[q, d] - x[p, d]`` for every consumer group ``q`` of tensor ``t``
(producer group ``p``) and non-free device ``d``; ``L >= load[d]``; the knapsack per capped device.
Identical devices (the same allowed column, times, cap and ``free_comm``) are interchangeable; the
model breaks that symmetry by ordering them by their first group (device ``j`` of a class may run
group ``g`` only if device ``j-1`` runs a group before ``g``), through prefix-count variables so the
constraint matrix stays linear in size.

The heuristics that find good placements fast, and :func:`hdp.placement.maxload_search.optimize`
that runs them and then :func:`solve`, are in :mod:`hdp.placement.maxload_search`.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field

import numpy as np

from hdp.base.errors import InputError
from hdp.base.within import milp_within

#: The exact placer asks for placements this share below the best one known.
CUTOFF = 1e-7


@dataclass(frozen=True)
class MaxLoad:
    """The data of the objective beside the problem: per-group bytes, per-device caps and
    ``free_comm`` flags (see the module docstring), and which ops are a training graph's backward
    ops (None: none; only the order of the contiguous splits reads it, :mod:`hdp.placement.ideals`)."""

    group_bytes: np.ndarray  # float64 per group
    capacity: np.ndarray  # float64 per device, inf = no cap
    free_comm: np.ndarray  # bool per device
    backward: np.ndarray | None = None  # bool per op


def group_bytes(problem, module) -> np.ndarray:
    """Σ ``Op.weight_bytes`` of each group's member ops (a cost graph's per-op bytes)."""
    st = problem.structure
    wb = np.array([op.weight_bytes for op in module.graph.ops], np.float64)
    out = np.zeros(problem.n_groups)
    pl = st.group_of >= 0
    np.add.at(out, st.group_of[pl], wb[pl])
    return out


def loads(problem, ml: MaxLoad, gd) -> tuple[np.ndarray, np.ndarray]:
    """(load per device, memory per device) of a device per group."""
    st = problem.structure
    gd = np.asarray(gd, np.int64)
    nd = problem.n_devices
    k = problem.n_groups
    load = np.zeros(nd)
    np.add.at(load, gd, problem.time[np.arange(k), gd])
    if problem.r_time.shape[0]:
        units = np.repeat(np.arange(problem.r_time.shape[0]), np.diff(problem.r_ptr))
        ud = np.unique(units * nd + gd[problem.r_groups])
        np.add.at(load, ud % nd, problem.r_time[ud // nd, ud % nd])
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    home = gd[st.t_prod]
    cd = gd[st.t_cons]
    cross = cd != home[per]
    recv = np.unique(per[cross] * nd + cd[cross])
    comm = np.zeros(nd)
    np.add.at(comm, recv % nd, problem.t_cost[recv // nd])
    sent = np.unique(per[cross])
    np.add.at(comm, home[sent], problem.t_cost[sent])
    load += np.where(ml.free_comm, 0.0, comm)
    mem = np.bincount(gd, weights=ml.group_bytes, minlength=nd)
    return load, mem


def max_load(problem, ml: MaxLoad, gd) -> float:
    return float(loads(problem, ml, gd)[0].max()) if problem.n_groups else 0.0


def feasible(problem, ml: MaxLoad, gd) -> bool:
    """Every group allowed where it is and every device within its cap."""
    gd = np.asarray(gd, np.int64)
    _, mem = loads(problem, ml, gd)
    return bool(problem.allowed[np.arange(problem.n_groups), gd].all() and (mem <= ml.capacity * (1 + 1e-12)).all())


def symmetry_classes(problem, ml: MaxLoad) -> list[list[int]]:
    """Classes (of 2 or more) of interchangeable devices, in device order."""
    seen: dict[bytes, list[int]] = {}
    for d in range(problem.n_devices):
        key = (problem.allowed[:, d].tobytes() + np.where(problem.allowed[:, d], problem.time[:, d], 0).tobytes()
               + (problem.r_time[:, d].tobytes() if problem.r_time.shape[0] else b"")
               + np.float64(ml.capacity[d]).tobytes() + bytes([bool(ml.free_comm[d])]))
        seen.setdefault(key, []).append(d)
    return [c for c in seen.values() if len(c) > 1]


def device_classes(problem, ml: MaxLoad) -> list[list[int]]:
    """Every device in a class of interchangeable ones (singletons included), in device order."""
    sym = symmetry_classes(problem, ml)
    inside = {d for c in sym for d in c}
    out = sym + [[d] for d in range(problem.n_devices) if d not in inside]
    return sorted(out, key=lambda c: c[0])


@dataclass
class Solved:
    """A placement (device per group) and what is known of it: its max load, a proven lower bound
    on the optimum, how the search ended and what it took."""

    group_device: np.ndarray
    value: float  # max load of the placement returned
    bound: float  # proven lower bound on the optimum
    status: str
    seconds: float
    info: dict = field(default_factory=dict)

    @property
    def gap(self) -> float:
        return 0.0 if self.value <= self.bound else (self.value - self.bound) / self.value


#: Nonzeros of the MILP above which HiGHS runs without presolve: its presolve does not look at the
#: clock (13 s on a 10,000-group chain's 290,000 nonzeros under a limit of 0.5 s), the simplex does.
PRESOLVE_MAX_NONZEROS = 100_000


def solve(problem, ml: MaxLoad, time_limit: float = 60.0, mip_gap: float = 1e-6, symmetry: bool = True,
          incumbent: np.ndarray | None = None) -> Solved:
    """The placement of least max-load within the caps (see the module docstring). ``incumbent``:
    a feasible placement; the model then asks for a strictly better one (its max-load is a cutoff),
    and the incumbent is returned when HiGHS finds none (proven optimal when HiGHS proves there is
    none)."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint

    t0 = _time.perf_counter()
    st = problem.structure
    k, nd = problem.n_groups, problem.n_devices
    if not k:
        return Solved(np.zeros(0, np.int16), 0.0, 0.0, "empty", 0.0)
    ok = np.array(problem.allowed)
    if problem.r_time.shape[0]:
        raise InputError("the max-load MILP does not model replicated chains; cost graphs have none")
    capped = np.isfinite(ml.capacity)
    ok &= ~(capped[None, :] & (ml.group_bytes[:, None] > ml.capacity[None, :]))
    if not ok.any(axis=1).all():
        g = int(np.flatnonzero(~ok.any(axis=1))[0])
        raise InputError(f"no device can hold group {g} ({ml.group_bytes[g]:.0f} B)")
    nx = int(ok.sum())
    xid = np.full((k, nd), -1, np.int64)
    xid[ok] = np.arange(nx)
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    pp, qq = st.t_prod.astype(np.int64)[per], st.t_cons.astype(np.int64)
    cost_t = problem.t_cost
    live = cost_t[per] > 0
    per, pp, qq = per[live], pp[live], qq[live]
    paid = np.flatnonzero(~ml.free_comm)
    # send[t, d], recv[t, d] for every tensor with a cost and every paying device
    tensors = np.unique(per)
    tslot = np.full(st.n_tensors, -1, np.int64)
    tslot[tensors] = np.arange(tensors.shape[0])
    dslot = np.full(nd, -1, np.int64)
    dslot[paid] = np.arange(paid.shape[0])
    nt, npd = tensors.shape[0], paid.shape[0]
    base_send = nx
    base_recv = nx + nt * npd
    lid = nx + 2 * nt * npd
    # prefix counts for the symmetry breaking
    classes = symmetry_classes(problem, ml) if symmetry else []
    pre_pairs = [(c[j - 1], c[j]) for c in classes for j in range(1, len(c))]
    pre_dev = sorted({a for a, _ in pre_pairs})
    pslot = {d: i for i, d in enumerate(pre_dev)}
    base_pre = lid + 1
    zid = base_pre + k * len(pre_dev)  # the escape from the cutoff (see below)
    nv = zid + 1

    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def block(rr, cc, vv):
        rows.append(np.asarray(rr, np.int64))
        cols.append(np.asarray(cc, np.int64))
        vals.append(np.asarray(vv, np.float64))

    # Σ_d x[g, d] = 1
    gg, dd = np.nonzero(ok)
    block(r + gg, xid[gg, dd], np.ones(gg.shape[0]))
    lo.append(np.ones(k))
    hi.append(np.ones(k))
    r += k
    # send[t, d] - x[p, d] + x[q, d] >= 0  and  recv[t, d] - x[q, d] + x[p, d] >= 0
    for d in paid:
        m = pp.shape[0]
        rr = r + np.arange(m)
        sv = base_send + tslot[per] * npd + dslot[d]
        rv = base_recv + tslot[per] * npd + dslot[d]
        for var, a, b in ((sv, pp, qq), (rv, qq, pp)):
            block(rr, var, np.ones(m))
            xa, xb = xid[a, d], xid[b, d]
            block(rr[xa >= 0], xa[xa >= 0], -np.ones(int((xa >= 0).sum())))
            block(rr[xb >= 0], xb[xb >= 0], np.ones(int((xb >= 0).sum())))
            lo.append(np.zeros(m))
            hi.append(np.full(m, np.inf))
            rr = rr + m
        r += 2 * m
    # load[d] - L <= 0
    for d in range(nd):
        g = np.flatnonzero(ok[:, d])
        block(np.full(g.shape[0], r), xid[g, d], problem.time[g, d])
        if dslot[d] >= 0:
            tv = np.arange(nt)
            block(np.full(nt, r), base_send + tv * npd + dslot[d], cost_t[tensors])
            block(np.full(nt, r), base_recv + tv * npd + dslot[d], cost_t[tensors])
        block([r], [lid], [-1.0])
        lo.append([-np.inf])
        hi.append([0.0])
        r += 1
    # memory
    for d in np.flatnonzero(capped):
        g = np.flatnonzero(ok[:, d] & (ml.group_bytes > 0))
        if not g.size:
            continue
        block(np.full(g.shape[0], r), xid[g, d], ml.group_bytes[g])
        lo.append([-np.inf])
        hi.append([float(ml.capacity[d])])
        r += 1
    # symmetry: pre[g, a] = Σ_(g' <= g) x[g', a];  x[g, b] <= pre[g - 1, a] (x[0, b] = 0)
    for a in pre_dev:
        base = base_pre + pslot[a] * k
        g = np.arange(k)
        block(r + g, base + g, np.ones(k))
        block(r + g[1:], base + g[1:] - 1, -np.ones(k - 1))
        has = ok[:, a]
        block((r + g)[has], xid[has, a], -np.ones(int(has.sum())))
        lo.append(np.zeros(k))
        hi.append(np.zeros(k))
        r += k
    for a, b in pre_pairs:
        base = base_pre + pslot[a] * k
        g = np.flatnonzero(ok[:, b])
        block(r + np.arange(g.shape[0]), xid[g, b], np.ones(g.shape[0]))
        prev = g >= 1
        block((r + np.arange(g.shape[0]))[prev], base + g[prev] - 1, -np.ones(int(prev.sum())))
        lo.append(np.full(g.shape[0], -np.inf))
        hi.append(np.zeros(g.shape[0]))
        r += g.shape[0]

    # With an incumbent, ask for a strictly better placement: L <= cutoff + big * z, and z costs
    # the cutoff in the objective. z = 1 keeps the model feasible (HiGHS then always has a
    # placement and reports its bound B); the optimum is >= min(B, cutoff) either way.
    inc_value = None
    big = float(np.where(ok, problem.time, 0).max(axis=1).sum() + 2 * cost_t.sum()) + 1.0
    if incumbent is not None:
        inc_value = max_load(problem, ml, incumbent)
        block([r, r], [lid, zid], [1.0, -big])
        lo.append([-np.inf])
        hi.append([inc_value * (1 - CUTOFF)])
        r += 1

    A = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nv))
    c = np.zeros(nv)
    c[lid] = 1.0
    c[zid] = (inc_value or 0.0) + big
    integrality = np.zeros(nv)
    integrality[:nx] = 1
    integrality[zid] = 1
    ub = np.full(nv, np.inf)
    ub[:nx] = 1
    ub[nx:lid] = 1
    ub[zid] = 1 if incumbent is not None else 0
    left = max(0.05, time_limit - (_time.perf_counter() - t0))  # building the model counts
    # in a child killed at the limit: HiGHS's setup of a large model does not look at the clock
    res = milp_within(left, c, integrality=integrality, bounds=Bounds(np.zeros(nv), ub),
                      constraints=[LinearConstraint(A, np.concatenate(lo), np.concatenate(hi))],
                      options={"mip_rel_gap": float(mip_gap), "presolve": A.nnz <= PRESOLVE_MAX_NONZEROS})
    secs = _time.perf_counter() - t0
    bound = getattr(res, "mip_dual_bound", None)
    bound = float(bound) if bound is not None else float("nan")
    if inc_value is not None and np.isfinite(bound):
        bound = min(bound, inc_value * (1 - CUTOFF))
    info = {"variables": nv, "constraints": r, "symmetric_classes": [len(c) for c in classes]}
    gd = None
    if res.x is not None:
        x = np.zeros((k, nd))
        x[ok] = res.x[:nx]
        gd = np.argmax(x, axis=1)
    if res.status == 2 and inc_value is not None:
        return Solved(np.asarray(incumbent, np.int16), inc_value, inc_value * (1 - CUTOFF), "optimal", secs,
                      info | {"kept_incumbent": True, "proof": "no placement below the incumbent"})
    if res.status == 2:
        raise InputError(f"no placement fits: the caps ({', '.join(f'{problem.devices[d]} {ml.capacity[d]:.0f} B' for d in np.flatnonzero(capped))}) "
                         f"cannot hold the {ml.group_bytes.sum():.0f} B the groups need")
    status = {0: "optimal", 1: "time limit"}.get(res.status, res.message)
    if incumbent is not None and (gd is None or inc_value <= max_load(problem, ml, gd)):
        gd = np.asarray(incumbent, np.int64)
        info["kept_incumbent"] = True
    if gd is None:
        raise InputError(f"the max-load MILP found no placement in {time_limit:g} s ({res.message})")
    value = max_load(problem, ml, gd)
    if not np.isfinite(bound):
        bound = float(np.nan)
    return Solved(gd.astype(np.int16), value, min(bound, value) if np.isfinite(bound) else bound, status, secs, info)


#: Groups above which :func:`balance_bound` bounds the balance by its dual (weights per device,
#: linear time and memory) instead of solving its LP.
BALANCE_LP_MAX = 5_000


def balance_bound(problem, ml: MaxLoad) -> float:
    """A lower bound on the max load without the MILP: the fractional balance of the work alone
    (transfers and caps ignored; an LP over the share of each group on each device). Above
    :data:`BALANCE_LP_MAX` groups, the best of a few hundred points of that LP's dual: for device
    weights ``w`` (summing to 1), ``Σ_g min_d w_d time[g, d]`` bounds it from below (every point
    is a bound; the best found is returned)."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    k, nd = problem.n_groups, problem.n_devices
    ok = np.array(problem.allowed)
    single = float(np.where(ok, problem.time, np.inf).min(axis=1).max()) if k else 0.0
    if k > BALANCE_LP_MAX:
        return max(_balance_dual(np.where(ok, problem.time, np.inf)), single)
    nx = int(ok.sum())
    gg, dd = np.nonzero(ok)
    c = np.zeros(nx + 1)
    c[-1] = 1.0
    A_eq = sp.csr_array((np.ones(nx), (gg, np.arange(nx))), shape=(k, nx + 1))
    rows = np.concatenate([dd, np.arange(nd)])
    cols = np.concatenate([np.arange(nx), np.full(nd, nx)])
    vals = np.concatenate([problem.time[gg, dd], -np.ones(nd)])
    A_ub = sp.csr_array((vals, (rows, cols)), shape=(nd, nx + 1))
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(nd), A_eq=A_eq, b_eq=np.ones(k), bounds=(0, None), method="highs")
    lp = float(res.fun) if res.status == 0 else 0.0
    return max(lp, single)


def _balance_dual(time: np.ndarray, iterations: int = 300) -> float:
    """The best lower bound ``Σ_g min_d w_d time[g, d]`` over device weights ``w`` on the simplex
    found by exponentiated subgradient ascent (``time`` inf where a group may not run)."""
    k, nd = time.shape
    finite = np.isfinite(time)
    scale = float(np.where(finite, time, 0.0).sum()) / max(nd, 1) or 1.0
    w = np.full(nd, 1.0 / nd)
    best = 0.0
    step = 1.0
    for i in range(iterations):
        cost = np.where(finite, time * w[None, :], np.inf)
        pick = np.argmin(cost, axis=1)
        value = float(cost[np.arange(k), pick].sum())
        if np.isfinite(value):
            best = max(best, value)
        grad = np.bincount(pick, weights=np.where(finite[np.arange(k), pick], time[np.arange(k), pick], 0.0),
                           minlength=nd) / scale
        w = w * np.exp(step / np.sqrt(i + 1) * (grad - grad.max()))
        w = np.maximum(w / w.sum(), 1e-12)
        w /= w.sum()
    return best

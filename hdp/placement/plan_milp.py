"""The serving plans' contiguous space as a mixed-integer program, and a bound with no search
(the space and the walk are :mod:`hdp.placement.plan_search`'s).

- :func:`milp_plan` — HiGHS through ``scipy.optimize.milp``, as hdp's other programs: a position per
  stage, each choosing an option (column, integer replica count, streams) one-hot; the period
  ``T >= L_k / (r sp(S)) + dispatch`` linearised per option with big-M rows, the latency
  ``Σ_k λ_k <= N T``, copies, replicated chains and memory per position, nodes ordered by position
  along every edge of the DAG the walk chains (so the two search one space); HiGHS's dual bound
  certifies a plan the walk could not prove.
- :func:`work_bound` — every group's work over every compute resource's streams (an LP), and the
  latency of a request over the requests in flight.
"""

from __future__ import annotations

import time as _time
import warnings

import numpy as np

from hdp.placement.ideals import PipelineDag
from hdp.placement.plan import MAX_STREAMS, GroupPlan, PlanPricer, Replica, speedup
from hdp.placement.plan_search import Found, KernelArrays, PlanSpace, plan_dag, plan_space


def milp_plan(pr: PlanPricer, space: PlanSpace | None = None, dag: PipelineDag | None = None, *,
              time_limit: float = 60.0, mip_gap: float = 1e-6, below: float | None = None) -> Found:
    """The contiguous space (``space``, the DAG ``dag`` the walk chains) as a mixed-integer program
    (see the module docstring), within ``time_limit`` seconds; ``below``: only plans priced below it
    (HiGHS's objective bound: none found is then no better plan). The bound is HiGHS's."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint, milp

    t0 = _time.perf_counter()
    p = pr.problem
    space = space or plan_space(pr)
    dag = dag or plan_dag(pr)
    a = KernelArrays(pr, space)
    nn = dag.n_nodes
    node = dag.node_of
    ncol = space.col_device.size
    K_ = int(space.size_cls.sum())
    nopt = space.opt_col.size
    N = max(pr.requests, 1)
    # per node and column: time (0 where not allowed, with a flag), bytes
    tcol = np.zeros((nn, ncol))
    bad = np.zeros((nn, ncol), bool)
    finite = np.isfinite(a.time_col)
    np.add.at(tcol, node, np.where(finite, a.time_col, 0.0))
    np.logical_or.at(bad, node, ~finite)
    fix = np.zeros((nn, ncol))
    np.add.at(fix, node, a.fix_col)
    act = np.zeros(nn)
    np.maximum.at(act, node, a.act)
    state = np.bincount(node, weights=a.state, minlength=nn)

    nv = 0

    def new(shape) -> np.ndarray:
        nonlocal nv
        size = int(np.prod(shape))
        ids = nv + np.arange(size).reshape(shape)
        nv += size
        return ids

    x = new((nn, K_))
    z = new((K_, nopt))
    y = new((a.t_prod.size, K_))  # tensor received by position k
    ys = new((a.t_prod.size, K_)) if pr.send else None
    n_ru = a.r_col.shape[0]
    ru = new((n_ru, K_))
    n_mu = a.mu_col.shape[0]
    capped = np.isfinite(a.cap_col)
    mu = new((n_mu, K_)) if capped.any() else np.zeros((n_mu, K_), np.int64)
    am = new((K_,)) if capped.any() else None
    lam = new((K_,))
    T = new((1,))[0]
    rows, cols, vals, lo, hi = [], [], [], [], []
    r = 0

    def row(cs, vs, lo_, hi_):
        nonlocal r
        cs = np.asarray(cs, np.int64).ravel()
        rows.append(np.full(cs.size, r, np.int64))
        cols.append(cs)
        vals.append(np.asarray(vs, np.float64).ravel())
        lo.append(lo_)
        hi.append(hi_)
        r += 1

    for v in range(nn):
        row(x[v], np.ones(K_), 1, 1)
    for k in range(K_):
        row(z[k], np.ones(nopt), 0, 1)
    for k in range(K_ - 1):  # positions used first
        row(np.r_[z[k], z[k + 1]], np.r_[np.ones(nopt), -np.ones(nopt)], 0, np.inf)
    # a node on position k only where its option's column runs it, and only on a used position
    for k in range(K_):
        for v in range(nn):
            okz = [o for o in range(nopt) if not bad[v, space.opt_col[o]]]
            row(np.r_[x[v, k], z[k, okz]], np.r_[1.0, -np.ones(len(okz))], -np.inf, 0)
    # slots per class
    for c in range(space.size_cls.size):
        oc = np.flatnonzero(space.col_class[space.opt_col] == c)
        row(z[:, oc], np.tile(space.opt_r[oc], K_), -np.inf, float(space.size_cls[c]))
    # order: pos(v) >= pos(pred)
    kk = np.arange(K_, dtype=np.float64)
    for v in range(nn):
        for u in dag.pred_idx[dag.pred_ptr[v]:dag.pred_ptr[v + 1]]:
            row(np.r_[x[v], x[u]], np.r_[kk, -kk], 0, np.inf)
    # copies: y[t, k] >= x[q, k] - x[p, k]
    for t in range(a.t_prod.size):
        pn = node[a.t_prod[t]]
        for q in a.t_cons[a.t_ptr[t]:a.t_ptr[t + 1]]:
            qn = node[q]
            if qn == pn:
                continue
            for k in range(K_):
                row([y[t, k], x[qn, k], x[pn, k]], [1, -1, 1], 0, np.inf)
                if ys is not None:
                    row([ys[t, k], x[pn, k], x[qn, k]], [1, -1, 1], 0, np.inf)
    gr_pairs = [(int(a.gr_unit[i]), int(g)) for g in range(p.n_groups) for i in range(a.gr_ptr[g], a.gr_ptr[g + 1])]
    for u, g in gr_pairs:
        for k in range(K_):
            row([ru[u, k], x[node[g], k]], [1, -1], 0, np.inf)
    gm_pairs = [(int(a.gm_unit[i]), int(g)) for g in range(p.n_groups) for i in range(a.gm_ptr[g], a.gm_ptr[g + 1])]
    if capped.any():
        for u, g in gm_pairs:
            for k in range(K_):
                row([mu[u, k], x[node[g], k]], [1, -1], 0, np.inf)
        for k in range(K_):
            for v in range(nn):
                if act[v] > 0:
                    row([am[k], x[v, k]], [1, -act[v]], 0, np.inf)
    # the load of position k priced on column c, as (columns, coefficients) without the overhead
    big = float(tcol.sum(axis=0).max() + a.r_col.sum() + (pr.receive + pr.send) * a.t_cost.sum()
                + pr.served_overhead + space.opt_delta.max(initial=0.0)) + 1.0

    def load(k, c):
        cs = [x[:, k], ru[:, k], y[:, k]]
        vs = [tcol[:, c], a.r_col[:, c], np.full(a.t_prod.size, pr.receive * 0.0)]
        if a.paid_col[c]:
            vs[2] = pr.receive * a.t_cost
            if ys is not None:
                cs.append(ys[:, k])
                vs.append(pr.send * a.t_cost)
        return np.concatenate(cs), np.concatenate(vs)

    for k in range(K_):
        for o in range(nopt):
            c = int(space.opt_col[o])
            m, f, dl = float(space.opt_mult[o]), float(space.opt_lat[o]), float(space.opt_delta[o])
            cs, vs = load(k, c)
            # (L + ovh) / m + dl <= T + big (1 - z)  ->  L - m T + m big z <= m big - ovh - m dl
            row(np.r_[cs, T, z[k, o]], np.r_[vs, -m, m * big], -np.inf, m * big - pr.served_overhead - m * dl)
            # lam_k >= f (L + ovh) + dl - f big (1 - z)
            row(np.r_[lam[k], cs, z[k, o]], np.r_[1.0, -f * vs, -f * big - dl - f * pr.served_overhead],
                -f * big, np.inf)
            if capped[c]:
                s_ = int(space.opt_s[o])
                cap = float(a.cap_col[c])
                mbig = float(fix[:, c].sum() + a.mu_col[:, c].sum() + s_ * act.max(initial=0) + s_ * state.sum()
                             + a.over_col[c]) + 1.0
                cs2 = np.r_[x[:, k], mu[:, k], am[k], x[:, k], z[k, o]]
                vs2 = np.r_[fix[:, c], a.mu_col[:, c], s_, (s_ - 1) * state, mbig]
                row(cs2, vs2, -np.inf, mbig + cap - a.over_col[c])
    row(np.r_[lam, T], np.r_[np.ones(K_), -float(N)], -np.inf, 0)
    A = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(r, nv))
    c = np.zeros(nv)
    c[T] = 1.0
    integrality = np.zeros(nv)
    integrality[x.ravel()] = 1
    integrality[z.ravel()] = 1
    ub = np.ones(nv)
    ub[lam] = np.inf
    ub[T] = np.inf
    if am is not None:
        ub[am] = np.inf
    options = {"time_limit": max(float(time_limit), 0.1), "mip_rel_gap": float(mip_gap), "disp": False}
    if below is not None and np.isfinite(below):
        options["objective_bound"] = float(below)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = milp(c, integrality=integrality, bounds=Bounds(np.zeros(nv), ub),
                   constraints=[LinearConstraint(A, np.array(lo, float), np.array(hi, float))], options=options)
    info = {"variables": nv, "constraints": r, "status": res.message, "seconds": _time.perf_counter() - t0}
    bound = getattr(res, "mip_dual_bound", None)
    bound = float(bound) if bound is not None and np.isfinite(bound) else 0.0
    if res.x is None:
        return Found(None, np.inf, bound if res.status != 2 else (below if below is not None else np.inf),
                     res.status == 2, info)
    X = res.x[x].reshape(nn, K_) > 0.5
    Z = res.x[z].reshape(K_, nopt) > 0.5
    used = [k for k in range(K_) if Z[k].any()]
    pos_of = {k: i for i, k in enumerate(used)}
    stage_node = np.array([pos_of[int(np.argmax(X[v]))] for v in range(nn)], np.int64)
    stage_of = stage_node[node]
    next_slot = [0] * len(space.cls_slots)
    reps = []
    for k in used:
        o = int(np.argmax(Z[k]))
        col = int(space.opt_col[o])
        cl = int(space.col_class[col])
        rr = []
        for _ in range(int(space.opt_r[o])):
            slot = space.slots[space.cls_slots[cl][next_slot[cl]]]
            next_slot[cl] += 1
            rr.append(Replica(int(slot[0] if len(slot) == 1 else space.col_device[col]), int(space.opt_s[o])))
        reps.append(tuple(rr))
    # stages that hold no group (a used position left empty) are dropped
    keep = [s for s in range(len(reps)) if (stage_of == s).any()]
    remap = np.full(len(reps), -1, np.int64)
    remap[keep] = np.arange(len(keep))
    plan = GroupPlan(remap[stage_of], tuple(reps[s] for s in keep))
    value = pr.price(plan).period
    return Found(plan, value, min(bound, value), res.status == 0, info)


def work_bound(pr: PlanPricer, max_streams: int = MAX_STREAMS) -> float:
    """A lower bound on every plan's period, with no search: every group of a request runs on some
    device, and a compute resource serves at most ``sp(S)`` one-stream seconds per second with all
    the streams it may run (an LP: each group's share on each device, the resources' work within
    ``T sp``); and a request's latency is at least its groups' least times, over the ``N`` in flight.
    Memory, copies and dispatch are left out (they only add)."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    p = pr.problem
    k = p.n_groups
    if not k:
        return 0.0
    t = np.where(p.allowed, p.time, np.inf) + pr.served_overhead / max(k, 1)
    ok = np.isfinite(t)
    gg, dd = np.nonzero(ok)
    nx = gg.size
    groups = pr.devs.compute_groups()
    rows, cols, vals = [], [], []
    for r, devs in enumerate(groups):
        m = np.isin(dd, devs)
        rows.append(np.full(int(m.sum()), r))
        cols.append(np.flatnonzero(m))
        vals.append(t[gg[m], dd[m]])
    cap = [max(speedup(float(min(pr.devs.efficiency[d] for d in devs)),
                       int(max(1, min(pr.requests, sum(int(pr.devs.max_streams[d]) for d in devs), max_streams)))), 1e-9)
           for devs in groups]
    rows.append(np.arange(len(groups)))
    cols.append(np.full(len(groups), nx))
    vals.append(-np.asarray(cap))
    A_ub = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(len(groups), nx + 1))
    A_eq = sp.csr_array((np.ones(nx), (gg, np.arange(nx))), shape=(k, nx + 1))
    c = np.zeros(nx + 1)
    c[-1] = 1.0
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(len(groups)), A_eq=A_eq, b_eq=np.ones(k), bounds=(0, None), method="highs")
    lp = float(res.fun) if res.status == 0 else 0.0
    return max(lp, float(np.where(ok, t, np.inf).min(axis=1).sum()) / max(pr.requests, 1))

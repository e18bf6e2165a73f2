"""``optimal`` under device memory and for throughput: one mixed-integer program (HiGHS).

Variables (all in [0, 1] except ``a`` and ``T``; only ``x`` is integer):

- ``x[g, d]``: group ``g`` on device ``d`` (where allowed);
- ``y[t, d]``: tensor ``t`` is copied to device ``d``:  ``y[t, d] >= x[q, d] - x[p(t), d]`` for every
  consumer group ``q`` of ``t``;
- ``r[u, d]``: replicated unit ``u`` computed on ``d``:  ``r[u, d] >= x[q, d]`` for its groups ``q``;
- memory, on every device with a finite capacity: ``w[u, d] >= x[g, d]`` for every group ``g`` reading
  shared constant unit ``u``; ``a[d] >= activation[g] x[g, d]``; and
  ``Σ_g fixed[g, d] x[g, d] + Σ_u bytes[u, d] w[u, d] + a[d] <= capacity[d] - overhead[d]`` (the
  bytes of :meth:`~hdp.placement.problem.PlacementProblem.memory_terms`: a device that runs any
  group pays its overhead; one whose overhead exceeds its capacity runs none);
- throughput: ``T`` (seconds per request), ``used[d] >= x[g, d]``, and when the objective's
  ``send`` is not 0, ``cut[t] >= y[t, d]`` and ``z[t, d] >= cut[t] + x[p(t), d] - 1`` (the producer's
  device sends it once).

Objectives:

- latency: ``Σ time·x + Σ (copy + penalty)·y + Σ r_time·r`` (as the unconstrained ILP of
  :mod:`hdp.placers.classical`);
- throughput: ``min T`` subject to, for every device ``d``,
  ``load[d] = Σ time[g, d] x + Σ r_time[u, d] r + Σ_t (receive[d] copy_t + penalty) y[t, d]
  + send[d] Σ_t copy_t z[t, d] + overhead · used[d] <= T`` and ``latency / requests <= T`` (with
  the latency expression above plus one overhead), the overhead here that of a served subgraph
  (the subgraph overhead plus the objective's ``handoff``, as ``penalty`` is by default).

:func:`solve` runs it within one time limit, on a large problem first over clusters of groups and
then over the groups near the clusters' cuts (see its docstring); the answer is exact when HiGHS
closes the gap, else the best found with its gap to HiGHS's bound.

Exact for the simulator's model (:mod:`hdp.placement.simulate`) up to the subgraph count, which is
not a function of single groups: ``penalty`` (default: the subgraph overhead) charges it per copy,
as in the unconstrained ILP; with a zero overhead the program is exact (tests compare it with
brute force on small random DAGs with ties and caps).
"""

from __future__ import annotations

import time as _time
import warnings
from dataclasses import dataclass

import numpy as np

from hdp.base.errors import InputError
from hdp.base.within import milp_within
from hdp.placement.maxload import MaxLoad
from hdp.placement.maxload_search import coarsen
from hdp.placement.memory import size_text, smallest_need
from hdp.placement.objective import Throughput


class _Rows:
    """A sparse constraint matrix built row block by row block."""

    def __init__(self):
        self.r, self.c, self.v, self.lo, self.hi = [], [], [], [], []
        self.n = 0

    def add(self, rows, cols, vals, lo, hi, n_rows):
        self.r.append(np.asarray(rows, np.int64) + self.n)
        self.c.append(np.asarray(cols, np.int64))
        self.v.append(np.asarray(vals, np.float64))
        self.lo.append(np.broadcast_to(np.asarray(lo, np.float64), (n_rows,)))
        self.hi.append(np.broadcast_to(np.asarray(hi, np.float64), (n_rows,)))
        self.n += n_rows

    def matrix(self, nv):
        import scipy.sparse as sp

        return sp.csr_array((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                            shape=(self.n, nv))


@dataclass
class _Program:
    """The program's arrays: ``min c·v`` s.t. ``lo <= A v <= hi``, ``0 <= v <= ub``, integer where
    ``integrality``; ``xid[g, d]`` the column of ``x[g, d]`` (-1 where not allowed); ``pairs``
    (producer group, consumer group) of every tensor edge between groups."""

    c: np.ndarray
    A: object  # scipy.sparse csr_array
    lo: np.ndarray
    hi: np.ndarray
    ub: np.ndarray
    integrality: np.ndarray
    xid: np.ndarray
    ok: np.ndarray
    pairs: tuple[np.ndarray, np.ndarray]

    def run(self, time_limit: float, mip_gap: float, fixed: np.ndarray | None = None,
            cluster: np.ndarray | None = None, below: float | None = None):
        """HiGHS on the program, restricted: ``fixed[g]`` >= 0 puts group ``g`` on that device;
        ``cluster[g]`` ties every group of a cluster to one device (one column per cluster and
        device, substituted for its groups'); ``below``: only placements whose objective is below
        this (HiGHS's ``objective_bound``: none found is no placement). Returns (device per group or
        None, scipy's result)."""

        import scipy.sparse as sp
        from scipy.optimize import Bounds, LinearConstraint

        k, nd = self.ok.shape
        c, A, lb, ub, integ = self.c, self.A, np.zeros(self.c.size), self.ub.copy(), self.integrality
        if fixed is not None:
            g = np.nonzero(fixed >= 0)[0]
            cols = self.xid[g]
            ub[cols[cols >= 0]] = 0.0
            on = self.xid[g, fixed[g]]
            lb[on] = ub[on] = 1.0
        S = None
        if cluster is not None:  # columns: the clusters' x, then every other column as it is
            nc = int(cluster.max()) + 1
            okc = np.ones((nc, nd), bool)
            np.logical_and.at(okc, cluster, self.ok)
            cx = np.full((nc, nd), -1, np.int64)
            cx[okc] = np.arange(int(okc.sum()))
            is_x = np.zeros(self.c.size, bool)
            is_x[self.xid[self.ok]] = True
            rest = np.nonzero(~is_x)[0]
            new = np.full(self.c.size, -1, np.int64)
            gg, dd = np.nonzero(self.ok)
            new[self.xid[gg, dd]] = cx[cluster[gg], dd]
            new[rest] = int(okc.sum()) + np.arange(rest.size)
            keep = new >= 0  # an x whose cluster may not use the device: fixed at 0, its column dropped
            S = sp.csr_array((np.ones(int(keep.sum())), (np.nonzero(keep)[0], new[keep])),
                             shape=(self.c.size, int(okc.sum()) + rest.size))
            c, A = S.T @ c, (A @ S).tocsr()
            lb = np.r_[np.zeros(int(okc.sum())), lb[rest]]
            ub = np.r_[np.ones(int(okc.sum())), ub[rest]]
            integ = np.r_[np.ones(int(okc.sum())), integ[rest]]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # options HiGHS takes that scipy does not list
            res = milp_within(max(float(time_limit), 0.1), c, integrality=integ, bounds=Bounds(lb, ub),
                              constraints=[LinearConstraint(A, self.lo, self.hi)],
                              options={"mip_rel_gap": float(mip_gap),
                                       **({} if below is None else {"objective_bound": float(below)})})
        if res.x is None:
            return None, res
        v = res.x if S is None else S @ res.x
        x = np.zeros((k, nd))
        x[self.ok] = v[self.xid[self.ok]]
        return np.argmax(x, axis=1), res


def _program(problem, penalty: float) -> _Program:
    """The mixed-integer program of ``problem`` (see the module docstring)."""
    p = problem
    st = p.structure
    k, nd = p.n_groups, p.n_devices
    ok = np.asarray(p.allowed)
    cost = np.where(ok, p.time, 0.0)
    t_cost = np.asarray(p.t_cost, np.float64)
    t_w = t_cost + penalty
    pair_t = np.repeat(np.arange(st.n_tensors, dtype=np.int64), np.diff(st.t_ptr))
    pair_q = st.t_cons.astype(np.int64)
    t_prod = st.t_prod.astype(np.int64)
    r_w = np.asarray(p.r_time, np.float64)
    n_r = r_w.shape[0]
    rpair_u = np.repeat(np.arange(n_r, dtype=np.int64), np.diff(p.r_ptr))
    rpair_q = np.asarray(p.r_groups, np.int64)
    thr = p.objective if isinstance(p.objective, Throughput) else None
    caps = np.asarray(p.caps, np.float64)
    finite = np.isfinite(caps)
    needs = p.needs

    nv = 0

    def block(mask):
        nonlocal nv
        ids = np.full(mask.shape, -1, np.int64)
        ids[mask] = nv + np.arange(int(mask.sum()))
        nv += int(mask.sum())
        return ids

    xid = block(ok)
    need = np.zeros((st.n_tensors, nd), bool)
    for d in range(nd):
        np.logical_or.at(need[:, d], pair_t, ok[pair_q, d])
    yid = block(need)
    rneed = np.zeros((n_r, nd), bool)
    for d in range(nd):
        np.logical_or.at(rneed[:, d], rpair_u, ok[rpair_q, d])
    rid = block(rneed)
    n_u = needs.u_bytes.shape[0]
    upair_u = np.repeat(np.arange(n_u, dtype=np.int64), np.diff(needs.u_ptr))
    upair_g = np.asarray(needs.u_groups, np.int64)
    uneed = np.zeros((n_u, nd), bool)
    for d in np.nonzero(finite)[0]:
        np.logical_or.at(uneed[:, d], upair_u, ok[upair_g, d])
    wid = block(uneed)
    aid = block(finite)
    send = float(thr.send) if thr else 0.0
    free = np.array([thr is not None and n in thr.free_comm for n in p.devices])
    if thr is not None:
        tid = block(np.ones(1, bool))[0]
        usedid = block(np.ones(nd, bool))
        cutid = block(need.any(axis=1)) if send > 0 else None
        zmask = np.zeros((st.n_tensors, nd), bool)
        if send > 0:
            zmask = need.any(axis=1)[:, None] & ok[t_prod] & ~free[None, :]
        zid = block(zmask)

    # seconds are scaled so the objective is about 1e3; bytes by each capacity
    total = float(np.where(ok, p.time, np.inf).min(axis=1).sum() + t_w.sum() + r_w.sum())
    sc = 1e3 / max(total, 1e-300)
    lat = np.zeros(nv)  # the latency expression, scaled
    lat[xid[ok]] = cost[ok] * sc
    tt, dd = np.nonzero(need)
    lat[yid[tt, dd]] = t_w[tt] * sc
    uu, ud = np.nonzero(rneed)
    lat[rid[uu, ud]] = r_w[uu, ud] * sc

    R = _Rows()
    r_one = np.repeat(np.arange(k), ok.sum(axis=1))
    R.add(r_one, xid[ok], np.ones(int(ok.sum())), 1, 1, k)
    # copies
    pq, pd = np.nonzero(ok[pair_q])
    pt, qq = pair_t[pq], pair_q[pq]
    pp = t_prod[pt]
    n2 = pq.shape[0]
    rows = [np.arange(n2), np.arange(n2)]
    cols = [yid[pt, pd], xid[qq, pd]]
    vals = [np.ones(n2), -np.ones(n2)]
    has_p = xid[pp, pd] >= 0
    rows.append(np.arange(n2)[has_p])
    cols.append(xid[pp[has_p], pd[has_p]])
    vals.append(np.ones(int(has_p.sum())))
    R.add(np.concatenate(rows), np.concatenate(cols), np.concatenate(vals), 0, np.inf, n2)
    # replicated units
    rq, rd = np.nonzero(ok[rpair_q])
    n3 = rq.shape[0]
    R.add(np.r_[np.arange(n3), np.arange(n3)], np.r_[rid[rpair_u[rq], rd], xid[rpair_q[rq], rd]],
          np.r_[np.ones(n3), -np.ones(n3)], 0, np.inf, n3)
    # memory: a device that runs a group pays its overhead, so the rest must fit in cap - overhead
    fixed, ubytes, over = p.memory_terms()
    for d in np.nonzero(finite)[0]:
        gs = np.nonzero(ok[:, d])[0]
        us = np.nonzero(uneed[:, d])[0]
        cap = caps[d]
        if cap <= 0 or cap < over[d]:
            R.add(np.zeros(gs.size), xid[gs, d], np.ones(gs.size), 0, 0, 1)
            continue
        R.add(np.zeros(gs.size + us.size + 1), np.r_[xid[gs, d], wid[us, d], aid[d]],
              np.r_[fixed[gs, d] / cap, ubytes[us, d] / cap, 1.0], -np.inf, (cap - over[d]) / cap, 1)
        R.add(np.r_[np.arange(gs.size), np.arange(gs.size)], np.r_[np.full(gs.size, aid[d]), xid[gs, d]],
              np.r_[np.ones(gs.size), -needs.activation[gs] / cap], 0, np.inf, gs.size)
        m = ok[upair_g, d]
        n4 = int(m.sum())
        R.add(np.r_[np.arange(n4), np.arange(n4)], np.r_[wid[upair_u[m], d], xid[upair_g[m], d]],
              np.r_[np.ones(n4), -np.ones(n4)], 0, np.inf, n4)
    c = lat
    ub = np.ones(nv)
    if thr is not None:
        ub[aid[finite]] = np.inf
        ub[tid] = np.inf
        c = np.zeros(nv)
        c[tid] = 1.0
        ovh = (float(p.subgraph_overhead) + float(thr.handoff)) * sc
        recv = np.where(free, 0.0, float(thr.receive))
        for d in range(nd):
            gs = np.nonzero(ok[:, d])[0]
            ts = np.nonzero(need[:, d])[0]
            us = np.nonzero(rneed[:, d])[0]
            zs = np.nonzero(zmask[:, d])[0]
            cols = np.r_[xid[gs, d], yid[ts, d], rid[us, d], zid[zs, d], usedid[d], tid]
            vals = np.r_[cost[gs, d] * sc, (recv[d] * t_cost[ts] + penalty) * sc, r_w[us, d] * sc,
                         send * t_cost[zs] * sc, ovh, -1.0]
            R.add(np.zeros(cols.size), cols, vals, -np.inf, 0, 1)
            R.add(np.r_[np.arange(gs.size), np.arange(gs.size)], np.r_[np.full(gs.size, usedid[d]), xid[gs, d]],
                  np.r_[np.ones(gs.size), -np.ones(gs.size)], 0, np.inf, gs.size)
        if send > 0:
            tt, dd = np.nonzero(need)
            R.add(np.r_[np.arange(tt.size), np.arange(tt.size)], np.r_[cutid[tt], yid[tt, dd]],
                  np.r_[np.ones(tt.size), -np.ones(tt.size)], 0, np.inf, tt.size)
            zt, zd = np.nonzero(zmask)
            n5 = zt.size
            R.add(np.r_[np.arange(n5), np.arange(n5), np.arange(n5)],
                  np.r_[zid[zt, zd], cutid[zt], xid[t_prod[zt], zd]],
                  np.r_[np.ones(n5), -np.ones(n5), -np.ones(n5)], -1, np.inf, n5)
        nz = np.nonzero(lat)[0]
        N = float(thr.requests)
        R.add(np.zeros(nz.size + 1), np.r_[nz, tid], np.r_[lat[nz] / N, -1.0], -np.inf, -ovh / N, 1)
    else:
        ub[aid[finite]] = np.inf
    integrality = np.zeros(nv)
    integrality[xid[ok]] = 1
    return _Program(c=c, A=R.matrix(nv), lo=np.concatenate(R.lo), hi=np.concatenate(R.hi), ub=ub,
                    integrality=integrality, xid=xid, ok=ok, pairs=(t_prod[pair_t], pair_q))


#: Above this many groups :func:`solve` first solves coarser problems (see its docstring).
COARSE_ABOVE = 240
#: ... into at least this many clusters (about a tenth of the groups).
COARSE_MIN = 48


def clusters(problem, target: int) -> np.ndarray:
    """Cluster per group for the coarse program: groups joined along their costliest tensors
    (:func:`hdp.placement.maxload_search.coarsen`: heavy-edge matching rounds), each cluster within an
    eighth of the smallest capacity (its bytes on the device that holds them for least), a
    quarter of a device's fair share of the work and the devices all its groups may use."""

    fixed, units, _ = problem.memory_terms()
    nbytes = np.where(problem.allowed, fixed, np.inf).min(axis=1) + problem.needs.activation
    needs = problem.needs
    if units.size:  # a shared unit's bytes split among the groups reading it
        per = np.repeat(units.min(axis=1) / np.maximum(np.diff(needs.u_ptr), 1), np.diff(needs.u_ptr))
        np.add.at(nbytes, needs.u_groups, per)
    caps = np.asarray(problem.caps, np.float64) / 8
    return coarsen(problem, MaxLoad(nbytes, caps, np.zeros(problem.n_devices, bool)), target)


def _near_cuts(prog: _Program, gd: np.ndarray, cluster: np.ndarray) -> np.ndarray:
    """Groups of the clusters that hold an end of an edge ``gd`` cuts."""
    a, b = prog.pairs
    cut = gd[a] != gd[b]
    hot = np.zeros(int(cluster.max()) + 1, bool)
    hot[cluster[a[cut]]] = True
    hot[cluster[b[cut]]] = True
    return hot[cluster]


def solve(problem, penalty: float, time_limit: float, mip_gap: float) -> tuple[np.ndarray, dict]:
    """(device per group, info) minimising the problem's objective under its capacities, within
    ``time_limit`` seconds in all.

    On more than :data:`COARSE_ABOVE` groups, before the program over every group: the program over
    :func:`clusters` of them (about a tenth as many), then that over the groups near the cuts of its
    answer (those of the clusters holding an end of a cut edge; the other groups kept where the
    coarse answer put them), asked for a placement better than the coarse one; the best answer of
    the three stages is returned, and ``info["gap"]`` is its distance from the last stage's proven
    bound. The coarse stages give HiGHS's search over every
    group a good placement to beat early; on a large model that search rarely closes the gap in time,
    because the relaxation lets every group split between devices at no copy cost.

    Raises InputError when HiGHS proves that no placement fits, or finds none in time."""
    t0 = _time.perf_counter()
    p = problem
    prog = _program(p, penalty)
    info = {"solver": "milp", "objective_kind": p.objective.kind(), "variables": int(prog.c.size),
            "constraints": int(prog.A.shape[0])}
    best, best_v, stages = None, np.inf, []

    def left(share=1.0):
        return share * (time_limit - (_time.perf_counter() - t0))

    if p.n_groups > COARSE_ABOVE:
        cluster = clusters(p, max(COARSE_MIN, p.n_groups // 10))
        gd, res = prog.run(left(0.25), mip_gap, cluster=cluster)
        if gd is not None:
            best, best_v = gd, float(res.fun)
            stages.append(f"clusters {int(cluster.max()) + 1}: {best_v:.6g}")
            fixed = np.where(_near_cuts(prog, gd, cluster), -1, gd)
            gd, res = prog.run(left(0.33), mip_gap, fixed=fixed, below=best_v * (1 - 1e-9))
            if gd is not None and float(res.fun) < best_v:
                best, best_v = gd, float(res.fun)
            stages.append(f"near cuts ({int((fixed < 0).sum())} groups free): "
                          + (f"{float(res.fun):.6g}" if gd is not None else "none better"))
    gd, res = prog.run(left(), mip_gap)
    bound = getattr(res, "mip_dual_bound", None)
    if gd is not None:
        stages.append(f"all groups: {float(res.fun):.6g}")
        if float(res.fun) < best_v:
            best, best_v = gd, float(res.fun)
    info["status"] = res.message
    info["stages"] = "; ".join(stages) if stages else "all groups"
    info["gap"] = (max(best_v - float(bound), 0.0) / abs(best_v) if best is not None and bound is not None
                   and np.isfinite(best_v) and best_v else float("nan"))
    if best is None:
        caps = np.asarray(p.caps, np.float64)
        held = ", ".join(f"{d} {size_text(cap)}" if np.isfinite(cap) else f"{d} unlimited"
                         for d, cap in zip(p.devices, caps))
        if res.status == 2:  # infeasible
            raise InputError(f"optimal: no placement fits the devices' memory ({held}); the model needs at least "
                             f"{size_text(smallest_need(p))} in all")
        raise InputError(f"optimal: HiGHS found no placement within {time_limit:g} s ({res.message}); "
                         f"raise time_limit (--set time_limit=...)")
    return best, info

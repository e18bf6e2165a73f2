"""``optimal`` under device memory and for throughput: one mixed-integer program (HiGHS).

Variables (all in [0, 1] except ``a`` and ``T``; only ``x`` is integer):

- ``x[g, d]``: group ``g`` on device ``d`` (where allowed);
- ``y[t, d]``: tensor ``t`` is copied to device ``d``:  ``y[t, d] >= x[q, d] - x[p(t), d]`` for every
  consumer group ``q`` of ``t``;
- ``r[u, d]``: replicated unit ``u`` computed on ``d``:  ``r[u, d] >= x[q, d]`` for its groups ``q``;
- memory, on every device with a finite capacity: ``w[u, d] >= x[g, d]`` for every group ``g`` reading
  shared constant unit ``u``; ``a[d] >= activation[g] x[g, d]``; and
  ``Σ_g (weights[g] + state[g]) x[g, d] + Σ_u bytes[u] w[u, d] + a[d] <= capacity[d]``;
- throughput: ``T`` (seconds per request), ``used[d] >= x[g, d]``, and when the objective's
  ``send`` is not 0, ``cut[t] >= y[t, d]`` and ``z[t, d] >= cut[t] + x[p(t), d] - 1`` (the producer's
  device sends it once).

Objectives:

- latency: ``Σ time·x + Σ (copy + penalty)·y + Σ r_time·r`` (as the unconstrained ILP of
  :mod:`hdp.placers.classical`);
- throughput: ``min T`` subject to, for every device ``d``,
  ``load[d] = Σ time[g, d] x + Σ r_time[u, d] r + Σ_t (receive[d] copy_t + penalty) y[t, d]
  + send[d] Σ_t copy_t z[t, d] + overhead · used[d] <= T`` and ``latency / requests <= T`` (with
  the latency expression above plus one overhead).

Exact for the simulator's model (:mod:`hdp.placement.simulate`) up to the subgraph count, which is
not a function of single groups: ``penalty`` (default: the subgraph overhead) charges it per copy,
as in the unconstrained ILP; with a zero overhead the program is exact (tests compare it with
brute force on small random DAGs with ties and caps).
"""

from __future__ import annotations

import numpy as np

from hdp.errors import InputError
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

    def constraint(self, nv):
        import scipy.sparse as sp
        from scipy.optimize import LinearConstraint

        A = sp.csr_array((np.concatenate(self.v), (np.concatenate(self.r), np.concatenate(self.c))),
                         shape=(self.n, nv))
        return LinearConstraint(A, np.concatenate(self.lo), np.concatenate(self.hi))


def solve(problem, penalty: float, time_limit: float, mip_gap: float) -> tuple[np.ndarray, dict]:
    """(device per group, info) minimising the problem's objective under its capacities.

    Raises InputError when HiGHS proves that no placement fits, or finds none in time."""
    from scipy.optimize import Bounds, milp

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
    # memory
    fixed = needs.weights + needs.state
    for d in np.nonzero(finite)[0]:
        gs = np.nonzero(ok[:, d])[0]
        us = np.nonzero(uneed[:, d])[0]
        cap = caps[d]
        if cap <= 0:
            R.add(np.zeros(gs.size), xid[gs, d], np.ones(gs.size), 0, 0, 1)
            continue
        R.add(np.zeros(gs.size + us.size + 1), np.r_[xid[gs, d], wid[us, d], aid[d]],
              np.r_[fixed[gs] / cap, needs.u_bytes[us] / cap, 1.0], -np.inf, 1.0, 1)
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
        ovh = float(p.subgraph_overhead) * sc
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
    res = milp(c, integrality=integrality, bounds=Bounds(0, ub), constraints=[R.constraint(nv)],
               options={"time_limit": float(time_limit), "mip_rel_gap": float(mip_gap), "disp": False})
    info = {"solver": "milp", "objective_kind": p.objective.kind(), "status": res.message, "variables": nv,
            "constraints": R.n,
            "gap": float(res.mip_gap) if getattr(res, "mip_gap", None) is not None else float("nan")}
    if res.x is None:
        from hdp.placement.memory import size_text, smallest_need

        held = ", ".join(f"{d} {size_text(cap)}" if np.isfinite(cap) else f"{d} unlimited"
                         for d, cap in zip(p.devices, caps))
        if res.status == 2:  # infeasible
            raise InputError(f"optimal: no placement fits the devices' memory ({held}); the model needs at least "
                             f"{size_text(smallest_need(needs))} in all")
        raise InputError(f"optimal: HiGHS found no placement within {time_limit:g} s ({res.message}); "
                         f"raise time_limit (--set time_limit=...)")
    x = np.zeros((k, nd))
    x[ok] = res.x[xid[ok]]
    return np.argmax(x, axis=1), info

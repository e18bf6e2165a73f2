"""Classical placers over the cost table: ``random``, ``heft`` and ``optimal``.

All of them place the tie groups of a :class:`~hdp.placement.problem.PlacementProblem` on the
devices allowed for them, so every result respects the legality rules of :mod:`hdp.placement`.

``optimal`` solves the sequential HETERO cost model of :mod:`hdp.placement.simulate` exactly::

    minimise  Σ_i time[i, dev_i]  +  Σ_(t, d) (copy_t + boundary_penalty) · [some consumer of t on d ≠ dev(producer t)]
              +  Σ_(u, d) r_time[u, d] · [some group fed by replicated unit u on d]

over tie groups, with two devices as an s-t minimum cut, with more as a mixed-integer program
(HiGHS): exact for the legal problem. The
per-subgraph overhead is not a function of single ops or tensors (it counts connected regions),
so it is not in the exact objective; ``boundary_penalty`` (default: the cost table's
``subgraph_overhead``) charges it per copy instead, which equals the subgraph count on chains
and overestimates it where one subgraph receives several tensors. ``boundary_penalty=0`` gives
the pure compute + copy optimum.

The min-cut is exact up to its integer capacities: scipy's max-flow keeps them in int32, so the
finite costs are scaled to sum to 2^30 (rounding error ≤ half a unit per term). Options
(:class:`~hdp.placers.options.Optimal`): ``boundary_penalty`` (seconds per copy, see above),
``time_limit`` (seconds for the placement as a whole, default 60: the ILP or MILP gets
:data:`PROGRAM_SHARE` of it, the rest is left for what follows the program, HETERO's state rule and
the report; on timeout the best solution found is used, or the
better of "each op on its fastest device" and the best single device if none was), ``mip_gap``
(ILP relative gap, default 1e-4). ``optimal:ilp`` forces the ILP with two devices. ``info``
reports the objective, the gap and the simulated latency; the solve time goes to
:func:`hdp.placers.note_time` (a wall time in ``info`` would change the Module's bytes run to run).

**Objectives and memory.** With the problem's objective :class:`~hdp.placement.objective.Throughput`,
or when the unconstrained optimum overfills a device's memory, ``optimal`` solves the mixed-integer
program of :mod:`hdp.placers.constrained` instead (min latency or min max-stage-load, subject to
every device's capacity); when every group on its fastest device already overfills one, it goes
there directly (and when it does not, the two solves share ``time_limit``). Under throughput the
program charges the served overhead per copy received, a stand-in for per subgraph that over-counts
a stage fed by several tensors: when the simulator prices the best two-stage pipeline
(:mod:`hdp.placers.pipelines`) below the program's answer, ``optimal`` returns the pipeline and says
so in ``info["pipeline"]``. ``heft`` under capacities only considers devices with room left for each
group (Baechi's m-ETF); ``random`` redraws, seeded, until a placement fits.

**Margin.** The optimum of a cost model is only as good as the model: a mixed placement predicted
2 % faster than the best single device, by a profile whose per-op times are known to ±5 %, is a
coin toss that costs HETERO's overheads when it loses. So a mixed optimum is kept only when its
predicted gain over the best single device (every group allowed there) is at least ``margin`` (a
share of the single device's simulated latency); otherwise ``optimal`` returns that single device
and says so in ``info["kept_single"]``. ``margin=None`` (the default) is the noise of the
prediction itself: :data:`~hdp.runtime.costs.denoise.Z_ONE_SIDED` standard errors of the predicted gain,
from the per-op standard errors of the profile (``Costs.op_se``, :func:`hdp.runtime.costs.denoise.gain_noise`:
only the ops the optimum moves count), combined (root sum of squares) with the held-out error of
the host's calibration when the costs were calibrated (the ``boundary`` pass,
:mod:`hdp.runtime.costs.calibrate`); see :func:`auto_margin` for costs without standard errors. Among
placements of equal cost the best single device is returned, the first in target order.
"""

from __future__ import annotations

import time as _time

import numpy as np

from hdp.base.errors import InputError
from hdp.base.within import milp_within
from hdp.placement.memory import size_text
from hdp.placement.objective import Concurrent, Throughput
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, Placed, note_time
from hdp.placers import _kernels as K
from hdp.placers.constrained import solve as solve_constrained
from hdp.placers.options import UNCALIBRATED_MARGIN, Heft, Optimal, Random
from hdp.placers.pipelines import pipeline_candidates
from hdp.runtime.costs.denoise import Z_ONE_SIDED, gain_noise

#: ``random`` under device memory draws at most this many placements for one that fits.
RANDOM_DRAWS = 100
_INF_CAP = 2**31 - 1  # scipy's max-flow keeps capacities in int32
_FINITE_BUDGET = 2**30  # the scaled finite capacities sum to at most this, so a cut never takes _INF_CAP


def _uniform_choice(ok: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per row, a uniformly drawn column among the True ones (every row has one)."""
    k = np.floor(rng.random(ok.shape[0]) * ok.sum(axis=1)).astype(np.int64)
    return np.argmax(np.cumsum(ok, axis=1) > k[:, None], axis=1)


def _coarse_of_groups(ctx: PlaceContext) -> np.ndarray | None:
    """The coarse group of every tie group (that of its first member op), when coarsened."""
    co = ctx.module.coarse
    if co is None or not ctx.problem.n_groups:
        return None
    st = ctx.problem.structure
    return co.group_of.numpy().astype(np.int64)[st.m_ops[st.m_ptr[:-1]]]


def random_placement(o: Random, ctx: PlaceContext) -> Placed:
    """Uniformly random allowed device per tie group (per coarse group when coarsened), seeded."""
    p = ctx.problem
    rng = np.random.default_rng(ctx.seed)
    info = {"seed": ctx.seed}
    cog = _coarse_of_groups(ctx)
    gdev = None
    if cog is not None:
        nc = int(cog.max()) + 1
        cbad = np.zeros((nc, p.n_devices), bool)
        np.logical_or.at(cbad, cog, ~p.allowed)
        if (~cbad).any(axis=1).all():
            gdev = _uniform_choice(~cbad, rng)[cog]
            info["coarse_groups"] = nc
    if gdev is None:
        gdev = _uniform_choice(p.allowed, rng) if p.n_groups else np.zeros(0, np.int64)
        if p.memory_binds and p.n_groups:  # redraw (seeded) until the placement fits, a bounded number of times
            sim = Simulator(p)
            for draw in range(1, RANDOM_DRAWS):
                if sim.feasible(gdev):
                    break
                gdev = _uniform_choice(p.allowed, rng)
            info["draws"] = draw
    if p.has_costs:
        info.update(Simulator(p).report(gdev))
    return Placed(gdev.astype(np.int16), info)


def heft(o: Heft, ctx: PlaceContext) -> Placed:
    """HEFT list scheduling over tie groups: upward rank, earliest finish time with transfer costs
    (for the concurrent executor, an edge cut between devices also costs its tensor's conversion
    out of one sub-model and into the other, ``Concurrent.convert`` per byte each)."""

    p = ctx.problem
    sim = Simulator(p)
    k = p.n_groups
    if not k:
        return Placed(np.zeros(0, np.int16))
    ob = p.objective
    s_cost, p_cost = sim.s_cost, sim.p_cost  # the edges' seconds when cut, by source and by destination
    if isinstance(ob, Concurrent) and ob.convert > 0:
        s_cost = s_cost + 2 * ob.convert * sim.s_convert
        p_cost = p_cost + 2 * ob.convert * sim.p_convert
    rank = K.upward_rank(sim.time_full, sim.s_ptr, sim.s_dst, s_cost)
    sched = np.lexsort((np.arange(k), -rank)).astype(np.int64)
    dev = np.full(k, -1, np.int64)
    if p.memory_binds:
        makespan = _heft_memory(p, sim, sched, dev, ctx, p_cost)
    else:
        makespan = K.heft_schedule(sched, sim.time_full, sim.zero, sim.p_ptr, sim.p_src, p_cost, dev)
    return Placed(dev.astype(np.int16), {"makespan": float(makespan), **sim.report(dev),
                                         "parallel": sim.latency_parallel(dev)})


def _heft_memory(p, sim, sched, dev, ctx, p_cost) -> float:
    """HEFT over the devices with room left for each group (m-ETF); InputError naming the group's
    first op, its bytes and each device's room when one fits nowhere."""

    needs = p.needs
    k = p.n_groups
    n_u = needs.u_bytes.shape[0]
    ug = np.repeat(np.arange(n_u, dtype=np.int64), np.diff(needs.u_ptr))
    order = np.argsort(needs.u_groups, kind="stable")
    gu_units = ug[order]
    gu_ptr = np.zeros(k + 1, np.int64)
    np.cumsum(np.bincount(needs.u_groups, minlength=k), out=gu_ptr[1:])
    base, peak = np.empty(p.n_devices), np.empty(p.n_devices)
    unit_on = np.empty((n_u, p.n_devices), np.bool_)
    makespan = K.heft_schedule_mem(sched, sim.time_full, sim.zero, sim.p_ptr, sim.p_src, p_cost, dev,
                                   sim.m_fixed, sim.m_act, gu_ptr, gu_units, sim.mu_bytes, sim.m_overhead,
                                   sim.capacity, base, peak, unit_on)
    if makespan < 0:
        v = int(-1 - makespan)
        op = ctx.module.graph.ops[int(p.structure.members(v)[0])].name if ctx.module is not None else f"group {v}"
        room = ", ".join(f"{d} {size_text(max(c - b - max(pk, 0.0), 0.0))} free of {size_text(c)}"
                         for d, c, b, pk in zip(p.devices, sim.capacity, base, peak) if np.isfinite(c))
        need = min(sim.m_fixed[v, d] for d in range(p.n_devices) if p.allowed[v, d])
        raise InputError(f"heft: no device has room left for the group of op '{op}' ({size_text(need)} "
                         f"besides shared constants) in earliest-finish order ({room}); use optimal")
    return float(makespan)


class _Model:
    """The optimisation model over tie groups: their costs, the copy terms and the replicated units.

    ``t_w[t]`` charges one copy of tensor ``t`` (plus the boundary penalty) for every device other
    than its producer's on which a consumer group runs; ``pair_t``/``pair_q`` list each tensor's
    consumer groups. ``r_w[u, d]`` charges replicated unit ``u`` on every device ``d`` that runs one
    of its groups (``rpair_u``/``rpair_q``)."""

    def __init__(self, problem, penalty: float):
        st = problem.structure
        self.k = problem.n_groups
        self.cost = np.asarray(problem.time)
        self.n_t = st.n_tensors
        self.t_prod = st.t_prod.astype(np.int64)
        self.t_w = np.asarray(problem.t_cost) + penalty
        self.pair_t = np.repeat(np.arange(self.n_t, dtype=np.int64), np.diff(st.t_ptr))
        self.pair_q = st.t_cons.astype(np.int64)
        self.r_w = np.asarray(problem.r_time, np.float64)
        self.n_r = self.r_w.shape[0]
        self.rpair_u = np.repeat(np.arange(self.n_r, dtype=np.int64), np.diff(problem.r_ptr))
        self.rpair_q = np.asarray(problem.r_groups, np.int64)

    def objective(self, cdev: np.ndarray) -> float:
        """Exact objective of a device per cluster."""
        unary = float(self.cost[np.arange(self.k), cdev].sum())
        d = cdev[self.pair_q]
        cross = d != cdev[self.t_prod[self.pair_t]]
        nd = self.cost.shape[1]
        td = np.unique(self.pair_t[cross] * nd + d[cross])  # one copy per (tensor, device)
        ud = np.unique(self.rpair_u * nd + cdev[self.rpair_q])  # one replicated copy per (unit, device)
        return unary + float(self.t_w[td // nd].sum()) + float(self.r_w[ud // nd, ud % nd].sum())

    def fallback(self) -> np.ndarray:
        """The better of: each cluster on its fastest device; everything on one device."""
        cands = [np.argmin(self.cost, axis=1)]
        for d in range(self.cost.shape[1]):
            if np.isfinite(self.cost[:, d]).all():
                cands.append(np.full(self.k, d))
        return min(cands, key=self.objective)


def _mincut(m: _Model) -> tuple[np.ndarray, dict]:
    """Exact two-device optimum as an s-t minimum cut (source side = device 0)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    s, t = m.k, m.k + 1
    a, b = m.cost[:, 0].copy(), m.cost[:, 1].copy()
    nr = np.bincount(m.rpair_u, minlength=m.n_r)
    one = nr[m.rpair_u] == 1  # a unit feeding one group is part of that group's cost
    np.add.at(a, m.rpair_q[one], m.r_w[m.rpair_u[one], 0])
    np.add.at(b, m.rpair_q[one], m.r_w[m.rpair_u[one], 1])
    low = np.minimum(a, b)
    rows, cols, caps, inf = [], [], [], []

    def add(r, c, w, is_inf):
        rows.append(np.asarray(r, np.int64))
        cols.append(np.asarray(c, np.int64))
        caps.append(np.asarray(w, np.float64))
        inf.append(np.broadcast_to(np.asarray(is_inf, bool), np.shape(caps[-1])))

    cl = np.arange(m.k)
    add(np.full(m.k, s), cl, np.where(np.isfinite(b), b - low, 0.0), ~np.isfinite(b))  # cut: on device 1
    add(cl, np.full(m.k, t), np.where(np.isfinite(a), a - low, 0.0), ~np.isfinite(a))  # cut: on device 0
    nq = np.bincount(m.pair_t, minlength=m.n_t)
    single = nq[m.pair_t] == 1
    p1, q1, w1 = m.t_prod[m.pair_t[single]], m.pair_q[single], m.t_w[m.pair_t[single]]
    add(p1, q1, w1, False)
    add(q1, p1, w1, False)
    multi_t = np.nonzero(nq > 1)[0]
    aux = m.k + 2 + np.arange(2 * multi_t.shape[0])
    y, z = aux[0::2], aux[1::2]  # y: "the tensor is needed on device 1", z: "... on device 0"
    add(m.t_prod[multi_t], y, m.t_w[multi_t], False)
    add(z, m.t_prod[multi_t], m.t_w[multi_t], False)
    slot = np.full(m.n_t, -1, np.int64)
    slot[multi_t] = np.arange(multi_t.shape[0])
    mp = ~single
    add(y[slot[m.pair_t[mp]]], m.pair_q[mp], np.zeros(int(mp.sum())), True)
    add(m.pair_q[mp], z[slot[m.pair_t[mp]]], np.zeros(int(mp.sum())), True)
    # a unit feeding several groups: yr "some group on device 1" pays r_w[u, 1], zr "... on 0" r_w[u, 0]
    multi_u = np.nonzero(nr > 1)[0]
    raux = aux.shape[0] + m.k + 2 + np.arange(2 * multi_u.shape[0])
    yr, zr = raux[0::2], raux[1::2]
    add(np.full(multi_u.shape[0], s), yr, m.r_w[multi_u, 1], False)
    add(zr, np.full(multi_u.shape[0], t), m.r_w[multi_u, 0], False)
    rslot = np.full(m.n_r, -1, np.int64)
    rslot[multi_u] = np.arange(multi_u.shape[0])
    mr = ~one
    add(yr[rslot[m.rpair_u[mr]]], m.rpair_q[mr], np.zeros(int(mr.sum())), True)
    add(m.rpair_q[mr], zr[rslot[m.rpair_u[mr]]], np.zeros(int(mr.sum())), True)
    aux = np.concatenate([aux, raux])
    rows, cols, caps, inf = (np.concatenate(x) for x in (rows, cols, caps, inf))
    finite_total = float(caps[~inf].sum())
    scale = _FINITE_BUDGET / finite_total if finite_total > 0 else 1.0
    icap = np.where(inf, _INF_CAP, np.rint(caps * scale)).astype(np.int64)
    live = icap > 0
    nn = m.k + 2 + aux.shape[0]
    C = sp.csr_array((icap[live].astype(np.int32), (rows[live], cols[live])), shape=(nn, nn))
    C.sum_duplicates()
    if C.nnz and C.data.max() > _INF_CAP:
        raise AssertionError("capacity overflow in the min-cut model")
    flow = maximum_flow(C, s, t)
    R = (C - flow.flow).tocsr()
    R.data = (R.data > 0).astype(np.int8)
    R.eliminate_zeros()
    reach = breadth_first_order(R, s, directed=True, return_predecessors=False)
    on0 = np.zeros(nn, bool)
    on0[reach] = True
    cdev = np.where(on0[:m.k], 0, 1)
    return cdev, {"solver": "mincut", "scale_per_second": scale, "flow": int(flow.flow_value)}


def _ilp(m: _Model, time_limit: float, mip_gap: float) -> tuple[np.ndarray, dict]:
    """Optimum for any number of devices as a MILP (HiGHS via scipy), within a time limit."""
    import scipy.sparse as sp
    from scipy.optimize import Bounds, LinearConstraint

    k, nd = m.cost.shape
    ok = np.isfinite(m.cost)
    xid = np.full((k, nd), -1, np.int64)
    xid[ok] = np.arange(int(ok.sum()))
    nx_ = int(ok.sum())
    # copy variable (t, d) exists where some consumer cluster of t may run on d
    need = np.zeros((m.n_t, nd), bool)
    for d in range(nd):
        np.logical_or.at(need[:, d], m.pair_t, ok[m.pair_q, d])
    yid = np.full((m.n_t, nd), -1, np.int64)
    yid[need] = nx_ + np.arange(int(need.sum()))
    # replicated-unit variable (u, d) exists where some group it feeds may run on d
    rneed = np.zeros((m.n_r, nd), bool)
    for d in range(nd):
        np.logical_or.at(rneed[:, d], m.rpair_u, ok[m.rpair_q, d])
    ny = nx_ + int(need.sum())
    rid = np.full((m.n_r, nd), -1, np.int64)
    rid[rneed] = ny + np.arange(int(rneed.sum()))
    nv = ny + int(rneed.sum())
    scale = 1e3 / max(float(np.where(ok, m.cost, np.inf).min(axis=1).sum() + m.t_w.sum() + m.r_w.sum()), 1e-300)
    c = np.zeros(nv)
    c[:nx_] = m.cost[ok] * scale
    tt, dd = np.nonzero(need)
    c[yid[tt, dd]] = m.t_w[tt] * scale
    uu, ud = np.nonzero(rneed)
    c[rid[uu, ud]] = m.r_w[uu, ud] * scale
    # Σ_d x[c, d] = 1
    r_one = np.repeat(np.arange(k), ok.sum(axis=1))
    A1 = sp.csr_array((np.ones(nx_), (r_one, xid[ok])), shape=(k, nv))
    # y[t, d] - x[q, d] + x[p, d] >= 0 for every consumer cluster q of t and device d it may use
    pq, pd = np.nonzero(ok[m.pair_q])
    pt, qq = m.pair_t[pq], m.pair_q[pq]
    pp = m.t_prod[pt]
    nr = pq.shape[0]
    r = np.arange(nr)
    rows = [r, r]
    cols = [yid[pt, pd], xid[qq, pd]]
    vals = [np.ones(nr), -np.ones(nr)]
    has_p = xid[pp, pd] >= 0
    rows.append(r[has_p])
    cols.append(xid[pp[has_p], pd[has_p]])
    vals.append(np.ones(int(has_p.sum())))
    # y[u, d] - x[q, d] >= 0 for every group q a replicated unit u feeds and device d it may use
    rq, rd = np.nonzero(ok[m.rpair_q])
    ru, rqq = m.rpair_u[rq], m.rpair_q[rq]
    n3 = rq.shape[0]
    r3 = nr + np.arange(n3)
    rows += [r3, r3]
    cols += [rid[ru, rd], xid[rqq, rd]]
    vals += [np.ones(n3), -np.ones(n3)]
    A2 = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nr + n3, nv))
    cons = [LinearConstraint(A1, 1, 1)]
    if nr + n3:
        cons.append(LinearConstraint(A2, 0, np.inf))
    integrality = np.zeros(nv)
    integrality[:nx_] = 1
    res = milp_within(time_limit, c, integrality=integrality, bounds=Bounds(0, 1), constraints=cons,
                      options={"mip_rel_gap": float(mip_gap)})
    info = {"solver": "ilp", "status": res.message, "variables": nv, "constraints": k + nr + n3,
            "gap": float(res.mip_gap) if getattr(res, "mip_gap", None) is not None else float("nan")}
    if res.x is None:
        info["status"] = f"{res.message}; no solution found, used the best simple placement"
        info["gap"] = float("inf")
        return m.fallback(), info
    x = np.zeros((k, nd))
    x[ok] = res.x[:nx_]
    return np.argmax(x, axis=1), info


def auto_margin(module) -> float:
    """The part of ``optimal``'s default margin that does not depend on the placement (see the module
    docstring): the calibration's held-out error when the costs were calibrated; for measured costs
    without per-op standard errors (profiled by an older hdp) and no calibration,
    :data:`~hdp.placers.options.UNCALIBRATED_MARGIN`; else 0 (modeled costs: the simulator is the
    definition; measured costs with standard errors: their noise is added per placement)."""
    meta = getattr(module, "meta", None) or {}
    if "boundary_error" in meta:
        try:
            err = float(meta["boundary_error"])
        except ValueError:
            err = float("nan")
        if np.isfinite(err) and 0 <= err < 1:
            return err
    costs = getattr(module, "costs", None)
    if costs is not None and "measured" in costs.kind and costs.op_se is None:
        return UNCALIBRATED_MARGIN
    return 0.0


def _op_se(module, devices: tuple[str, ...]) -> np.ndarray | None:
    """The cost table's per-op standard errors in ``devices`` order, or None."""
    c = getattr(module, "costs", None)
    if c is None or c.op_se is None or any(d not in c.devices for d in devices):
        return None
    return c.op_se.numpy()[:, [c.devices.index(d) for d in devices]]


def _keep_single(p, sim, gdev: np.ndarray, margin: float, info: dict, op_se: np.ndarray | None = None) -> np.ndarray:
    """The best single device instead of ``gdev`` when ``gdev`` mixes devices and is not predicted
    faster than it by at least the margin: ``margin`` combined with the noise of the predicted
    gain when ``op_se`` (per-op standard errors) is given."""
    if np.unique(gdev).size < 2:
        return gdev
    singles = _feasible_singles(p, sim)
    if not singles:
        return gdev
    d = min(singles, key=singles.get)
    lat_single = singles[d]
    lat = sim.cost(gdev)
    gain = 1.0 - lat / lat_single if lat_single > 0 else 0.0
    why = f"the margin of {margin * 100:.1f} %"
    if op_se is not None and lat_single > 0:
        noise = Z_ONE_SIDED * gain_noise(p, op_se, gdev, d) / lat_single
        total = float(np.hypot(margin, noise))
        info["margin_noise"] = noise
        why = (f"the margin of {total * 100:.1f} % ({Z_ONE_SIDED:g} standard errors of the predicted gain from the "
               f"profile's noise" + (f", with the calibration's error {margin * 100:.1f} %" if margin > 0 else "")
               + ")")
        margin = total
    info.update(predicted_gain=gain, margin=margin)
    if gain < margin:
        info["kept_single"] = (f"every op on {p.devices[d]}: the optimum ({lat * 1e3:.3f} ms) is predicted "
                               f"{gain * 100:.1f} % faster than it ({lat_single * 1e3:.3f} ms), less than {why}")
        return p.single(d).astype(np.int64)
    return gdev


def _feasible_singles(p, sim) -> dict[int, float]:
    """The objective's cost of every op on one device, for each device that can run and hold them all."""
    out = {}
    for j in range(p.n_devices):
        if p.allowed[:, j].all():
            gd = p.single(j)
            if sim.feasible(gd):
                out[j] = sim.cost(gd)
    return out


def _pipeline_if_better(p, sim, gdev: np.ndarray, info: dict) -> np.ndarray:
    """Under throughput, the best two-stage pipeline (:mod:`hdp.placers.pipelines`) instead of the
    program's answer when the simulator prices it lower: the program charges the served overhead
    per copy received (a stand-in for per subgraph), which over-counts a stage fed by several
    tensors, so on tiny models it kept one device where a cut served every 0.060 ms against 0.070."""

    priced = [(sim.cost(gd), name, gd) for name, gd, _ in pipeline_candidates(p, sim)]
    cost, name, gd = min(priced, key=lambda c: c[0], default=(np.inf, "", None))
    if cost >= info["objective"] * (1 - 1e-9):
        return gdev
    info["pipeline"] = (f"{name} ({cost * 1e3:.3f} ms per request simulated) instead of the program's optimum "
                        f"({info['objective'] * 1e3:.3f} ms): the program charges each copy received as a served "
                        f"subgraph, the simulator each subgraph once")
    info["objective"] = cost
    return np.asarray(gd, np.int64)


def _first_single_if_as_good(p, m: _Model, gdev: np.ndarray, sim) -> np.ndarray:
    """The first device (target order) that runs every group at the objective of ``gdev`` or
    below, when one does: among optima of one cost, one device (a min-cut over two equal columns
    may return either)."""
    obj = m.objective(gdev)
    for j in range(p.n_devices):
        if (p.allowed[:, j].all() and m.objective(np.full(p.n_groups, j)) <= obj * (1 + 1e-9)
                and sim.feasible(p.single(j))):
            return p.single(j).astype(np.int64)
    return gdev


#: The share of ``time_limit`` the ILP / MILP may use. What follows it (HETERO's state rule,
#: :func:`hdp.placement.subgraphs.untangle`, the singles and the report) took 1.0 s after a 10 s
#: program on llama-32l (3,882 ops, 1,461 groups; quiet host) and up to 7 s at load 7-9, where a
#: 60 s program made the placement last 61-70 s.
PROGRAM_SHARE = 0.9


def optimal(o: Optimal, ctx: PlaceContext) -> Placed:
    """Exact optimum of the sequential cost model over tie groups: min-cut (2 devices) or ILP."""
    p = ctx.problem
    sim = Simulator(p)
    if not p.n_groups:
        return Placed(np.zeros(0, np.int16))
    # per copy, for the subgraph it starts: at a served request's cost under the throughput objective
    penalty = sim.served_overhead if o.boundary_penalty is None else float(o.boundary_penalty)
    solver = o.solver or ("mincut" if p.n_devices == 2 else "ilp")
    if solver == "mincut" and p.n_devices != 2:
        raise InputError(f"optimal:mincut needs exactly 2 devices, the target has {p.n_devices}")
    m = _Model(p, penalty)
    t0 = _time.perf_counter()
    limit = o.time_limit * PROGRAM_SHARE
    constrained = isinstance(p.objective, Throughput)
    if p.memory_binds and p.n_devices > 1 and not constrained:
        # the unconstrained optimum is worth trying first only when the caps may not bind: when every
        # group on its fastest device fits (else solving it would spend the time limit for nothing)
        constrained = not sim.feasible(np.argmin(np.where(p.allowed, p.time, np.inf), axis=1))
    if p.n_devices == 1:
        gdev, info = np.zeros(m.k, np.int64), {"solver": "trivial"}
    elif constrained:
        gdev, info = solve_constrained(p, penalty, limit, o.mip_gap)
    else:
        gdev, info = _mincut(m) if solver == "mincut" else _ilp(m, limit, o.mip_gap)
        if p.memory_binds and not sim.feasible(gdev):  # the unconstrained optimum overfills a device
            over = sim.over(gdev)[0]
            left = max(limit - (_time.perf_counter() - t0), 0.1 * limit)
            gdev, info = solve_constrained(p, penalty, left, o.mip_gap)
            info["unconstrained"] = f"the unconstrained optimum needs {over[1]:.0f} bytes on {over[0]} (> {over[2]:.0f})"
            constrained = True
    note_time(f"optimal ({info['solver']})", _time.perf_counter() - t0)
    gdev = np.asarray(gdev, np.int64)
    if constrained:
        info["objective"] = sim.cost(gdev)
        if isinstance(p.objective, Throughput):
            gdev = _pipeline_if_better(p, sim, gdev, info)
        singles = _feasible_singles(p, sim)
        first = next((j for j, c in singles.items() if c <= info["objective"] * (1 + 1e-9)), None)
        if first is not None:
            gdev = p.single(first).astype(np.int64)
    else:
        info["objective"] = m.objective(gdev)
        gdev = _first_single_if_as_good(p, m, gdev, sim)
    if o.margin is None:
        fixed, se = auto_margin(ctx.module), _op_se(ctx.module, p.devices)
        if fixed > 0 or se is not None:
            gdev = _keep_single(p, sim, gdev, fixed, info, se)
    elif o.margin > 0:
        gdev = _keep_single(p, sim, gdev, float(o.margin), info)
    info.update(boundary_penalty=penalty, groups=m.k, **sim.report(gdev))
    return Placed(gdev.astype(np.int16), info)

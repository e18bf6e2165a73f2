"""Classical placers over the cost table: ``random``, ``heft`` and ``optimal``.

All of them read the per-op, per-device times of ``module.costs`` (``inf`` or an unsupported
entry in ``module.support`` forbids the device) and return one device per op; ``assign`` then
co-locates Constants, Parameters and Results as usual.

``optimal`` solves the sequential HETERO cost model of :mod:`hdp.runtime.simulate` exactly::

    minimise  Σ_i time[i, dev_i]  +  Σ_(t, d) (copy_t + boundary_penalty) · [some consumer of t on d ≠ dev(producer t)]

with two devices as an s-t minimum cut, with more as a mixed-integer program (HiGHS). The
per-subgraph overhead is not a function of single ops or tensors (it counts connected regions),
so it is not in the exact objective; ``boundary_penalty`` (default: the cost table's
``subgraph_overhead``) charges it per copy instead, which equals the subgraph count on chains
and overestimates it where one subgraph receives several tensors. ``boundary_penalty=0`` gives
the pure compute + copy optimum. Ops that ``assign`` moves (Constants and constant-only chains,
Parameters: to their first consumer; Results: to their producer) are tied to that op in the
model, so the optimum is the optimum of the placement that is finally compiled (a tie no device
can honour, e.g. a Convert only device A runs feeding an op only device B runs, is left out).

The min-cut is exact up to its integer capacities: scipy's max-flow keeps them in int32, so the
finite costs are scaled to sum to 2^30 (rounding error ≤ half a unit per term). Options, from the
partition pass (``req.options``): ``boundary_penalty`` (seconds per copy, see above),
``time_limit`` (ILP seconds, default 60; on timeout the best solution found is used, or the
better of "each op on its fastest device" and the best single device if none was), ``mip_gap``
(ILP relative gap, default 1e-4). ``optimal:ilp`` forces the ILP with two devices. ``info``
reports the objective, the gap, the solve time and the simulated latency.
"""

from __future__ import annotations

import time as _time

import numpy as np

from hdp.errors import InputError
from hdp.ir.types import Module
from hdp.placers import Placed, PlaceRequest, placer
from hdp.runtime import _kernels as K
from hdp.runtime.simulate import Simulator, cost_table, lower_bound

_INF_CAP = 2**31 - 1  # scipy's max-flow keeps capacities in int32
_FINITE_BUDGET = 2**30  # the scaled finite capacities sum to at most this, so a cut never takes _INF_CAP


def _allowed(module: Module, devices: tuple[str, ...]) -> np.ndarray:
    """bool n_ops x n_devices: the support mask, narrowed by the cost table where there is one."""
    n = module.graph.n_ops
    if module.costs is not None:
        ok = np.isfinite(cost_table(module, devices)[0])
    else:
        ok = np.ones((n, len(devices)), bool)
        s = module.support
        for j, d in enumerate(devices):
            if d in s.devices:
                ok[:, j] &= s.mask.numpy()[:, s.devices.index(d)]
    none = np.nonzero(~ok.any(axis=1))[0]
    if none.size:
        op = module.graph.ops[none[0]]
        raise InputError(f"no device of {list(devices)} can run op '{op.name}' ({op.type})")
    return ok


def _uniform_choice(ok: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Per row, a uniformly drawn column among the True ones (every row has one)."""
    k = np.floor(rng.random(ok.shape[0]) * ok.sum(axis=1)).astype(np.int64)
    return np.argmax(np.cumsum(ok, axis=1) > k[:, None], axis=1)


def _report(module: Module, sim: Simulator | None, dev: np.ndarray) -> dict:
    if sim is None or not dev.size:
        return {}
    comp, copy, nsub = sim.terms(dev)
    return {"simulated": comp + copy + sim.overhead * nsub, "compute": comp, "copy": copy,
            "subgraphs": nsub, "lower_bound": lower_bound(module, sim.devices)}


@placer("random", requires=("support",))
def random_placement(module: Module, req: PlaceRequest) -> Placed:
    """Uniformly random supported device per op (per coarse group when coarsened), seeded."""
    ok = _allowed(module, req.devices)
    rng = np.random.default_rng(req.seed)
    sim = Simulator(module, req.devices) if module.costs is not None else None
    co = module.coarse
    if co is not None and module.graph.n_ops:
        gof = co.group_of.numpy().astype(np.int64)
        gbad = np.zeros((co.n_groups, ok.shape[1]), bool)
        np.logical_or.at(gbad, gof, ~ok)
        gok = ~gbad
        if gok.any(axis=1).all():
            gdev = _uniform_choice(gok, rng)
            info = {"seed": req.seed, "groups": co.n_groups, **_report(module, sim, gdev[gof])}
            return Placed(gof.astype(np.int32), gdev.astype(np.int16), info)
    dev = _uniform_choice(ok, rng)
    return Placed.per_op(dev, {"seed": req.seed, **_report(module, sim, dev)})


@placer("heft", requires=("support", "costs"))
def heft(module: Module, req: PlaceRequest) -> Placed:
    """HEFT list scheduling: upward rank, earliest finish time with transfer costs."""
    sim = Simulator(module, req.devices)
    n = sim.n_ops
    if not n:
        return Placed.per_op(np.zeros(0, np.int16))
    _allowed(module, req.devices)
    time = sim.time
    src = sim.p_src
    dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(sim.p_ptr))
    order = np.argsort(src, kind="stable")
    s_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=s_ptr[1:])
    rank = K.upward_rank(time, s_ptr, dst[order], sim.p_cost[order])
    sched = np.lexsort((np.arange(n), -rank)).astype(np.int64)
    dev = np.full(n, -1, np.int64)
    makespan = K.heft_schedule(sched, time, sim.zero, sim.p_ptr, sim.p_src, sim.p_cost, dev)
    info = {"makespan": float(makespan), **_report(module, sim, dev),
            "parallel": sim.latency_parallel(dev)}
    return Placed.per_op(dev, info)


class _Model:
    """The optimisation model: clusters of tied ops, their costs and the copy terms."""

    def __init__(self, module: Module, sim: Simulator, penalty: float):
        g = module.graph
        n = g.n_ops
        indptr, indices = g.indptr.numpy(), g.indices.numpy()
        types = [op.type for op in g.ops]
        ok = np.isfinite(sim.time)
        root = np.arange(n, dtype=np.int64)
        for i in range(n - 1, -1, -1):  # consumers first, so chains resolve to the last consumer
            if (sim.const_like[i] or types[i] == "Parameter") and indptr[i + 1] > indptr[i]:
                r = root[indices[indptr[i]]]
                both = ok[r] & ok[i]
                if both.any():  # a tie that no device can honour is left out (assign breaks it too)
                    root[i] = r
                    ok[r] = both
        res = np.nonzero(sim.res_src >= 0)[0]
        root[res] = root[sim.res_src[res]]
        uniq, self.cluster_of = np.unique(root, return_inverse=True)
        self.cluster_of = self.cluster_of.reshape(-1)
        self.k = k = uniq.shape[0]
        cost = np.zeros((k, sim.n_devices))
        np.add.at(cost, self.cluster_of, sim.time)
        self.cost = cost
        if not np.isfinite(cost).any(axis=1).all():
            raise AssertionError("a tied cluster has no device; ties are only made when one exists")
        T = sim.tensors
        tc = np.repeat(np.arange(T.n, dtype=np.int64), np.diff(T.ptr))
        pc = self.cluster_of[T.prod][tc]
        qc = self.cluster_of[T.cons]
        keep = pc != qc
        pairs = np.unique(np.stack([tc[keep], qc[keep]], axis=1), axis=0).reshape(-1, 2)
        used = np.unique(pairs[:, 0])
        remap = np.full(T.n, -1, np.int64)
        remap[used] = np.arange(used.shape[0])
        self.n_t = used.shape[0]
        self.t_prod = self.cluster_of[T.prod[used]]
        self.t_w = T.cost[used] + penalty
        self.pair_t = remap[pairs[:, 0]]
        self.pair_q = pairs[:, 1]

    def objective(self, cdev: np.ndarray) -> float:
        """Exact objective of a device per cluster."""
        unary = float(self.cost[np.arange(self.k), cdev].sum())
        d = cdev[self.pair_q]
        cross = d != cdev[self.t_prod[self.pair_t]]
        nd = self.cost.shape[1]
        td = np.unique(self.pair_t[cross] * nd + d[cross])  # one copy per (tensor, device)
        return unary + float(self.t_w[td // nd].sum())

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
    a, b = m.cost[:, 0], m.cost[:, 1]
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
    from scipy.optimize import Bounds, LinearConstraint, milp

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
    nv = nx_ + int(need.sum())
    scale = 1e3 / max(float(np.where(ok, m.cost, np.inf).min(axis=1).sum() + m.t_w.sum()), 1e-300)
    c = np.zeros(nv)
    c[:nx_] = m.cost[ok] * scale
    tt, dd = np.nonzero(need)
    c[yid[tt, dd]] = m.t_w[tt] * scale
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
    A2 = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(nr, nv))
    cons = [LinearConstraint(A1, 1, 1)]
    if nr:
        cons.append(LinearConstraint(A2, 0, np.inf))
    integrality = np.zeros(nv)
    integrality[:nx_] = 1
    res = milp(c, integrality=integrality, bounds=Bounds(0, 1), constraints=cons,
               options={"time_limit": float(time_limit), "mip_rel_gap": float(mip_gap), "disp": False})
    info = {"solver": "ilp", "status": res.message, "variables": nv, "constraints": k + nr,
            "gap": float(res.mip_gap) if getattr(res, "mip_gap", None) is not None else float("nan")}
    if res.x is None:
        info["status"] = f"{res.message}; no solution found, used the best simple placement"
        info["gap"] = float("inf")
        return m.fallback(), info
    x = np.zeros((k, nd))
    x[ok] = res.x[:nx_]
    return np.argmax(x, axis=1), info


@placer("optimal", requires=("support", "costs"))
def optimal(module: Module, req: PlaceRequest) -> Placed:
    """Exact optimum of the sequential cost model: min-cut (2 devices) or ILP (optimal:ilp, >2)."""
    sim = Simulator(module, req.devices)
    n = sim.n_ops
    if not n:
        return Placed.per_op(np.zeros(0, np.int16))
    _allowed(module, req.devices)
    opts = req.options
    penalty = opts.get("boundary_penalty")
    penalty = sim.overhead if penalty is None else float(penalty)
    if penalty < 0:
        raise InputError(f"optimal: boundary_penalty must be >= 0, got {penalty}")
    solver = req.arg or ("mincut" if sim.n_devices == 2 else "ilp")
    if solver not in ("mincut", "ilp"):
        raise InputError(f"optimal:{req.arg}: unknown solver (use optimal:mincut or optimal:ilp)")
    if solver == "mincut" and sim.n_devices != 2:
        raise InputError(f"optimal:mincut needs exactly 2 devices, the target has {sim.n_devices}")
    m = _Model(module, sim, penalty)
    t0 = _time.perf_counter()
    if sim.n_devices == 1:
        cdev, info = np.zeros(m.k, np.int64), {"solver": "trivial"}
    elif solver == "mincut":
        cdev, info = _mincut(m)
    else:
        cdev, info = _ilp(m, opts.get("time_limit", 60.0), opts.get("mip_gap", 1e-4))
    info["solve_seconds"] = _time.perf_counter() - t0
    dev = cdev[m.cluster_of]
    info.update(objective=m.objective(cdev), boundary_penalty=penalty, clusters=m.k,
                **_report(module, sim, dev))
    return Placed.per_op(dev, info)


"""Searching for a placement of least max-load (the objective and its exact MILP are
:mod:`hdp.placement.maxload`'s): heuristics, and :func:`optimize`, which runs them and then the MILP.

- pipelines: :func:`chain_split` cuts the groups, in one order (:func:`group_orders` gives several),
  into consecutive blocks, one per device; :func:`contiguous_split` finds the best split over every
  order the groups' DAG allows (:mod:`hdp.placement.ideals`);
- single moves (:func:`~hdp.placement._maxload_kernels.ml_local_search`) from those starts and from
  seeded perturbations of the best ones (:func:`heuristic`, :func:`iterated_search`);
- :func:`multilevel`: the MILP over clusters of groups (:func:`coarsen`), projected back;
- :func:`optimize`: all of these within a time limit, then :func:`hdp.placement.maxload.solve` asked
  to beat their best, with a proven bound.
"""

from __future__ import annotations

import time as _time

import numpy as np

from hdp.errors import InputError
from hdp.placement.maxload import MaxLoad, Solved, balance_bound, device_classes, feasible, max_load, solve


class _Arrays:
    """The problem as the kernels' arrays (see :mod:`hdp.placement._maxload_kernels`)."""

    def __init__(self, problem, ml: MaxLoad):
        st = problem.structure
        self.time = np.ascontiguousarray(np.where(problem.allowed, problem.time, np.inf))
        cap_ok = ~(ml.group_bytes[:, None] > ml.capacity[None, :])
        self.time = np.where(cap_ok, self.time, np.inf)
        self.gbytes = np.ascontiguousarray(ml.group_bytes, np.float64)
        self.cap = np.ascontiguousarray(ml.capacity, np.float64)
        self.paid = np.ascontiguousarray(~ml.free_comm)
        self.t_prod = st.t_prod.astype(np.int64)
        self.t_ptr = st.t_ptr.astype(np.int64)
        self.t_cons = st.t_cons.astype(np.int64)
        self.t_cost = np.ascontiguousarray(problem.t_cost, np.float64)
        per = np.repeat(np.arange(st.n_tensors, dtype=np.int64), np.diff(self.t_ptr))
        g = np.concatenate([self.t_prod, self.t_cons])
        t = np.concatenate([np.arange(st.n_tensors, dtype=np.int64), per])
        order = np.lexsort((t, g))
        self.g_tens = t[order]
        self.g_ptr = np.zeros(problem.n_groups + 1, np.int64)
        np.cumsum(np.bincount(g, minlength=problem.n_groups), out=self.g_ptr[1:])

    def local_search(self, gd, sweeps: int = 1000) -> tuple[np.ndarray, float]:
        from hdp.placement import _maxload_kernels as K

        dev = np.array(gd, np.int64)
        v = K.ml_local_search(dev, self.time, self.gbytes, self.cap, self.paid, self.t_prod, self.t_ptr, self.t_cons,
                           self.t_cost, self.g_ptr, self.g_tens, sweeps)
        return dev, float(v)

    def kicked(self, gd, rng, kick: float) -> tuple[np.ndarray, float] | None:
        """``gd`` with a share ``kick`` of the groups moved to random devices they may run on
        (``rng``), improved by single moves, and its max load; None when the kick breaks a cap."""
        k, nd = self.time.shape
        cur = np.array(gd, np.int64)
        for g in rng.choice(k, max(1, int(kick * k)), replace=False):
            cur[g] = rng.choice(np.flatnonzero(np.isfinite(self.time[g])))
        if (np.bincount(cur, weights=self.gbytes, minlength=nd) > self.cap).any():
            return None
        return self.local_search(cur)



def group_orders(problem) -> dict[str, np.ndarray]:
    """Orders of the groups to cut into pipelines: by their first member op (a topological order of
    the ops), by their last (a training graph's backward order: the ops tied to a forward op run
    late, so blocks of it follow the backward pass, orphan backward ops beside their layer) and by
    the mean of their members."""
    st = problem.structure
    k = problem.n_groups
    pl = st.group_of >= 0
    ops = np.flatnonzero(pl)
    g = st.group_of[pl]
    first = np.full(k, np.inf)
    last = np.full(k, -np.inf)
    np.minimum.at(first, g, ops)
    np.maximum.at(last, g, ops)
    mean = np.bincount(g, weights=ops, minlength=k) / np.maximum(np.bincount(g, minlength=k), 1)
    # ops as late as possible: a topological order built from the sinks, depth first, so an input
    # (a weight, a shape) comes right before the op that reads it, not at the start
    late = _late_order(problem)
    pos = np.empty(late.shape[0], np.int64)
    pos[late] = np.arange(late.shape[0])
    lfirst = np.full(k, np.inf)
    llast = np.full(k, -np.inf)
    np.minimum.at(lfirst, g, pos[ops])
    np.maximum.at(llast, g, pos[ops])
    srt = lambda key: np.argsort(key, kind="stable").astype(np.int64)  # noqa: E731
    out = {"first": np.arange(k, dtype=np.int64), "last": srt(last), "mean": srt(mean), "late-first": srt(lfirst),
           "late-last": srt(llast)}
    fied = _fiedler(problem)
    if fied is not None:
        out["spectral"] = srt(fied)
    dfs = _dfs_order(problem)
    pos = np.empty(dfs.shape[0], np.int64)
    pos[dfs] = np.arange(dfs.shape[0])
    dfirst = np.full(k, np.inf)
    np.minimum.at(dfirst, g, pos[ops])
    out["dfs-first"] = srt(dfirst)
    # the first member that does real work (a group tying a layer's weights, forward and backward ops
    # and optimiser step sits where its forward op runs, not where its weights are read)
    ot = np.where(np.isfinite(problem.op_time), problem.op_time, 0.0).max(axis=1)[ops]
    gmax = np.zeros(k)
    np.maximum.at(gmax, g, ot)
    heavy = ot >= 0.05 * gmax[g]
    hfirst = np.full(k, np.inf)
    np.minimum.at(hfirst, g[heavy], ops[heavy])
    out["heavy-first"] = srt(np.where(np.isfinite(hfirst), hfirst, first))
    for name in ("first", "heavy-first"):
        pos = np.argsort(out[name]).astype(np.float64)
        out[name + "-attached"] = srt(_attached(problem, pos))
        out[name + "-attached-all"] = srt(_attached(problem, pos, far_share=0.0))
        out[name + "-attached-more"] = srt(_attached(problem, pos, share=0.1, rounds=5))
        out[name + "-attached-heavy"] = srt(_attached(problem, pos, share=0.1, rounds=5, to_heavy=True))
    return out


def _dfs_order(problem) -> np.ndarray:
    """A topological order of the ops that follows each chain as deep as it goes (reverse
    post-order of a depth-first search from the sources), keeping a block's ops together."""
    st = problem.structure
    n = st.n_ops
    src, dst = _op_edges(problem)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=ptr[1:])
    succ = dst[np.argsort(src, kind="stable")]
    indeg = np.bincount(dst, minlength=n)
    seen = np.zeros(n, bool)
    post = []
    for root in [i for i in range(n) if indeg[i] == 0][::-1]:
        if seen[root]:
            continue
        seen[root] = True
        stack = [(root, ptr[root])]
        while stack:
            v, i = stack[-1]
            if i < ptr[v + 1]:
                stack[-1] = (v, i + 1)
                u = int(succ[i])
                if not seen[u]:
                    seen[u] = True
                    stack.append((u, ptr[u]))
            else:
                stack.pop()
                post.append(v)
    return np.asarray(post[::-1], np.int64)


def _op_edges(problem) -> tuple[np.ndarray, np.ndarray]:
    """Forward op-level edges between placed ops: each tensor's producer op to the first member op
    of each consumer group."""
    st = problem.structure
    n = st.n_ops
    pl = st.group_of >= 0
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    first_member = np.full(problem.n_groups, n, np.int64)
    np.minimum.at(first_member, st.group_of[pl], np.flatnonzero(pl))
    src = st.t_op.astype(np.int64)[per]
    dst = first_member[st.t_cons[per]]
    keep = src < dst
    return src[keep], dst[keep]


def _light(problem, share: float = 0.05) -> np.ndarray:
    """Groups doing under ``share`` of a device's fair part of the work."""
    work = np.where(problem.allowed, problem.time, np.inf).min(axis=1)
    return work < share * work.sum() / problem.n_devices


def _with_light(problem, ml: MaxLoad, a: "_Arrays", order: np.ndarray, light: np.ndarray) -> np.ndarray | None:
    """A pipeline of the heavy groups in ``order``, then each light group on the device of the
    placed neighbour it exchanges its costliest tensor with (where it may run and fits), the
    costliest light groups first; None if the pipeline does not fit."""
    if light.all() or not light.any():
        return None
    heavy_order = order[~light[order]]
    part = chain_split(problem, ml, a, heavy_order)
    if part is None:
        return None
    st = problem.structure
    gd = np.where(light, -1, part)
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    x = np.concatenate([st.t_prod.astype(np.int64)[per], st.t_cons.astype(np.int64)])
    y = np.concatenate([st.t_cons.astype(np.int64), st.t_prod.astype(np.int64)[per]])
    w = np.concatenate([problem.t_cost[per]] * 2)
    mem = np.bincount(gd[gd >= 0], weights=a.gbytes[gd >= 0], minlength=problem.n_devices)
    for _ in range(3):  # light groups next to light groups: a few passes
        for e in np.argsort(-w, kind="stable"):
            g, h = x[e], y[e]
            if gd[g] >= 0 or gd[h] < 0:
                continue
            d = gd[h]
            if np.isfinite(a.time[g, d]) and mem[d] + a.gbytes[g] <= a.cap[d]:
                gd[g] = d
                mem[d] += a.gbytes[g]
    for g in np.flatnonzero(gd < 0):
        fits = np.isfinite(a.time[g]) & (mem + a.gbytes[g] <= a.cap)
        if not fits.any():
            return None
        d = int(np.argmin(np.where(fits, a.time[g], np.inf)))
        gd[g] = d
        mem[d] += a.gbytes[g]
    return gd


def iterated_search(problem, ml: MaxLoad, gd: np.ndarray, seconds: float, seed: int = 0,
                    kick: float = 0.05) -> np.ndarray:
    """Iterated local search from ``gd`` for about ``seconds``: move a seeded random share ``kick``
    of the groups, improve by single moves, keep the result when its max load is lower."""
    a = _Arrays(problem, ml)
    best = np.asarray(gd, np.int64)
    v = max_load(problem, ml, best)
    rng = np.random.default_rng(seed)
    end = _time.perf_counter() + seconds
    while _time.perf_counter() < end:
        tried = a.kicked(best, rng, kick)
        if tried is not None and tried[1] < v * (1 - 1e-12):
            best, v = tried
    return best


def _attached(problem, key: np.ndarray, share: float = 0.05, rounds: int = 2, to_heavy: bool = False,
              far_share: float = 0.1) -> np.ndarray:
    """``key`` with every light group (under ``share`` of the work per device) that sits far (over
    ``far_share`` of the groups away) from the group it exchanges its costliest tensor with moved
    beside it (a layer's weights, shapes and optimiser steps go with the layer), ``rounds`` times
    so chains of light groups follow; ``to_heavy``: a heavy neighbour first, whatever its tensor."""
    st = problem.structure
    k = problem.n_groups
    light = _light(problem, share)
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    a = st.t_prod.astype(np.int64)[per]
    b = st.t_cons.astype(np.int64)
    w = np.asarray(problem.t_cost[per], np.float64)
    key = np.array(key, np.float64)
    for _ in range(rounds):
        best_w = np.full(k, -1.0)
        best_k = key.copy()
        for x, y in ((a, b), (b, a)):
            rank = w + (np.where(light[y], 0.0, 1.0 + w.max()) if to_heavy else 0.0)
            order = np.argsort(rank, kind="stable")  # the costliest tensor written last wins
            xs, ys, ws = x[order], y[order], rank[order]
            m = light[xs] & (ws >= best_w[xs])
            best_k[xs[m]] = key[ys[m]] + 0.5
            np.maximum.at(best_w, xs[m], ws[m])
        far = np.abs(best_k - key) > far_share * k
        key = np.where(light & far & (best_w >= 0), best_k, key)
    return key


def _fiedler(problem) -> np.ndarray | None:
    """The Fiedler vector of the group graph weighted by transfer times: a linear arrangement that
    keeps groups exchanging costly tensors close, so cutting it into blocks cuts cheap tensors."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import laplacian

    st = problem.structure
    k = problem.n_groups
    if k < 3:
        return None
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    w = problem.t_cost[per]
    scale = w.mean() if w.size and w.mean() > 0 else 1.0
    a = st.t_prod.astype(np.int64)[per]
    b = st.t_cons.astype(np.int64)
    W = sp.coo_array((w / scale + 1e-3, (a, b)), shape=(k, k)).tocsr()
    W = W + W.T
    L = laplacian(W, normed=True).toarray()
    try:
        vals, vecs = np.linalg.eigh(L)
    except np.linalg.LinAlgError:
        return None
    return vecs[:, 1]


def _late_order(problem) -> np.ndarray:
    """A topological order of the ops emitted from the sinks backwards, depth first."""
    n = problem.structure.n_ops
    src, dst = _op_edges(problem)
    outdeg = np.bincount(src, minlength=n)
    order_e = np.argsort(dst, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dst, minlength=n), out=ptr[1:])
    preds = src[order_e]
    stack = [i for i in range(n) if outdeg[i] == 0]
    out = []
    while stack:
        v = stack.pop()
        out.append(v)
        for u in preds[ptr[v]:ptr[v + 1]][::-1]:
            outdeg[u] -= 1
            if outdeg[u] == 0:
                stack.append(int(u))
    return np.asarray(out[::-1], np.int64)


def chain_split(problem, ml: MaxLoad, arrays: _Arrays | None = None, order: np.ndarray | None = None) -> np.ndarray | None:
    """The best placement that cuts the groups, in ``order`` (default: their topological order),
    into consecutive blocks, one block per device (a pipeline; devices may stay empty): dynamic
    programming over (blocks placed, devices used per class of interchangeable devices). None if
    no such split fits."""
    from hdp.placement import _maxload_kernels as K

    a = arrays or _Arrays(problem, ml)
    k = problem.n_groups
    classes = device_classes(problem, ml)
    order = np.arange(k, dtype=np.int64) if order is None else np.asarray(order, np.int64)
    n = order.shape[0]  # the groups cut into blocks (others keep device 0 here)
    seg = []
    for c in classes:
        d = c[0]
        out = np.full((n + 1, n + 1), np.inf)
        K.ml_segment_loads(order, np.ascontiguousarray(a.time[:, d]), bool(a.paid[d]), a.gbytes, float(a.cap[d]),
                        np.isfinite(a.time[:, d]), a.t_prod, a.t_ptr, a.t_cons, a.t_cost, a.g_ptr, a.g_tens, out)
        seg.append(out)
    sizes = [len(c) for c in classes]
    import itertools

    states = sorted(itertools.product(*[range(s + 1) for s in sizes]), key=sum)
    val = {s: np.full(n + 1, np.inf) for s in states}
    back: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    val[states[0]][0] = 0.0
    for s in states:
        v = val[s]
        if not np.isfinite(v).any():
            continue
        for ci, size in enumerate(sizes):
            if s[ci] == size:
                continue
            nxt = s[:ci] + (s[ci] + 1,) + s[ci + 1:]
            cand = np.maximum(v[:, None], seg[ci])  # [b, b2]
            arg = np.argmin(cand, axis=0)
            best = cand[arg, np.arange(n + 1)]
            better = best < val[nxt]
            if better.any():
                val[nxt] = np.where(better, best, val[nxt])
                pb, pc = back.get(nxt, (np.full(n + 1, -1), np.full(n + 1, -1)))
                back[nxt] = (np.where(better, arg, pb), np.where(better, ci, pc))
    end = min(states, key=lambda s: val[s][n])
    if not np.isfinite(val[end][n]):
        return None
    gd = np.zeros(k, np.int64)
    s, b = end, n
    used = [0] * len(classes)
    while b > 0:
        pb, pc = back[s]
        a0, ci = int(pb[b]), int(pc[b])
        gd[order[a0:b]] = classes[ci][used[ci]]
        used[ci] += 1
        s = s[:ci] + (s[ci] - 1,) + s[ci + 1:]
        b = a0
    return gd


def contiguous_split(problem, ml: MaxLoad, bound: float | None = None, dag=None, **limits):
    """The best contiguous split (:func:`hdp.placement.ideals.contiguous_optimum`, its ``value``
    priced here): ``bound`` defaults to :func:`contiguous_bound` (where the DAG has many ideals);
    ``limits``: ``max_ideals``, ``max_visits``."""
    from hdp.placement.ideals import contiguous_optimum, pipeline_dag

    dag = dag or pipeline_dag(problem, ml)
    if bound is None:
        bound = lambda: contiguous_bound(problem, ml, dag)  # noqa: E731
    r = contiguous_optimum(problem, ml, _Arrays(problem, ml), device_classes(problem, ml), bound=bound, dag=dag,
                           **limits)
    if r.group_device is not None:
        r.value = max_load(problem, ml, r.group_device)
    return r


def contiguous_bound(problem, ml: MaxLoad, dag=None) -> float:
    """The max-load of one contiguous split that :func:`contiguous_split` may return (the best pipeline of its DAG's nodes in one topological order): its first
    bound. ``inf`` when that pipeline breaks a cap."""
    from hdp.placement.ideals import pipeline_dag

    dag = dag or pipeline_dag(problem, ml)
    coarse = _Coarse(problem, dag.node_of)
    cml = MaxLoad(np.bincount(dag.node_of, weights=ml.group_bytes, minlength=coarse.n_groups), ml.capacity,
                  ml.free_comm)
    gd = chain_split(coarse, cml, order=np.arange(coarse.n_groups, dtype=np.int64))
    return np.inf if gd is None else max_load(problem, ml, gd[dag.node_of])


def heuristic(problem, ml: MaxLoad, seed: int = 0, restarts: int = 20, kick: float = 0.05,
              starts: int = 3, extra_starts=()) -> tuple[np.ndarray, float]:
    """A good feasible placement fast: pipelines (:func:`chain_split`) over several orders of the
    groups (:func:`group_orders`) and the placements ``extra_starts``, each improved by moving
    single groups; then, from each of the ``starts`` best distinct ones, ``restarts`` seeded
    perturbations (a share ``kick`` of the groups moved at random) improved the same way. The
    best placement seen; ValueError if nothing fits."""
    a = _Arrays(problem, ml)
    found: dict[bytes, tuple[float, np.ndarray]] = {}
    orders = group_orders(problem)
    starts_ = [np.asarray(s, np.int64) for s in extra_starts]
    starts_ += [chain_split(problem, ml, a, order) for order in orders.values()]
    for share in (0.002, 0.02, 0.05):  # pipelines of the heavier groups, the light ones beside their neighbours
        light = _light(problem, share)
        starts_ += [_with_light(problem, ml, a, orders[o], light) for o in ("first", "heavy-first", "spectral")
                    if o in orders]
    for start in starts_:
        if start is None:
            continue
        gd, w = a.local_search(start)
        found[gd.tobytes()] = (w, gd)
    if not found:  # no pipeline fits: start from each group on its fastest device that holds it
        gd, w = a.local_search(np.argmin(a.time, axis=1))
        found[gd.tobytes()] = (w, gd)
    ranked = sorted(found.values(), key=lambda x: x[0])
    best_v, best = ranked[0]
    if not feasible(problem, ml, best):
        raise ValueError("no feasible start")
    rng = np.random.default_rng(seed)
    for v, base in ranked[:starts]:
        cur, cv = base, v
        for _ in range(restarts):
            tried = a.kicked(cur, rng, kick)
            if tried is not None and tried[1] < cv - 1e-12 * cv:
                cur, cv = tried
        if cv < best_v:
            best, best_v = cur, cv
    return best, max_load(problem, ml, best)


class _Coarse:
    """A coarser max-load problem: clusters of groups (``cluster[g]``), with the attributes
    :func:`~hdp.placement.maxload.loads` and :func:`~hdp.placement.maxload.solve` read (duck-typed
    like a PlacementProblem)."""

    def __init__(self, problem, cluster: np.ndarray):
        from types import SimpleNamespace

        st = problem.structure
        c = int(cluster.max()) + 1
        self.devices = problem.devices
        self.n_groups, self.n_devices = c, problem.n_devices
        time = np.zeros((c, self.n_devices))
        np.add.at(time, cluster, np.where(problem.allowed, problem.time, 0.0))
        bad = np.zeros((c, self.n_devices), np.int64)
        np.add.at(bad, cluster, ~problem.allowed)
        self.allowed = bad == 0
        self.time = np.where(self.allowed, time, np.inf)
        per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
        prod = cluster[st.t_prod.astype(np.int64)]
        cons = cluster[st.t_cons.astype(np.int64)]
        keep = cons != prod[per]
        pairs = np.unique(np.stack([per[keep], cons[keep]], 1), axis=0).reshape(-1, 2)
        tens = np.unique(pairs[:, 0])
        slot = np.full(st.n_tensors, -1, np.int64)
        slot[tens] = np.arange(tens.shape[0])
        t_ptr = np.zeros(tens.shape[0] + 1, np.int64)
        np.cumsum(np.bincount(slot[pairs[:, 0]], minlength=tens.shape[0]), out=t_ptr[1:])
        self.structure = SimpleNamespace(t_prod=prod[tens], t_ptr=t_ptr, t_cons=pairs[:, 1],
                                         n_tensors=int(tens.shape[0]))
        self.t_cost = np.asarray(problem.t_cost)[tens]
        self.r_time = np.zeros((0, self.n_devices))
        self.r_ptr = np.zeros(1, np.int64)
        self.r_groups = np.zeros(0, np.int64)


def coarsen(problem, ml: MaxLoad, target: int) -> np.ndarray:
    """Cluster per group: groups joined along their costliest tensors (heavy-edge matching rounds)
    until at most ``target`` clusters remain or nothing may join; a cluster stays within a quarter
    of a device's fair share of work, the smallest cap and the devices all its groups may use."""
    from scipy.cluster.hierarchy import DisjointSet

    st = problem.structure
    k, nd = problem.n_groups, problem.n_devices
    best = np.where(problem.allowed, problem.time, np.inf).min(axis=1)
    limit = best.sum() / nd / 4
    cap = float(ml.capacity.min())
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    a = st.t_prod.astype(np.int64)[per]
    b = st.t_cons.astype(np.int64)
    w = problem.t_cost[per]
    order = np.argsort(-w, kind="stable")
    ds = DisjointSet(range(k))
    work = best.copy()
    nbytes = ml.group_bytes.copy()
    allowed = problem.allowed.copy()
    n = k
    while n > target:
        merged = False
        used: set[int] = set()
        for e in order:
            ra, rb = ds[int(a[e])], ds[int(b[e])]
            if ra == rb or ra in used or rb in used:
                continue
            both = allowed[ra] & allowed[rb]
            if not both.any() or work[ra] + work[rb] > limit or nbytes[ra] + nbytes[rb] > cap:
                continue
            ds.merge(ra, rb)
            r = ds[ra]
            work[r] = work[ra] + work[rb]
            nbytes[r] = nbytes[ra] + nbytes[rb]
            allowed[r] = both
            used.update((ra, rb))
            n -= 1
            merged = True
            if n <= target:
                break
        if not merged:
            break
    roots = np.array([ds[g] for g in range(k)])
    return np.unique(roots, return_inverse=True)[1].reshape(-1).astype(np.int64)


def multilevel(problem, ml: MaxLoad, target: int = 48, time_limit: float = 15.0) -> np.ndarray | None:
    """Coarsen to about ``target`` clusters, solve that problem with the MILP, project back and
    improve by single moves. None when the coarse problem has no placement within the caps."""
    cluster = coarsen(problem, ml, target)
    coarse = _Coarse(problem, cluster)
    cml = MaxLoad(np.bincount(cluster, weights=ml.group_bytes, minlength=coarse.n_groups), ml.capacity, ml.free_comm)
    try:
        s = solve(coarse, cml, time_limit=time_limit)
    except InputError:
        return None
    gd, _ = _Arrays(problem, ml).local_search(np.asarray(s.group_device, np.int64)[cluster])
    return gd


def optimize(problem, ml: MaxLoad, time_limit: float = 60.0, seed: int = 0, exact: bool = True) -> Solved:
    """The best placement hdp finds in about ``time_limit`` seconds, and a proven bound: the best
    contiguous split (:func:`contiguous_split`, exact unless its DAG has too
    many ideals or its walk outgrows a quarter of the time), the heuristic from it and from
    pipelines of several orders (:func:`heuristic`, not timed out), the multilevel MILP (:func:`multilevel`, a
    quarter of what is left, at most 15 s), on more than 48 groups an iterated local search
    (:func:`iterated_search`, 40 % of the rest), then, with ``exact``, the MILP over every group
    asked to beat the best of those in the rest (at least 1 s). The bound is HiGHS's, or
    :func:`balance_bound` when HiGHS stopped before it had one.
    ``info["trajectory"]``: (seconds, max-load, stage) each time the best improved;
    ``info["contiguous"]``: the contiguous DP's value, whether it is proven and its counts."""
    t0 = _time.perf_counter()
    traj = []

    def note(gd, stage):
        v = max_load(problem, ml, gd)
        if not traj or v < traj[-1][1]:
            traj.append((_time.perf_counter() - t0, v, stage))
            return True
        return False

    # about a quarter of the time (the walk visits some 4 million ideal pairs a second on one core)
    cont = contiguous_split(problem, ml, max_visits=int(1e6 * time_limit))
    starts = []
    if cont.group_device is not None:
        note(cont.group_device, "contiguous dp")
        starts.append(cont.group_device)
    best, _ = heuristic(problem, ml, seed=seed, extra_starts=starts)
    note(best, "heuristic")
    if problem.n_groups > 48:
        left = time_limit - (_time.perf_counter() - t0)
        ml_gd = multilevel(problem, ml, time_limit=max(1.0, min(15.0, left / 4)))
        if ml_gd is not None and feasible(problem, ml, ml_gd) and note(ml_gd, "multilevel"):
            best = ml_gd
    left = time_limit - (_time.perf_counter() - t0)
    if left > 10 and problem.n_groups > 48:  # big problems: the MILP rarely improves; search first
        ils = iterated_search(problem, ml, best, 0.4 * left, seed=seed + 1)
        if note(ils, "iterated search"):
            best = ils
    if not exact:
        return Solved(best.astype(np.int16), traj[-1][1], float("nan"), "heuristic", _time.perf_counter() - t0,
                      {"trajectory": traj, "contiguous": {"value": cont.value, "exact": cont.exact, **cont.info}})
    left = max(1.0, time_limit - (_time.perf_counter() - t0))
    s = solve(problem, ml, time_limit=left, incumbent=best)
    if note(s.group_device, "milp"):
        best = s.group_device
    s.info["trajectory"] = traj
    s.info["contiguous"] = {"value": cont.value, "exact": cont.exact, **cont.info}
    bound = s.bound
    if not np.isfinite(bound):  # HiGHS stopped before it had a bound
        bound = balance_bound(problem, ml)
        s.info["bound"] = "balance of the work alone (the MILP had none yet)"
    return Solved(np.asarray(best, np.int16), traj[-1][1], min(bound, traj[-1][1]), s.status,
                  _time.perf_counter() - t0, s.info)

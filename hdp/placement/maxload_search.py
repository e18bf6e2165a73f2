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

import itertools
import time as _time
from types import SimpleNamespace

import numpy as np

from hdp.base.errors import InputError
from hdp.placement import _maxload_kernels as K
from hdp.placement.group_orders import group_orders, light_groups
from hdp.placement.ideals import contiguous_optimum, pipeline_dag
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


#: Positions a pipeline's blocks may start at: every position of an order of up to
#: :data:`CHAIN_EXACT` groups (the exact best pipeline), else :data:`CHAIN_POSITIONS` at equal shares
#: of the work (memory and time bounded whatever the graph's size; the single moves after it shift
#: the blocks' edges).
CHAIN_EXACT = 1024
CHAIN_POSITIONS = 256


def _cuts(problem, order: np.ndarray, positions: int = CHAIN_POSITIONS) -> np.ndarray:
    """The positions of ``order`` where blocks may start and end (0 and its length included): all of
    them up to :data:`CHAIN_EXACT` groups, else ``positions`` + 1 at equal shares of the groups'
    fastest times."""
    n = order.shape[0]
    if n <= CHAIN_EXACT:
        return np.arange(n + 1, dtype=np.int64)
    t = np.where(problem.allowed, problem.time, np.inf).min(axis=1)[order]
    work = np.concatenate([[0.0], np.cumsum(np.where(np.isfinite(t), t, 0.0) + 1e-12)])
    at = np.searchsorted(work, np.linspace(0.0, work[-1], positions + 1), side="left")
    return np.unique(np.concatenate([[0, n], np.clip(at, 0, n)])).astype(np.int64)


def chain_split(problem, ml: MaxLoad, arrays: _Arrays | None = None, order: np.ndarray | None = None) -> np.ndarray | None:
    """The best placement that cuts the groups, in ``order`` (default: their topological order),
    into consecutive blocks, one block per device (a pipeline; devices may stay empty): dynamic
    programming over (blocks placed, devices used per class of interchangeable devices). Blocks
    start at any position of up to :data:`CHAIN_EXACT` groups (exact), else at
    :data:`CHAIN_POSITIONS` positions spread by work (:func:`_cuts`). None if no such split fits."""

    a = arrays or _Arrays(problem, ml)
    k = problem.n_groups
    classes = device_classes(problem, ml)
    order = np.arange(k, dtype=np.int64) if order is None else np.asarray(order, np.int64)
    cuts = _cuts(problem, order)
    n = cuts.shape[0] - 1  # the blocks end at cuts[1..n]
    seg = []
    for c in classes:
        d = c[0]
        out = np.full((n + 1, n + 1), np.inf)
        K.ml_segment_loads(order, cuts, np.ascontiguousarray(a.time[:, d]), bool(a.paid[d]), a.gbytes,
                           float(a.cap[d]), np.isfinite(a.time[:, d]), a.t_prod, a.t_ptr, a.t_cons, a.t_cost,
                           a.g_ptr, a.g_tens, out)
        seg.append(out)
    sizes = [len(c) for c in classes]

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
        gd[order[cuts[a0]:cuts[b]]] = classes[ci][used[ci]]
        used[ci] += 1
        s = s[:ci] + (s[ci] - 1,) + s[ci + 1:]
        b = a0
    return gd


def contiguous_split(problem, ml: MaxLoad, bound: float | None = None, dag=None, **limits):
    """The best contiguous split (:func:`hdp.placement.ideals.contiguous_optimum`, its ``value``
    priced here): ``bound`` defaults to :func:`contiguous_bound` (where the DAG has many ideals);
    ``limits``: ``max_ideals``, ``max_visits``."""

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

    dag = dag or pipeline_dag(problem, ml)
    coarse = _Coarse(problem, dag.node_of)
    cml = MaxLoad(np.bincount(dag.node_of, weights=ml.group_bytes, minlength=coarse.n_groups), ml.capacity,
                  ml.free_comm)
    gd = chain_split(coarse, cml, order=np.arange(coarse.n_groups, dtype=np.int64))
    return np.inf if gd is None else max_load(problem, ml, gd[dag.node_of])


def heuristic(problem, ml: MaxLoad, seed: int = 0, restarts: int = 20, kick: float = 0.05,
              starts: int = 3, extra_starts=(), seconds: float | None = None) -> tuple[np.ndarray, float]:
    """A good feasible placement fast: pipelines (:func:`chain_split`) over several orders of the
    groups (:func:`group_orders`) and the placements ``extra_starts``, each improved by moving
    single groups; then, from each of the ``starts`` best distinct ones, ``restarts`` seeded
    perturbations (a share ``kick`` of the groups moved at random) improved the same way. The
    best placement seen; ValueError if nothing fits. ``seconds``: after that long no further
    pipeline or perturbation is tried (the first pipeline is)."""
    end = np.inf if seconds is None else _time.perf_counter() + seconds
    a = _Arrays(problem, ml)
    found: dict[bytes, tuple[float, np.ndarray]] = {}
    orders = group_orders(problem)
    def pipelines():
        yield from (np.asarray(s, np.int64) for s in extra_starts)
        for order in orders.values():
            yield chain_split(problem, ml, a, order)
        for share in (0.002, 0.02, 0.05):  # pipelines of the heavier groups, the light ones beside their neighbours
            light = light_groups(problem, share)
            for o in ("first", "heavy-first", "spectral"):
                if o in orders:
                    yield _with_light(problem, ml, a, orders[o], light)

    for start in pipelines():
        if start is not None:
            gd, w = a.local_search(start)
            found[gd.tobytes()] = (w, gd)
        if found and _time.perf_counter() > end:
            break
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
            if _time.perf_counter() > end:
                break
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
    asked to beat the best of those in the rest (at least 1 s, or a tenth of a shorter limit). The bound is HiGHS's, or
    :func:`balance_bound` when HiGHS stopped before it had one. Over :data:`LARGE` groups it works
    on clusters first (:func:`_optimize_large`), within ``time_limit`` whatever the size.
    ``info["trajectory"]``: (seconds, max-load, stage) each time the best improved;
    ``info["contiguous"]``: the contiguous DP's value, whether it is proven and its counts."""
    t0 = _time.perf_counter()
    if problem.n_groups > LARGE:
        return _optimize_large(problem, ml, time_limit, seed, t0)
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
    best, _ = heuristic(problem, ml, seed=seed, extra_starts=starts,
                        seconds=max(0.0, 0.5 * time_limit - (_time.perf_counter() - t0)))
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
    left = max(min(1.0, 0.1 * time_limit), time_limit - (_time.perf_counter() - t0))
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


#: Groups above which :func:`optimize` places clusters of groups first (:func:`_optimize_large`): the
#: searches over every group (orders, pipelines, the contiguous DP, the MILP) grow faster than the
#: graph, clusters keep time and memory linear.
LARGE = 20_000
#: Clusters :func:`_optimize_large` coarsens to.
LARGE_CLUSTERS = 2_000


def _optimize_large(problem, ml: MaxLoad, time_limit: float, seed: int, t0: float) -> Solved:
    """:func:`optimize` of a problem over :data:`LARGE` groups: coarsen to :data:`LARGE_CLUSTERS`
    clusters (:func:`coarsen`), pipelines of the clusters in topological order and by their mean
    position improved by single moves, the MILP over the clusters asked to beat them in 60 % of
    what is left, projected back and improved by single moves, then iterated local search over
    every group while time is left. Status ``heuristic``: the bound is :func:`balance_bound`'s (the
    clusters' MILP bounds only the clustered problem)."""
    traj = []

    def elapsed() -> float:
        return _time.perf_counter() - t0

    def note(gd, stage, prob=problem, m=ml):
        v = max_load(prob, m, gd)
        if prob is problem and (not traj or v < traj[-1][1]):
            traj.append((elapsed(), v, stage))
        return v

    cluster = coarsen(problem, ml, LARGE_CLUSTERS)
    coarse = _Coarse(problem, cluster)
    cml = MaxLoad(np.bincount(cluster, weights=ml.group_bytes, minlength=coarse.n_groups), ml.capacity,
                  ml.free_comm)
    ca = _Arrays(coarse, cml)
    k = problem.n_groups
    first = np.full(coarse.n_groups, np.inf)
    np.minimum.at(first, cluster, np.arange(k))
    mean = np.bincount(cluster, weights=np.arange(k, dtype=np.float64)) / np.bincount(cluster)
    best, best_v = None, np.inf
    for key in (first, mean):
        gd = chain_split(coarse, cml, ca, np.argsort(key, kind="stable").astype(np.int64))
        if gd is None:
            continue
        gd, v = ca.local_search(gd)
        if feasible(coarse, cml, gd) and v < best_v:
            best, best_v = gd, v
    if best is None:  # no pipeline of the clusters fits: each on its fastest device that holds it
        best, best_v = ca.local_search(np.argmin(ca.time, axis=1))
    stage = "clusters' pipelines"
    left = time_limit - elapsed()
    if left > 2:
        try:
            s = solve(coarse, cml, time_limit=0.6 * left, incumbent=best)
            if s.value < best_v:
                best, best_v, stage = np.asarray(s.group_device, np.int64), s.value, "clusters' milp"
        except InputError:
            pass
    fa = _Arrays(problem, ml)
    gd = np.asarray(best, np.int64)[cluster]
    note(gd, stage)
    while elapsed() < time_limit:  # single moves, a few sweeps at a time so the limit holds
        moved, _ = fa.local_search(gd, sweeps=5)
        if (moved == gd).all():
            break
        gd = moved
    if not feasible(problem, ml, gd):
        raise ValueError("no feasible placement of the clusters")
    note(gd, "single moves")
    left = time_limit - elapsed() - 0.05 * time_limit  # the bound below takes about that
    if left > 1:  # kicks of a few hundred groups: a share of 100,000 would undo the placement
        ils = iterated_search(problem, ml, gd, left, seed=seed + 1, kick=min(0.05, 500 / k))
        if max_load(problem, ml, ils) < max_load(problem, ml, gd):
            gd = ils
            note(gd, "iterated search")
    value = max_load(problem, ml, gd)
    bound = min(balance_bound(problem, ml), value)
    info = {"trajectory": traj, "bound": "balance of the work alone (the MILP ran over clusters)",
            "clusters": int(coarse.n_groups),
            "contiguous": {"value": float("nan"), "exact": False, "skipped": f"over {LARGE} groups"}}
    return Solved(gd.astype(np.int16), value, bound, "heuristic", elapsed(), info)

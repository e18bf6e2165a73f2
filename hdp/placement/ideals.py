"""The exact max-load optimum over contiguous splits: chains of ideals of a DAG over the groups.

A *contiguous* split cuts the groups into consecutive blocks of a pipeline: there is a chain of
ideals (sets closed under predecessors) ∅ = I0 ⊂ I1 ⊂ … ⊂ Im = every group, and device j holds the
difference I_j ∖ I_(j-1). This is the space the throughput DP of Tarnawski et al. (NeurIPS 2020,
msr-fiddle/dnn-partitioning) searches; :func:`contiguous_optimum` finds its best split under
hdp's max-load rule (:mod:`hdp.placement.maxload`; :func:`~hdp.placement.maxload_search.contiguous_split`
calls it), within the memory caps, the allowed devices
and the ties (a group is never cut), with identical devices counted rather than told apart.

The DAG (:func:`pipeline_dag`) is the groups' graph read in the forward direction:

- an edge between two forward ops orders their groups;
- a training graph's backward ops (``MaxLoad.backward``) run in the reverse order of their
  forward ops and share a group with them (the colour classes), so their edges do not order
  groups; a group of backward ops alone (a loss, a gradient sum with no forward op) is placed by
  its backward edges read in reverse, as if it were the forward op it mirrors;
- groups on a cycle of those edges become one node, and a node that does no work on any device
  it may use and touches one other node (a weight, a shape) joins that node (that never raises a
  load: it moves no work and cuts no more tensors) when its bytes cannot break a cap.

The DP pushes from every ideal J, in order of size, to each ideal I above it (a depth-first walk
adding one node at a time, the block I ∖ J's compute, bytes and transfers kept incrementally), over
states counting the devices used in each class of interchangeable devices. A block whose compute
already reaches the best value known is not grown further (compute only grows with the block),
which is what keeps the walk small: the blocks worth looking at hold about a device's share of
the work.
"""

from __future__ import annotations

import time as _time
from dataclasses import dataclass, field

import numpy as np

from hdp.ir.build import topological_order
from hdp.placement import _maxload_kernels as K

#: Ideals enumerated at most (each is a bitset row; beyond this the DP gives up).
MAX_IDEALS = 200_000
#: Ideal pairs the DP visits at most before it stops with what it has.
MAX_VISITS = 400_000_000


@dataclass(frozen=True)
class PipelineDag:
    """A DAG over nodes, each a set of groups (see the module docstring)."""

    node_of: np.ndarray  # int64 per group
    pred_ptr: np.ndarray  # int64, n_nodes + 1
    pred_idx: np.ndarray  # int64
    merged: dict = field(default_factory=dict)  # how many groups each rule joined

    @property
    def n_nodes(self) -> int:
        return self.pred_ptr.shape[0] - 1


def pipeline_dag(problem, ml) -> PipelineDag:
    """The DAG whose ideals :func:`contiguous_optimum` chains (see the module docstring)."""
    from scipy.sparse import coo_array
    from scipy.sparse.csgraph import connected_components

    st = problem.structure
    k = problem.n_groups
    g_of = st.group_of.astype(np.int64)
    src, dst = st.h_src.astype(np.int64), st.h_dst.astype(np.int64)
    bw = np.zeros(st.n_ops, bool) if ml.backward is None else np.asarray(ml.backward, bool)
    gs, gd = g_of[src], g_of[dst]
    keep = (gs >= 0) & (gd >= 0) & (gs != gd)
    src, dst, gs, gd = src[keep], dst[keep], gs[keep], gd[keep]
    has_fwd = np.zeros(k, bool)
    placed = g_of >= 0
    has_fwd[g_of[placed & ~bw]] = True
    orphan = ~has_fwd
    fwd = ~bw[src] & ~bw[dst]
    mirror = bw[src] & bw[dst] & (orphan[gs] | orphan[gd])
    a = np.concatenate([gs[fwd], gd[mirror]])
    b = np.concatenate([gd[fwd], gs[mirror]])
    # groups on a cycle of those edges share a node
    n_scc, scc = connected_components(coo_array((np.ones(a.shape[0]), (a, b)), shape=(k, k)).tocsr(),
                                      directed=True, connection="strong")
    node = scc.astype(np.int64)
    merged = {"cycles": int(k - n_scc)}
    node, n_leaf = _join_idle_leaves(problem, ml, node)
    merged["idle leaves"] = n_leaf
    node = np.unique(node, return_inverse=True)[1].reshape(-1).astype(np.int64)
    n = int(node.max()) + 1 if k else 0
    ea, eb = node[a], node[b]
    m = ea != eb
    pairs = np.unique(np.stack([eb[m], ea[m]], 1), axis=0).reshape(-1, 2)  # (node, predecessor)
    order = _topological(n, pairs[:, 1], pairs[:, 0])
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    node = rank[node]
    pairs = np.unique(rank[pairs], axis=0).reshape(-1, 2)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=ptr[1:])
    return PipelineDag(node, ptr, pairs[:, 1].astype(np.int64), merged)


def _topological(n: int, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    return np.asarray(topological_order(n, src, dst), np.int64)


def _join_idle_leaves(problem, ml, node: np.ndarray) -> tuple[np.ndarray, int]:
    """``node`` with every node that does no work on the devices its neighbour may use, may run
    wherever that neighbour may, and exchanges tensors with that one node alone, joined to it
    (repeatedly). Its bytes move too, so a node holding bytes joins only when the caps cannot
    bind (all bytes fit the smallest cap)."""
    st = problem.structure
    caps = ml.capacity[np.isfinite(ml.capacity)]
    bytes_free = caps.size == 0 or float(ml.group_bytes.sum()) <= float(caps.min())
    n = int(node.max()) + 1 if node.size else 0
    nd = problem.n_devices
    allowed = np.ones((n, nd), bool)
    np.logical_and.at(allowed, node, problem.allowed)
    work = np.zeros((n, nd))
    np.add.at(work, node, np.where(problem.allowed, problem.time, 0.0))
    nbytes = np.bincount(node, weights=ml.group_bytes, minlength=n)
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    ta = st.t_prod.astype(np.int64)[per]
    tb = st.t_cons.astype(np.int64)
    nbr: list[set[int]] = [set() for _ in range(n)]
    for x, y in zip(node[ta].tolist(), node[tb].tolist()):
        if x != y:
            nbr[x].add(y)
            nbr[y].add(x)
    parent = np.arange(n)
    joined = 0
    changed = True
    while changed:
        changed = False
        for w in range(n):
            if parent[w] != w or len(nbr[w]) != 1:
                continue
            c = next(iter(nbr[w]))
            on = allowed[c]
            if not (allowed[w] >= on).all() or (work[w][on] != 0).any() or (nbytes[w] > 0 and not bytes_free):
                continue
            parent[w] = c
            nbr[c].discard(w)
            nbr[w].clear()
            allowed[c] &= allowed[w]
            work[c] += work[w]
            nbytes[c] += nbytes[w]
            joined += 1
            changed = True
    root = parent.copy()
    for i in range(n):
        r = i
        while root[r] != r:
            r = root[r]
        root[i] = r
    return root[node], joined


@dataclass
class Contiguous:
    """The result of :func:`contiguous_optimum`."""

    group_device: np.ndarray | None  # None: no contiguous split within the caps
    value: float
    exact: bool  # the best contiguous split (False: the ideals or the walk's budget ran out)
    info: dict


#: With fewer ideals than this the walk needs no first bound (a callable ``bound`` is not called).
SMALL = 512


def contiguous_optimum(problem, ml, arrays, classes, bound=np.inf, max_ideals: int = MAX_IDEALS,
                       max_visits: int = MAX_VISITS, dag: PipelineDag | None = None) -> Contiguous:
    """The contiguous split of least max-load (see the module docstring); its ``value`` is the
    DP's own sum. ``arrays``: the problem as the max-load kernels' arrays (``time`` with ``inf``
    where a group may not run, ``gbytes``, ``cap``, ``paid``, tensors and ``g_ptr``/``g_tens``, see
    :mod:`hdp.placement._maxload_kernels`); ``classes``: every device in a class of interchangeable ones
    (:func:`hdp.placement.maxload.device_classes`). ``bound``: a max-load some contiguous split
    reaches (it prunes the walk; the result is found even when it equals it), or a function that
    computes one, called only when the DAG has :data:`SMALL` ideals or more. ``exact`` False
    when the DAG has more than ``max_ideals`` ideals (no split then) or the walk stopped after
    ``max_visits`` ideal pairs (the best split found so far, if any).
    :func:`hdp.placement.maxload_search.contiguous_split` gives it those arguments."""

    t0 = _time.perf_counter()
    dag = dag or pipeline_dag(problem, ml)
    n = dag.n_nodes
    info = {"nodes": n, "merged": dag.merged}
    keys = np.random.default_rng(0x1de415).integers(1, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)
    words = max(1, (n + 63) // 64)
    cap_ideals = int(min(max_ideals, max(1000, 400_000_000 // (8 * words + 64))))
    for cap in sorted({min(4096, cap_ideals), min(65536, cap_ideals), cap_ideals}):  # small tables are quick to make
        bits, tptr, tnode, tchild, count = K.ml_ideals(n, dag.pred_ptr, dag.pred_idx, keys, cap)
        if count >= 0:
            break
    info["ideals"] = int(count) if count >= 0 else f"more than {cap_ideals}"
    if count < 0:
        info["seconds"] = _time.perf_counter() - t0
        return Contiguous(None, np.inf, False, info)
    if callable(bound):
        bound = bound() if count >= SMALL else np.inf
    a = arrays
    rep = [c[0] for c in classes]
    order = np.argsort(dag.node_of, kind="stable")
    node_ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(dag.node_of, minlength=n), out=node_ptr[1:])
    time_cls = np.ascontiguousarray(a.time[:, rep])
    paid = np.ascontiguousarray(a.paid[rep])
    caps = np.ascontiguousarray(a.cap[rep])
    sizes = np.array([len(c) for c in classes], np.int64)
    full = count - 1
    for b in ([bound * (1 + 1e-9) + 1e-300] if np.isfinite(bound) else []) + [np.inf]:
        dp, back_j, back_c, visits, complete = K.ml_ideal_dp(
            tptr, tnode, tchild, node_ptr, order.astype(np.int64), time_cls, paid, caps, sizes, a.gbytes, a.t_prod,
            a.t_ptr, a.t_cons, a.t_cost, a.g_ptr, a.g_tens, b, max_visits)
        info["pairs"] = info.get("pairs", 0) + int(visits)
        s = int(np.argmin(dp[:, full]))
        if np.isfinite(dp[s, full]) or not complete:
            break  # else no contiguous split reaches the bound given: search without it
    if not np.isfinite(dp[s, full]):
        info["seconds"] = _time.perf_counter() - t0
        return Contiguous(None, np.inf, complete, info)
    s_end = s
    stride = np.cumprod(np.concatenate([[1], sizes[:-1] + 1])).astype(np.int64)
    gd = np.full(problem.n_groups, -1, np.int64)
    used = [0] * len(classes)
    i = full
    blocks = 0
    while i != 0:
        j, c = int(back_j[s, i]), int(back_c[s, i])
        diff = bits[i] & ~bits[j]
        members = np.flatnonzero(np.unpackbits(diff.view(np.uint8), bitorder="little")[:n])
        for v in members:
            gd[order[node_ptr[v]:node_ptr[v + 1]]] = classes[c][used[c]]
        used[c] += 1
        blocks += 1
        s -= int(stride[c])
        i = j
    info.update(blocks=blocks, seconds=_time.perf_counter() - t0)
    return Contiguous(gd, float(dp[s_end, full]), complete, info)

"""Orders of a max-load problem's groups to cut into pipelines (:func:`group_orders`, used by
:mod:`hdp.placement.maxload_search`): topological orders by first, last, mean and late position, a
depth-first order, the spectral order of the transfer-weighted group graph (sparse, linear memory),
and each with its light groups attached beside their neighbours. Every order is O(groups + tensors)
in time and memory.
"""

from __future__ import annotations

import warnings

import numpy as np


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


def light_groups(problem, share: float = 0.05) -> np.ndarray:
    """Groups doing under ``share`` of a device's fair part of the work."""
    work = np.where(problem.allowed, problem.time, np.inf).min(axis=1)
    return work < share * work.sum() / problem.n_devices


def _attached(problem, key: np.ndarray, share: float = 0.05, rounds: int = 2, to_heavy: bool = False,
              far_share: float = 0.1) -> np.ndarray:
    """``key`` with every light group (under ``share`` of the work per device) that sits far (over
    ``far_share`` of the groups away) from the group it exchanges its costliest tensor with moved
    beside it (a layer's weights, shapes and optimiser steps go with the layer), ``rounds`` times
    so chains of light groups follow; ``to_heavy``: a heavy neighbour first, whatever its tensor."""
    st = problem.structure
    k = problem.n_groups
    light = light_groups(problem, share)
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    a = st.t_prod.astype(np.int64)[per]
    b = st.t_cons.astype(np.int64)
    w = np.asarray(problem.t_cost[per], np.float64)
    key = np.array(key, np.float64)
    for _ in range(rounds):
        best_w = np.full(k, -1.0)
        best_k = key.copy()
        for x, y in ((a, b), (b, a)):
            rank = w + (np.where(light[y], 0.0, 1.0 + (w.max() if w.size else 0.0)) if to_heavy else 0.0)
            order = np.argsort(rank, kind="stable")  # the costliest tensor written last wins
            xs, ys, ws = x[order], y[order], rank[order]
            m = light[xs] & (ws >= best_w[xs])
            best_k[xs[m]] = key[ys[m]] + 0.5
            np.maximum.at(best_w, xs[m], ws[m])
        far = np.abs(best_k - key) > far_share * k
        key = np.where(light & far & (best_w >= 0), best_k, key)
    return key


#: Work of LOBPCG for the Fiedler vector, in group-iterations: a start order for the search, not a
#: result, so it is refined from the topological order for a bounded time (at most 200 iterations,
#: at least 5; 25 on 20,000 groups) and used as far as it got.
FIEDLER_WORK = 500_000


def _fiedler(problem) -> np.ndarray | None:
    """The Fiedler vector of the group graph weighted by transfer times: a linear arrangement that
    keeps groups exchanging costly tensors close, so cutting it into blocks cuts cheap tensors.

    Sparse throughout (memory linear in the groups and tensors): LOBPCG on the normalised
    Laplacian, started from the groups' topological positions and kept orthogonal to the
    Laplacian's null vector, for at most :data:`FIEDLER_WORK` group-iterations; the sign is the one
    that keeps the topological order's direction (so the order is deterministic)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import laplacian
    from scipy.sparse.linalg import lobpcg

    st = problem.structure
    k = problem.n_groups
    if k < 3:
        return None
    per = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    w = problem.t_cost[per]
    w = np.where(np.isfinite(w), w, 0.0)
    scale = w.mean() if w.size and w.mean() > 0 else 1.0
    a = st.t_prod.astype(np.int64)[per]
    b = st.t_cons.astype(np.int64)
    keep = a != b
    W = sp.coo_array((w[keep] / scale + 1e-3, (a[keep], b[keep])), shape=(k, k)).tocsr()
    W = (W + W.T).tocsr()
    L = laplacian(W, normed=True)
    null = np.sqrt(np.asarray(W.sum(axis=1)).ravel())  # the normalised Laplacian's null vector
    if not (null > 0).all():  # an isolated group: the graph is not connected enough to arrange
        null = np.where(null > 0, null, 1e-12)
    y = (null / np.linalg.norm(null))[:, None]
    x = np.arange(k, dtype=np.float64) - (k - 1) / 2  # the groups' topological positions
    x -= y[:, 0] * (y[:, 0] @ x)
    x = x[:, None] / np.linalg.norm(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "not reaching the requested tolerance": used as far as it got
        try:
            if k < 16:  # LOBPCG wants a few times more rows than its block: exact and tiny
                vals, vecs = np.linalg.eigh(L.toarray())
                v = vecs[:, 1]
            else:
                _, vecs = lobpcg(L, x, Y=y, largest=False, tol=1e-8,
                                 maxiter=int(np.clip(FIEDLER_WORK // k, 5, 200)))
                v = vecs[:, 0]
        except (np.linalg.LinAlgError, ValueError):
            return None
    if not np.isfinite(v).all():
        return None
    return v if v @ x[:, 0] >= 0 else -v


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

"""One round of graph parsing: every node keeps its dominant edge, groups grow along kept edges.

Plain numpy, so it is tested without torch. The network (:mod:`hdp.learn.model`) scores the edges,
decides which dominant edges to keep (above a threshold, or sampled), and calls :func:`merge`.

:func:`merge` unions the kept dominant edges in descending score order (ties by edge id) and skips
an edge when the union would exceed ``max_size`` member ops, or when the group count would drop
below ``min_groups``. Without those skips the result is exactly the connected components of the
kept-dominant-edge graph; with them it is a sub-partition of those components.
"""

from __future__ import annotations

import numpy as np

from hdp.ir.build import disjoint_set


def dominant_edges(n: int, edges: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Ids of the distinct dominant edges: for each node with an incident edge, the highest-scored
    one (ties by lower edge id). Sorted ascending."""
    m = edges.shape[1]
    if m == 0:
        return np.zeros(0, np.int64)
    ends = np.concatenate([edges[0], edges[1]])
    eid = np.concatenate([np.arange(m), np.arange(m)])
    s = np.concatenate([score, score])
    order = np.lexsort((eid, -s, ends))  # by node, then score desc, then edge id
    first = np.ones(order.shape[0], bool)
    first[1:] = ends[order][1:] != ends[order][:-1]
    return np.unique(eid[order][first])


def merge(n: int, edges: np.ndarray, candidates: np.ndarray, score: np.ndarray, size: np.ndarray,
          min_groups: int = 1, max_size: float = np.inf) -> tuple[np.ndarray, np.ndarray]:
    """Union the ``candidates`` edges (ids into ``edges``) under the size and count guards.

    Returns ``(assign, accepted)``: the group of every node (ids dense, numbered by first node) and
    the ids of the edges actually merged along.
    """
    uf = disjoint_set(range(n))
    gsize = np.asarray(size, np.float64).copy()  # a group's member ops, at its root
    groups = n
    cand = np.asarray(candidates, np.int64)
    order = cand[np.lexsort((cand, -score[cand]))] if cand.size else cand
    accepted = []
    for e in order:
        if groups <= min_groups:
            break
        a, b = uf[int(edges[0, e])], uf[int(edges[1, e])]
        if a == b:
            accepted.append(e)  # already together: the edge lies inside the group
            continue
        total = gsize[a] + gsize[b]
        if total > max_size:
            continue
        uf.merge(a, b)
        gsize[uf[a]] = total
        groups -= 1
        accepted.append(e)
    roots = np.array([uf[i] for i in range(n)], np.int64)
    _, first, assign = np.unique(roots, return_index=True, return_inverse=True)
    # renumber so group ids follow their first node (deterministic, independent of union order)
    rank = np.empty(first.shape[0], np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.shape[0])
    return rank[assign], np.asarray(sorted(accepted), np.int64)


def quotient(edges: np.ndarray, weight: np.ndarray, assign: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The undirected, unique, ``u < v`` edges between groups, with their summed weights."""
    if edges.shape[1] == 0:
        return edges, weight
    a, b = assign[edges[0]], assign[edges[1]]
    keep = a != b
    if not keep.any():
        return np.zeros((2, 0), np.int64), np.zeros(0)
    q, inv = np.unique(np.stack([np.minimum(a, b)[keep], np.maximum(a, b)[keep]]), axis=1, return_inverse=True)
    return q, np.bincount(inv.reshape(-1), weights=weight[keep], minlength=q.shape[1])

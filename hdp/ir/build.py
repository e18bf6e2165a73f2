"""Graphs from edge lists (the frontend, tests and synthetic benchmarks), and the graph helpers
every layer shares: :func:`csr` (edges grouped by one end), :func:`topological_order` (Kahn's
algorithm with a deterministic tie-break) and :func:`disjoint_set` (scipy's union-find)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from hdp.ir.types import Array, Graph, Op


def graph_from_edges(
    ops: Sequence[Op],
    src,
    dst,
    edge_bytes=None,
    src_port=None,
    dst_port=None,
    renamed: dict[str, str] | None = None,
    fragile=None,
    ties=None,
    live_shapes=None,
) -> Graph:
    """Build a Graph whose ops are already in topological order.

    Edges are sorted by (src, dst, dst_port) so the CSR layout is canonical. Raises ValueError if an
    edge points backwards (the caller must order ops topologically first).
    """
    n = len(ops)
    src = np.asarray(src, dtype=np.int64).reshape(-1)
    dst = np.asarray(dst, dtype=np.int64).reshape(-1)
    m = src.shape[0]
    eb = np.zeros(m, np.int64) if edge_bytes is None else np.asarray(edge_bytes, np.int64)
    sp = np.zeros(m, np.int32) if src_port is None else np.asarray(src_port, np.int32)
    dp = np.zeros(m, np.int32) if dst_port is None else np.asarray(dst_port, np.int32)
    if m and (src.min() < 0 or dst.min() < 0 or src.max() >= n or dst.max() >= n):
        raise ValueError("edge endpoint out of range")
    if m and np.any(src >= dst):
        i = int(np.argmax(src >= dst))
        raise ValueError(f"edge {src[i]}->{dst[i]} is not forward in topological order")
    order = np.lexsort((dp, dst, src))
    src, dst, eb, sp, dp = src[order], dst[order], eb[order], sp[order], dp[order]
    indptr = csr(n, src)[0]
    return Graph(
        ops=tuple(ops),
        indptr=Array.of(indptr),
        indices=Array.of(dst, np.int32),
        edge_bytes=Array.of(eb),
        src_port=Array.of(sp),
        dst_port=Array.of(dp),
        renamed=dict(renamed or {}),
        fragile=None if fragile is None or not np.any(fragile) else Array.of(fragile, np.bool_),
        ties=None if ties is None or not len(ties) else Array.of(np.asarray(ties).reshape(-1, 2), np.int32),
        live_shapes=None if live_shapes is None or not np.any(live_shapes) else Array.of(live_shapes, np.bool_),
    )


def edge_sources(graph: Graph) -> np.ndarray:
    """Producer op id of every edge (CSR row expanded), int32."""
    indptr = graph.indptr.numpy()
    return np.repeat(np.arange(graph.n_ops, dtype=np.int32), np.diff(indptr))


def csr(n: int, rows, *values) -> tuple[np.ndarray, ...]:
    """Compressed rows: ``(ptr, *[v[order] for v in values])`` where ``order`` sorts ``rows``
    (stably, so entries keep their order within a row) and row ``r`` holds entries
    ``ptr[r]:ptr[r + 1]``. ``csr(n, src, dst)`` gives successors; ``csr(n, dst, src)``
    predecessors."""
    rows = np.asarray(rows, np.int64).reshape(-1)
    order = np.argsort(rows, kind="stable")
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=ptr[1:])
    return (ptr, *(np.asarray(v)[order] for v in values))


def predecessors_csr(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """CSR over predecessors: (indptr, producer ids), derived from the successor CSR."""
    return csr(graph.n_ops, graph.indices.numpy(), edge_sources(graph))


def disjoint_set(elements):
    """scipy's union-find (:class:`scipy.cluster.hierarchy.DisjointSet`) over ``elements``,
    imported from the module that defines it: ``scipy.cluster.hierarchy`` re-exports it but costs a
    fresh process about a second of imports (all of ``scipy.cluster``), which ``hdp compile`` paid
    in its partition pass. ``tests/test_ir.py`` checks that both names are one class."""
    try:
        from scipy._lib._disjoint_set import DisjointSet
    except ImportError:  # a scipy that moved it: the public name, at the import's price
        from scipy.cluster.hierarchy import DisjointSet
    return DisjointSet(elements)


def topological_order(n: int, src, dst, key=None) -> np.ndarray:
    """Kahn's algorithm; among the nodes ready at once, the smallest ``key`` first (default: the
    node's index), then the smallest index: stable and deterministic.

    Raises ValueError on a cycle.
    """

    src = np.asarray(src, np.int64).reshape(-1)
    dst = np.asarray(dst, np.int64).reshape(-1)
    indeg = np.bincount(dst, minlength=n).astype(np.int64)
    ptr, succ = csr(n, src, dst)
    keys = np.arange(n) if key is None else np.asarray(key)
    heap = [(int(keys[i]), i) for i in range(n) if indeg[i] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, u = heapq.heappop(heap)
        out.append(u)
        for v in succ[ptr[u]:ptr[u + 1]]:
            v = int(v)
            indeg[v] -= 1
            if indeg[v] == 0:
                heapq.heappush(heap, (int(keys[v]), v))
    if len(out) != n:
        raise ValueError("graph has a cycle")
    return np.asarray(out, np.int64)

"""What the learned baselines (Placeto, the hierarchical RNN placer) see besides a LearnGraph: the
direction of its edges, a visiting order and who reaches whom (numpy/scipy, no torch here).

A :class:`~hdp.learn.graph.LearnGraph` keeps its edges undirected (HSDAG's GCN and parser are
symmetric); Placeto needs parents and children. :func:`directed_view` recovers each node edge's
direction from the placement problem's tensors (producer -> consumer). Coarse groups can make the
node graph cyclic; then two nodes on a cycle are each other's ancestors, which Placeto's
aggregations accept as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdp.learn.graph import LearnGraph
from hdp.placement.problem import PlacementProblem


@dataclass(frozen=True)
class DirectedView:
    arcs: np.ndarray  # int64 2 x m: unique producer node -> consumer node, no self loops
    order: np.ndarray  # int64 n: nodes by their first tie group (the problem's topological order)
    ancestors: np.ndarray  # bool n x n: [i, j] = j reaches i (j != i)
    descendants: np.ndarray  # bool n x n: [i, j] = i reaches j (j != i)


def directed_view(lg: LearnGraph, problem: PlacementProblem) -> DirectedView:
    """Arcs, order and reachability of the nodes of ``lg`` (built from ``problem``)."""
    from scipy.sparse import csr_array
    from scipy.sparse.csgraph import breadth_first_order

    st = problem.structure
    n = lg.n_nodes
    per_cons = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    u, v = lg.node_of_group[st.t_prod[per_cons]], lg.node_of_group[st.t_cons]
    keep = u != v
    arcs = np.unique(np.stack([u[keep], v[keep]]), axis=1) if keep.any() else np.zeros((2, 0), np.int64)
    first = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(first, lg.node_of_group, np.arange(lg.node_of_group.shape[0]))
    order = np.argsort(first, kind="stable").astype(np.int64)
    desc = np.zeros((n, n), bool)
    if arcs.shape[1]:
        a = csr_array((np.ones(arcs.shape[1], np.int8), (arcs[0], arcs[1])), shape=(n, n))
        for i in range(n):
            desc[i, breadth_first_order(a, i, directed=True, return_predecessors=False)] = True
    np.fill_diagonal(desc, False)
    return DirectedView(arcs=arcs.astype(np.int64), order=order, ancestors=desc.T.copy(), descendants=desc)

"""Which ops a placement decides, which follow others, and the tie groups — from the graph alone.

Every op has one role:

- **constant data** (:data:`CONE`): a Constant, a ShapeOf, or an op computed only from those
  (weight decompression ``Constant -> Convert -> Subtract -> Multiply``, shape arithmetic
  ``ShapeOf -> Gather -> Concat``). Such ops fold at compile time. They are never placed and
  never cut: the written model gives each consumer its own copy, on the consumer's device (a
  ShapeOf of a static-shaped input becomes the Constant it folds to). They cost nothing and
  move nothing.
- **replicated** (:data:`REPLICATED`): an op marked fragile by the frontend (its output shape is
  less static when integer values are unknown, as a device plugin sees it) whose consumers are
  all placed or replicated. Each consumer gets a private copy of the chain on its device; the
  copy's time is charged to the consumer's group and the chain's inputs count as the consumer's.
- **placed** (:data:`PLACED`): everything else, in **tie groups** that share one device:

  * a Parameter joins the shallowest placed op that reads its data (directly or through a
    replicated chain), so that no reader lies on a path to another inside the group; an input
    read only by shape arithmetic joins the first placed op that arithmetic feeds. A Result joins
    its producer (HETERO gives a Result its producer's affinity);
  * pairs from the frontend (``Graph.ties``: ReadValue and Assign of one state variable);
  * a ReadValue joins the ScaledDotProductAttention that reads its state through beam reorder,
    concatenation and head-repeat ops (:data:`KV_PATH`): the KV cache of one layer and its
    attention share a device;
  * a fragile op that cannot be replicated (a consumer is a Result, or it is stateful) joins
    its consumers;
  * every group is closed over the paths between its members, and groups on a cycle of the
    contracted graph are merged, so the graph over groups is acyclic.

Why (OpenVINO 2026.4 HETERO, each seen failing without the rule; tests in
``tests/test_placement.py``, ``tests/test_dynamic.py`` and ``tests/test_stateful_splits.py``):

- a tensor that a subgraph's plugin constant-folds (shape arithmetic of a static model, a
  decompression chain) handed to another subgraph — including another subgraph on the *same*
  device, which HETERO creates to break dependency cycles — fails at the first inference:
  ``Can't set the input tensor with index: 0, because the model input (shape=[16]) and the
  tensor (shape=(0)) are incompatible``;
- in a dynamic model, a fragile tensor handed to another subgraph fails the same way
  (``model input (shape=[?,1,?,?]) and the tensor (shape=(0.0.0.0))``): HETERO allocates the
  hand-over tensor from the producer's compiled shape, which lost the static dimensions;
- ReadValue and Assign of one variable on different devices fail at compile
  (``unordered_map::at``), and so does a ReadValue whose initialiser runs on another device;
- a KV state whose attention runs in another subgraph (the CPU plugin then keeps the state
  itself, not inside its stateful attention, and sizes it from the initialiser's empty length)
  fails at the first inference: ``Node assign.0.value of type Assign ... Can not clone with new
  dims. Descriptor's shape: {0 - ?, 2, 0, 16} is incompatible with provided dimensions:
  {2, 2, 3, 16}``;
- a Parameter joined to a reader deep in the graph closes its group over everything between its
  shallowest reader and that one: ``beam_idx`` (read by every layer's cache reorder) tied to the
  last layer's state made the whole decoder one group, and no placement could split it.

One more rule depends on the devices of other groups, so it is not a tie: HETERO cuts a
device's ops into several subgraphs where they lie on a cycle through other devices, and a state
cut that way fails with ``Model references undeclared parameters: opset1::Parameter input_ids ()
-> (i64[?,?])``. :mod:`hdp.placement.subgraphs` states it, and every placement is made to obey
it (:func:`hdp.placement.subgraphs.untangle`). The connections it needs are computed here
(:attr:`Structure.h_src`): the written model's edges between placed ops, through private copies
of constant data and replicated chains, and a live ShapeOf's read of its input
(``Graph.live_shapes``). Failures that remain (a fragile tensor cut inside a replicated chain by
such a split, ...) are found by ``hdp compile``'s check and repaired (:mod:`hdp.runtime.serve.verify`).

Groups are numbered in a topological order of the contracted graph.

An abstract cost graph (:mod:`hdp.costgraph`) is no HETERO model: its ties (colour classes) are
the only rule, so :func:`build_structure` with ``closed=False`` neither closes groups over paths nor
merges groups on cycles. Its contracted graph may then be cyclic (a training graph ties each
forward node to its backward node); groups are numbered by their first member op, and only
objectives that need no order (compute, copies, per-device loads) are exact on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hdp.base.errors import InputError
from hdp.ir.build import csr, disjoint_set, edge_sources, predecessors_csr, topological_order
from hdp.ir.types import Graph

PLACED, CONE, REPLICATED = 0, 1, 2
CONE_ROOTS = frozenset({"Constant", "ShapeOf"})
#: Never constant data and never replicated: inputs, outputs, state, randomness.
NOT_FOLDABLE = frozenset({"Parameter", "Result", "ReadValue", "Assign", "RandomUniform", "Multinomial",
                          "Loop", "If", "TensorIterator"})
ANCHORED = frozenset({"Parameter", "Result"})


@dataclass(frozen=True)
class Structure:
    """The placement structure of one graph (see the module docstring). Arrays are read-only."""

    role: np.ndarray  # int8 per op: PLACED, CONE or REPLICATED
    group_of: np.ndarray  # int32 per op: tie group of a placed op, -1 for the others
    anchor: np.ndarray  # int32 per op: the group whose device the op shows (its own, or its first consumer's); -1: none
    n_groups: int
    m_ptr: np.ndarray  # int64, n_groups + 1: CSR of each group's member ops
    m_ops: np.ndarray  # int32
    g_ptr: np.ndarray  # int64, n_groups + 1: successor CSR of the contracted graph (unique, forward)
    g_idx: np.ndarray  # int32
    r_ptr: np.ndarray  # int64, n_groups + 1: CSR of the replicated ops each group gets a copy of
    r_ops: np.ndarray  # int32
    t_prod: np.ndarray  # int32 per tensor: producer group (tensors of placed producers, consumed elsewhere)
    t_bytes: np.ndarray  # int64 per tensor
    t_ptr: np.ndarray  # int64: CSR of each tensor's consumer groups (distinct, producer's own excluded)
    t_cons: np.ndarray  # int32
    counted: np.ndarray  # bool per group: holds an op that computes (not only a Parameter/Result)
    #: op pairs (placed producer, placed consumer) that the written model connects, directly or
    #: through a private copy of constant data or of a replicated chain (a live ShapeOf included):
    #: the edges HETERO's splitter sees (see :mod:`hdp.placement.subgraphs`)
    h_src: np.ndarray  # int32
    h_dst: np.ndarray  # int32
    state_ops: np.ndarray  # int32: the placed ReadValue and Assign ops
    t_op: np.ndarray  # int32 per tensor: producer op
    t_port: np.ndarray  # int32 per tensor: producer output port
    #: the contracted graph is acyclic and groups are in its topological order (False only for
    #: cost graphs built with ``closed=False``)
    acyclic: bool = True

    @property
    def n_ops(self) -> int:
        return self.role.shape[0]

    @property
    def n_tensors(self) -> int:
        return self.t_prod.shape[0]

    def members(self, g: int) -> np.ndarray:
        return self.m_ops[self.m_ptr[g]:self.m_ptr[g + 1]]

    def op_devices(self, group_device: np.ndarray, default: int = 0) -> np.ndarray:
        """int16 device per op from a device per group: placed ops their group's, constant data and
        replicated ops their first consumer's (in the written model every consumer has a copy)."""
        gd = np.asarray(group_device, np.int64)
        out = np.full(self.n_ops, default, np.int16)
        has = self.anchor >= 0
        out[has] = gd[self.anchor[has]]
        return out

    def group_devices(self, device_of: np.ndarray) -> np.ndarray:
        """The device of every group from a device per op: the device of most of its members
        (ties broken by the lower device index). Inverse of :meth:`op_devices` for placements
        that respect the groups."""
        d = np.asarray(device_of, np.int64)
        if not self.n_groups:
            return np.zeros(0, np.int16)
        nd = int(d.max()) + 1 if d.size else 1
        placed = self.group_of >= 0
        counts = np.zeros((self.n_groups, nd), np.int64)
        np.add.at(counts, (self.group_of[placed], d[placed]), 1)
        return np.argmax(counts, axis=1).astype(np.int16)


def _ro(*arrays):
    for a in arrays:
        a.setflags(write=False)


def _min_roots(uf, n: int) -> np.ndarray:
    """Each element's set named by its smallest member (a scipy ``DisjointSet`` names a set by an
    arbitrary member; group ids here follow the smallest op, as they always have)."""
    rep = np.fromiter(map(uf.__getitem__, range(n)), np.int64, n)  # one find per element: 12x faster
    low = np.full(n, n, np.int64)                                    # than walking uf.subsets() at 30k
    np.minimum.at(low, rep, np.arange(n, dtype=np.int64))
    return low[rep]


def roles(graph: Graph) -> np.ndarray:
    """int8 per op: :data:`CONE`, :data:`REPLICATED` or :data:`PLACED` (see the module docstring)."""
    n = graph.n_ops
    types = [op.type for op in graph.ops]
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    pptr, preds = predecessors_csr(graph)
    role = np.zeros(n, np.int8)
    for i in range(n):
        t = types[i]
        if t in CONE_ROOTS:
            role[i] = CONE
        elif t not in NOT_FOLDABLE and pptr[i + 1] > pptr[i] and (role[preds[pptr[i]:pptr[i + 1]]] == CONE).all():
            role[i] = CONE
    fragile = graph.fragile.numpy() if graph.fragile is not None else np.zeros(n, bool)
    for i in range(n - 1, -1, -1):  # consumers first
        if not fragile[i] or role[i] == CONE or types[i] in NOT_FOLDABLE:
            continue
        cons = succ[indptr[i]:indptr[i + 1]]
        if cons.size and all(role[c] == REPLICATED or (role[c] == PLACED and types[c] not in ANCHORED)
                             for c in cons):
            role[i] = REPLICATED
    return role


def build_structure(graph: Graph, extra_ties=(), closed: bool = True) -> Structure:
    """The :class:`Structure` of ``graph``; ``extra_ties`` are more pairs of ops that must share a
    device (learned when a placement failed its check, see :mod:`hdp.runtime.serve.verify`).
    ``closed=False``: the ties alone make the groups (cost graphs, see the module docstring)."""
    n = graph.n_ops
    types = [op.type for op in graph.ops]
    role = roles(graph)
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    src = edge_sources(graph).astype(np.int64)
    dst = succ.astype(np.int64)
    port = graph.src_port.numpy().astype(np.int64)
    ebytes = graph.edge_bytes.numpy().astype(np.int64)
    placed = role == PLACED

    # reach[i]: the placed ops that receive a copy of replicated op i (through replicated chains)
    reach: dict[int, set[int]] = {}
    for i in range(n - 1, -1, -1):
        if role[i] != REPLICATED:
            continue
        r: set[int] = set()
        for c in succ[indptr[i]:indptr[i + 1]]:
            r.update(reach[c] if role[c] == REPLICATED else (int(c),))
        reach[i] = r

    def consumers_of(i: int) -> set[int]:
        out: set[int] = set()
        for c in succ[indptr[i]:indptr[i + 1]]:
            if role[c] == PLACED:
                out.add(int(c))
            elif role[c] == REPLICATED:
                out.update(reach[c])
        return out

    # first placed op downstream of a free op or a Parameter (through free ops)
    first_placed = np.full(n, -1, np.int64)
    for i in range(n - 1, -1, -1):
        best = -1
        for c in succ[indptr[i]:indptr[i + 1]]:
            cand = c if role[c] == PLACED and types[c] != "Result" else first_placed[c]
            if cand >= 0 and (best < 0 or cand < best):
                best = cand
        first_placed[i] = best

    # the effective placed graph: producer -> placed consumers (through replicated copies)
    e_src, e_dst = [], []
    for i in np.nonzero(placed)[0]:
        for c in consumers_of(int(i)):
            e_src.append(int(i))
            e_dst.append(c)
    e_src = np.asarray(e_src, np.int64)
    e_dst = np.asarray(e_dst, np.int64)

    uf = disjoint_set(range(n))
    # Results with their producer (a Result has one input)
    res_mask = np.array([t == "Result" for t in types], bool)
    for e in np.nonzero(res_mask[dst])[0]:
        p = int(src[e])
        if role[p] == PLACED:
            uf.merge(p, int(dst[e]))
    pairs = list(graph.ties.numpy()) if graph.ties is not None else []
    for a, b in pairs + [tuple(t) for t in extra_ties]:
        if not (0 <= a < n and 0 <= b < n):
            raise InputError(f"tie ({a}, {b}) names an op outside the graph's {n} ops")
        if placed[a] and placed[b]:
            uf.merge(int(a), int(b))
    for r in np.nonzero(placed)[0]:
        if types[r] == "ReadValue":
            for a in _attention_reading(graph, int(r), types):
                if placed[a]:
                    uf.merge(int(r), a)
    fragile = graph.fragile.numpy() if graph.fragile is not None else np.zeros(n, bool)
    for i in np.nonzero(placed & fragile)[0]:  # a fragile op that could not be replicated
        if types[i] in ANCHORED:
            continue
        for c in consumers_of(int(i)):
            uf.merge(int(i), c)
    params = [int(i) for i in np.nonzero(placed)[0] if types[i] == "Parameter" and first_placed[i] >= 0]
    if params:
        # A Parameter joins the group of its shallowest reader: no other reader is then upstream
        # of that group, so closing it over paths pulls in nothing more (beam_idx joined to a later
        # layer's cache reorder would close the group over every layer in between).
        root = _close_groups(n, placed, uf, e_src, e_dst)
        depth = _group_depth(n, placed, root, e_src, e_dst)
        for i in params:
            readers = [c for c in consumers_of(i) if types[c] != "Result"]
            uf.merge(i, min(readers, key=lambda c: (depth[root[c]], c)) if readers else int(first_placed[i]))

    if closed:
        group_of = _close_groups(n, placed, uf, e_src, e_dst)
    else:
        group_of = np.where(placed, _min_roots(uf, n), -1)
    h_src, h_dst = hetero_edges(graph, role)
    state = np.array([i for i in np.nonzero(placed)[0] if types[i] in ("ReadValue", "Assign")], np.int32)
    return _contract(graph, role, placed, group_of, first_placed, reach, e_src, e_dst, port, ebytes, types,
                     h_src, h_dst, state, closed)


def hetero_edges(graph: Graph, role: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(producer, consumer) pairs of placed ops that the written model connects: every placed
    ancestor of a placed op reached through ops that are not placed (each consumer gets its own
    copy of those, see :func:`hdp.ir.openvino_legalize.legalize`), stepping from a ShapeOf to its
    input only where the ShapeOf stays in the written model (``graph.live_shapes``). Sorted, unique."""
    n = graph.n_ops
    role = roles(graph) if role is None else role
    live = graph.live_shapes.numpy() if graph.live_shapes is not None else np.zeros(n, bool)
    types = [op.type for op in graph.ops]
    pptr, preds = predecessors_csr(graph)
    up: list[frozenset | None] = [None] * n  # placed ancestors of a free op

    def ancestors(i: int) -> set[int]:
        out: set[int] = set()
        if types[i] == "ShapeOf" and not live[i]:
            return out  # folded into a Constant
        for p in preds[pptr[i]:pptr[i + 1]]:
            p = int(p)
            if role[p] == PLACED:
                out.add(p)
            else:
                out.update(up[p])
        return out

    src, dst = [], []
    for i in range(n):
        a = ancestors(i)
        if role[i] == PLACED:
            src.extend(a)
            dst.extend([i] * len(a))
        else:
            up[i] = frozenset(a)
    if not src:
        return np.zeros(0, np.int32), np.zeros(0, np.int32)
    pairs = np.unique(np.stack([np.asarray(src, np.int64), np.asarray(dst, np.int64)], axis=1), axis=0)
    return pairs[:, 0].astype(np.int32), pairs[:, 1].astype(np.int32)


#: Ops between a KV-cache ReadValue and the attention that reads it in the CPU plugin's stateful
#: attention pattern (beam reorder, concatenation, grouped-query head repeat, precision converts).
KV_PATH = frozenset({"Gather", "Concat", "Convert", "Unsqueeze", "Squeeze", "Broadcast", "Reshape", "Transpose"})


def _attention_reading(graph: Graph, r: int, types) -> list[int]:
    """The ScaledDotProductAttention ops that read the state of ReadValue ``r`` through
    :data:`KV_PATH` ops only."""
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    out, seen, stack = [], {r}, [r]
    while stack:
        u = stack.pop()
        for c in succ[indptr[u]:indptr[u + 1]]:
            c = int(c)
            if c in seen:
                continue
            seen.add(c)
            if types[c] == "ScaledDotProductAttention":
                out.append(c)
            elif types[c] in KV_PATH:
                stack.append(c)
    return out


def _close_groups(n, placed, uf, e_src, e_dst) -> np.ndarray:
    """Union-find groups made convex (every op on a path between two members joins) and merged
    along cycles of the contracted graph, until the contracted graph is acyclic."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    pl = np.nonzero(placed)[0]
    while True:
        roots = _min_roots(uf, n)
        # convex closure of multi-member groups
        changed = False
        members: dict[int, list[int]] = {}
        for i in pl:
            members.setdefault(int(roots[i]), []).append(int(i))
        multi = {r: m for r, m in members.items() if len(m) > 1}
        if multi:
            sptr, sidx = csr(n, e_src, e_dst)
            pptr, pidx = csr(n, e_dst, e_src)
            for r, m in multi.items():
                lo, hi = min(m), max(m)
                down = _reach(sptr, sidx, m, lambda v: v <= hi)
                up = _reach(pptr, pidx, m, lambda v: v >= lo)
                for v in down & up:
                    if uf.merge(r, v):
                        changed = True
        if changed:
            continue
        # merge groups on a cycle of the contracted graph
        gid = roots
        a, b = gid[e_src], gid[e_dst]
        keep = a != b
        if not keep.any():
            break
        uniq, inv = np.unique(gid[pl], return_inverse=True)
        pos = np.full(n, -1, np.int64)
        pos[pl] = inv.reshape(-1)
        k = uniq.shape[0]
        mat = sp.csr_array((np.ones(int(keep.sum())), (pos[e_src[keep]], pos[e_dst[keep]])), shape=(k, k))
        ncomp, comp = connected_components(mat, directed=True, connection="strong")
        if ncomp == k:
            break
        first: dict[int, int] = {}
        for j, c in enumerate(comp):
            r = int(uniq[j])
            if c in first:
                uf.merge(first[c], r)
            else:
                first[c] = r
    roots = _min_roots(uf, n)
    out = np.where(placed, roots, -1)
    return out


def _group_depth(n, placed, group_of, e_src, e_dst) -> np.ndarray:
    """Depth of every group root (indexed by op id) in the acyclic graph over groups: the number
    of groups on the longest path from a group without predecessors."""
    a, b = group_of[e_src], group_of[e_dst]
    keep = a != b
    pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0).reshape(-1, 2)
    roots = np.unique(group_of[placed])
    first = np.full(n, n, np.int64)
    np.minimum.at(first, group_of[placed], np.nonzero(placed)[0])
    idx = np.full(n, -1, np.int64)
    idx[roots] = np.arange(roots.shape[0])
    k = roots.shape[0]
    order = _toposort(k, idx[pairs[:, 0]], idx[pairs[:, 1]], first[roots])
    ptr, nxt = csr(k, idx[pairs[:, 0]], idx[pairs[:, 1]])
    d = np.zeros(k, np.int64)
    for u in order:
        for v in nxt[ptr[u]:ptr[u + 1]]:
            d[v] = max(d[v], d[u] + 1)
    out = np.zeros(n, np.int64)
    out[roots] = d
    return out


def _reach(ptr, idx, start, ok) -> set[int]:
    seen = set(start)
    stack = list(start)
    while stack:
        u = stack.pop()
        for v in idx[ptr[u]:ptr[u + 1]]:
            v = int(v)
            if v not in seen and ok(v):
                seen.add(v)
                stack.append(v)
    return seen


def _contract(graph, role, placed, root, first_placed, reach, e_src, e_dst, port, ebytes, types, h_src, h_dst, state,
              closed=True):
    n = graph.n_ops
    pl = np.nonzero(placed)[0]
    uniq, inv = np.unique(root[pl], return_inverse=True)
    k = uniq.shape[0]
    tmp = np.full(n, -1, np.int64)
    tmp[pl] = inv.reshape(-1)
    # topological order of the contracted graph (Kahn, ties by smallest member op)
    a, b = tmp[e_src], tmp[e_dst]
    keep = a != b
    pairs = np.unique(np.stack([a[keep], b[keep]], axis=1), axis=0).reshape(-1, 2)
    first_member = np.full(k, n, np.int64)
    np.minimum.at(first_member, tmp[pl], pl)
    order = _toposort(k, pairs[:, 0], pairs[:, 1], first_member, strict=closed)
    acyclic = order is not None
    if not acyclic:
        order = np.argsort(first_member, kind="stable")
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)
    group_of = np.full(n, -1, np.int32)
    group_of[pl] = rank[tmp[pl]]
    gp = np.unique(rank[pairs], axis=0).reshape(-1, 2) if pairs.size else pairs
    g_ptr, g_idx = csr(k, gp[:, 0], gp[:, 1]) if k else (np.zeros(1, np.int64), np.zeros(0, np.int64))

    m_ptr, m_ops = csr(k, group_of[pl].astype(np.int64), pl.astype(np.int64))

    # replicated copies per group
    r_pairs = [(int(group_of[c]), f) for f, r in reach.items() for c in r]
    r_pairs = np.unique(np.asarray(r_pairs, np.int64).reshape(-1, 2), axis=0)
    r_ptr, r_ops = csr(k, r_pairs[:, 0], r_pairs[:, 1])

    # anchor: own group, or the group of the first placed consumer
    anchor = group_of.astype(np.int32).copy()
    free = ~placed
    fp = first_placed[free]
    anchor[free] = np.where(fp >= 0, group_of[np.maximum(fp, 0)], -1)
    if k:
        anchor[free & (anchor < 0)] = 0

    # tensors: (placed producer, port) -> distinct consumer groups other than its own
    t_prod, t_bytes, t_cons_lists, t_op, t_port = [], [], [], [], []
    indptr, succ = graph.indptr.numpy(), graph.indices.numpy()
    for i in pl:
        lo, hi = indptr[i], indptr[i + 1]
        if lo == hi:
            continue
        ports: dict[int, tuple[int, set[int]]] = {}
        for e in range(lo, hi):
            c = int(succ[e])
            pt = int(port[e])
            nb, groups = ports.get(pt, (0, set()))
            if role[c] == PLACED:
                groups.add(int(group_of[c]))
            elif role[c] == REPLICATED:
                groups.update(int(group_of[x]) for x in reach[c])
            ports[pt] = (max(nb, int(ebytes[e])), groups)
        g = int(group_of[i])
        for pt in sorted(ports):
            nb, groups = ports[pt]
            groups.discard(g)
            if groups:
                t_prod.append(g)
                t_op.append(int(i))
                t_port.append(pt)
                t_bytes.append(nb)
                t_cons_lists.append(sorted(groups))
    t_ptr = np.zeros(len(t_prod) + 1, np.int64)
    t_ptr[1:] = np.cumsum([len(c) for c in t_cons_lists], dtype=np.int64)
    t_cons = np.asarray([g for c in t_cons_lists for g in c], np.int32)

    computes = np.array([t not in ANCHORED for t in types], bool)
    counted = np.zeros(k, bool)
    if k:
        counted[group_of[pl[computes[pl]]]] = True
        counted[r_pairs[:, 0]] = True

    s = Structure(role=role, group_of=group_of, anchor=anchor.astype(np.int32), n_groups=int(k),
                  m_ptr=m_ptr, m_ops=m_ops.astype(np.int32), g_ptr=g_ptr, g_idx=g_idx.astype(np.int32),
                  r_ptr=r_ptr, r_ops=r_ops.astype(np.int32), t_prod=np.asarray(t_prod, np.int32),
                  t_bytes=np.asarray(t_bytes, np.int64), t_ptr=t_ptr, t_cons=t_cons, counted=counted,
                  h_src=h_src, h_dst=h_dst, state_ops=state, t_op=np.asarray(t_op, np.int32),
                  t_port=np.asarray(t_port, np.int32), acyclic=acyclic)
    _ro(s.role, s.group_of, s.anchor, s.m_ptr, s.m_ops, s.g_ptr, s.g_idx, s.r_ptr, s.r_ops, s.t_prod,
        s.t_bytes, s.t_ptr, s.t_cons, s.counted, s.h_src, s.h_dst, s.state_ops, s.t_op, s.t_port)
    return s


def _toposort(k, a, b, key, strict: bool = True) -> np.ndarray | None:
    """Topological order of the graph over groups (ties by ``key``); it is acyclic by construction,
    except for cost graphs (``strict=False``: None on a cycle)."""
    try:
        return topological_order(k, a, b, key=key)
    except ValueError:
        if not strict:
            return None
        raise AssertionError("the contracted group graph has a cycle after closing the groups") from None

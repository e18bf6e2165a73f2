"""Numba kernels of the structure passes (``features``, ``coarsen``).

Every kernel is a module-level ``@njit(cache=True)`` function (:func:`hdp.base.jit.njit`: cached under
the hdp cache, compiled ahead of time by ``python -m hdp.pipeline.warmup``) over plain arrays: graphs arrive as
CSR over successors (``indptr`` int64, ``indices`` int32) with ops in topological order, so an edge
``u -> v`` always has ``u < v``. All kernels run in time linear in ops + edges (up to the per-row
sorts in :func:`quotient_csr` and the bounded balls of :func:`fractal_dimension`).
"""

from __future__ import annotations

import numpy as np

from hdp.base.jit import njit

# --------------------------------------------------------------------------- shared


@njit(cache=True)
def in_degrees(indices, n):
    """Number of incoming edges of every node (int64)."""
    deg = np.zeros(n, np.int64)
    for e in range(indices.shape[0]):
        deg[indices[e]] += 1
    return deg


@njit(cache=True)
def undirected_csr(indptr, indices):
    """CSR of the undirected view: every edge ``u -> v`` appears in the rows of both ``u`` and ``v``
    (parallel edges stay parallel; BFS does not mind)."""
    n = indptr.shape[0] - 1
    m = indices.shape[0]
    deg = np.zeros(n, np.int64)
    for u in range(n):
        deg[u] += indptr[u + 1] - indptr[u]
    for e in range(m):
        deg[indices[e]] += 1
    uptr = np.zeros(n + 1, np.int64)
    for u in range(n):
        uptr[u + 1] = uptr[u] + deg[u]
    fill = uptr[:-1].copy()
    uidx = np.empty(2 * m, np.int32)
    for u in range(n):
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            uidx[fill[u]] = v
            fill[u] += 1
            uidx[fill[v]] = u
            fill[v] += 1
    return uptr, uidx


# --------------------------------------------------------------------------- features


@njit(cache=True)
def longest_path_depths(indptr, indices):
    """(depth, reverse depth) per node: the longest path (in edges) from any source to the node,
    and from the node to any sink."""
    n = indptr.shape[0] - 1
    depth = np.zeros(n, np.int64)
    for u in range(n):
        du = depth[u] + 1
        for e in range(indptr[u], indptr[u + 1]):
            v = indices[e]
            if du > depth[v]:
                depth[v] = du
    rdepth = np.zeros(n, np.int64)
    for u in range(n - 1, -1, -1):
        best = 0
        for e in range(indptr[u], indptr[u + 1]):
            r = rdepth[indices[e]] + 1
            if r > best:
                best = r
        rdepth[u] = best
    return depth, rdepth


@njit(cache=True)
def ball_sizes(uptr, uidx, radius, ball_cap):
    """``sizes[s, r]``: nodes within undirected distance ``r`` of ``s`` (itself included), for
    ``r = 0..radius``, by a BFS from every node; and ``done[s]``, the largest radius whose count is
    exact.

    Radius 1 is always completed (its cost is the node's degree, linear overall); a larger radius is
    abandoned as soon as the ball would exceed ``ball_cap`` nodes, which bounds the work per node
    near hubs. When a component is exhausted, the remaining radii are filled in for free.
    """
    n = uptr.shape[0] - 1
    sizes = np.zeros((n, radius + 1), np.int64)
    done = np.zeros(n, np.int64)
    stamp = np.full(n, -1, np.int64)
    queue = np.empty(max(n, 1), np.int32)
    for s in range(n):
        stamp[s] = s
        queue[0] = s
        head = 0
        tail = 1
        sizes[s, 0] = 1
        for r in range(1, radius + 1):
            level_end = tail
            aborted = False
            while head < level_end and not aborted:
                u = queue[head]
                head += 1
                for e in range(uptr[u], uptr[u + 1]):
                    w = uidx[e]
                    if stamp[w] != s:
                        stamp[w] = s
                        queue[tail] = w
                        tail += 1
                        if r > 1 and tail > ball_cap:
                            aborted = True
                            break
            if aborted:
                break
            sizes[s, r] = tail
            done[s] = r
            if tail == level_end:  # nothing new: the component is exhausted
                for r2 in range(r + 1, radius + 1):
                    sizes[s, r2] = tail
                done[s] = radius
                break
    return sizes, done


@njit(cache=True)
def fractal_dimension(uptr, uidx, radius, ball_cap):
    """Local (node) fractal dimension: the least-squares slope of ``log N(r)`` against
    ``log(2r + 1)`` over ``r = 1..R``, where ``N(r)`` counts the nodes within undirected distance
    ``r`` (the node included) and ``2r + 1`` is the ball's diameter; ``R`` is ``radius`` or the
    largest radius completed under ``ball_cap``. With one radius the slope is taken from the
    origin (``N(0) = 1``). A path gives exactly 1 inside, a square grid about 2, an isolated node 0.
    """
    n = uptr.shape[0] - 1
    out = np.zeros(n, np.float64)
    sizes, done = ball_sizes(uptr, uidx, radius, ball_cap)
    xs = np.empty(radius + 1, np.float64)
    for r in range(radius + 1):
        xs[r] = np.log(2.0 * r + 1.0)
    for s in range(n):
        R = done[s]
        if R == 1:
            out[s] = np.log(float(sizes[s, 1])) / xs[1]
        elif R >= 2:
            mx = 0.0
            my = 0.0
            for r in range(1, R + 1):
                mx += xs[r]
                my += np.log(float(sizes[s, r]))
            mx /= R
            my /= R
            sxy = 0.0
            sxx = 0.0
            for r in range(1, R + 1):
                dx = xs[r] - mx
                sxy += dx * (np.log(float(sizes[s, r])) - my)
                sxx += dx * dx
            out[s] = sxy / sxx
    return out


# --------------------------------------------------------------------------- coarsen: rules (a), (b)


@njit(cache=True)
def constant_anchors(indptr, indices, is_constant):
    """Rule (a): fold constant data (``is_constant``: :mod:`hdp.placement.structure`'s
    definition, Constants and what is computed only from Constants and ShapeOfs) into its
    consumers.

    Each op gets an *anchor*: itself for ops that are not constant data (and for constant data
    nobody consumes); for constant data, the earliest anchor among its consumers' anchors.
    Returns (anchor int64, is_constant).

    Taking the earliest consumer *anchor* rather than the anchor of the earliest consumer op keeps
    the groups acyclic: every edge ``u -> v`` then has ``anchor[u] <= anchor[v]``.
    """
    n = indptr.shape[0] - 1
    anchor = np.arange(n).astype(np.int64)
    for u in range(n - 1, -1, -1):
        if is_constant[u] and indptr[u + 1] > indptr[u]:
            best = n
            for e in range(indptr[u], indptr[u + 1]):
                a = anchor[indices[e]]
                if a < best:
                    best = a
            anchor[u] = best
    return anchor, is_constant


@njit(cache=True)
def renumber_by_root(root):
    """Group id per node from a representative per node: roots numbered in increasing order."""
    n = root.shape[0]
    gid = np.full(n, -1, np.int64)
    k = 0
    for u in range(n):
        if root[u] == u:
            gid[u] = k
            k += 1
    out = np.empty(n, np.int32)
    for u in range(n):
        out[u] = gid[root[u]]
    return out, k


#: rule codes for :func:`colocate_roots`
RULE_PAPER, RULE_LOOSE, RULE_CHILD = 0, 1, 2


@njit(cache=True)
def colocate_roots(gptr, gidx, rule):
    """Rule (b) on a DAG in topological order with distinct edges (a quotient graph).

    ``RULE_PAPER``: ``v`` joins ``u`` when ``v`` is ``u``'s only child and ``u`` is ``v``'s only
    parent (chains). ``RULE_LOOSE`` (the published HSDAG code): ``v`` joins ``u`` when ``u`` is
    ``v``'s only parent (out-trees). ``RULE_CHILD``: ``u`` joins ``v`` when ``v`` is ``u``'s only
    child (in-trees). Returns the root of every node: the first member for paper/loose, the last
    for child, so numbering groups by root keeps them in topological order. Each rule contracts
    chains, out-trees or in-trees of single edges, and such contractions never create a cycle.
    """
    k = gptr.shape[0] - 1
    indeg = in_degrees(gidx, k)
    root = np.arange(k).astype(np.int64)
    if rule == RULE_CHILD:
        for u in range(k - 1, -1, -1):
            if gptr[u + 1] - gptr[u] == 1:
                root[u] = root[gidx[gptr[u]]]
        return root
    parent = np.full(k, -1, np.int64)
    for u in range(k):
        for e in range(gptr[u], gptr[u + 1]):
            v = gidx[e]
            if indeg[v] == 1 and (rule == RULE_LOOSE or gptr[u + 1] - gptr[u] == 1):
                parent[v] = u
    for v in range(k):
        if parent[v] >= 0:
            root[v] = root[parent[v]]
    return root


# --------------------------------------------------------------------------- coarsen: quotient graph


@njit(cache=True)
def members_csr(group_of, k):
    """Members of every group, ascending: (mptr int64 k+1, members int32)."""
    n = group_of.shape[0]
    mptr = np.zeros(k + 1, np.int64)
    for u in range(n):
        mptr[group_of[u] + 1] += 1
    for g in range(k):
        mptr[g + 1] += mptr[g]
    fill = mptr[:-1].copy()
    members = np.empty(n, np.int32)
    for u in range(n):
        g = group_of[u]
        members[fill[g]] = u
        fill[g] += 1
    return mptr, members


@njit(cache=True)
def quotient_csr(indptr, indices, edge_bytes, src_port, group_of, k, per_tensor):
    """The group graph: CSR over distinct successor groups, rows sorted, with summed bytes.

    With ``per_tensor`` a tensor (producer, output port) consumed by several ops of one group
    counts once toward that group pair: it crosses the boundary once. Otherwise every edge counts.
    Edges inside a group are dropped.
    """
    mptr, members = members_csr(group_of, k)
    m = indices.shape[0]
    out_idx = np.empty(m, np.int32)
    out_bytes = np.zeros(m, np.int64)
    gptr = np.zeros(k + 1, np.int64)
    gmark = np.full(k, -1, np.int64)
    gslot = np.zeros(k, np.int64)
    tmark = np.full(k, -1, np.int64)
    tbits = np.zeros(k, np.uint64)
    length = 0
    for g in range(k):
        for i in range(mptr[g], mptr[g + 1]):
            u = members[i]
            for e in range(indptr[u], indptr[u + 1]):
                h = group_of[indices[e]]
                if h == g:
                    continue
                b = edge_bytes[e]
                if per_tensor:
                    if tmark[h] != u:
                        tmark[h] = u
                        tbits[h] = np.uint64(0)
                    p = src_port[e]
                    if p < 64:
                        bit = np.uint64(1) << np.uint64(p)
                        if tbits[h] & bit:
                            b = 0
                        else:
                            tbits[h] |= bit
                    else:
                        for e2 in range(indptr[u], e):
                            if src_port[e2] == p and group_of[indices[e2]] == h:
                                b = 0
                                break
                if gmark[h] != g:
                    gmark[h] = g
                    gslot[h] = length
                    out_idx[length] = h
                    out_bytes[length] = b
                    length += 1
                else:
                    out_bytes[gslot[h]] += b
        gptr[g + 1] = length
    sorted_idx, sorted_bytes = sort_rows(gptr, out_idx[:length], out_bytes[:length])
    return gptr, sorted_idx, sorted_bytes


@njit(cache=True)
def sort_rows(gptr, idx, vals):
    """Sort every CSR row by column index, in linear time: scatter the entries by column (a stable
    counting sort), then back into their rows, which now fill in increasing column order."""
    k = gptr.shape[0] - 1
    m = idx.shape[0]
    row = np.empty(m, np.int64)
    for g in range(k):
        for e in range(gptr[g], gptr[g + 1]):
            row[e] = g
    cptr = np.zeros(k + 1, np.int64)
    for e in range(m):
        cptr[idx[e] + 1] += 1
    for h in range(k):
        cptr[h + 1] += cptr[h]
    by_col = np.empty(m, np.int64)
    fill = cptr[:-1].copy()
    for e in range(m):
        by_col[fill[idx[e]]] = e
        fill[idx[e]] += 1
    out_idx = np.empty(m, np.int32)
    out_vals = np.empty(m, vals.dtype)
    fill = gptr[:-1].copy()
    for j in range(m):
        e = by_col[j]
        g = row[e]
        out_idx[fill[g]] = idx[e]
        out_vals[fill[g]] = vals[e]
        fill[g] += 1
    return out_idx, out_vals


@njit(cache=True)
def compose(first, second):
    """``second[first[u]]`` for every ``u`` (int32)."""
    out = np.empty(first.shape[0], np.int32)
    for u in range(first.shape[0]):
        out[u] = second[first[u]]
    return out


# --------------------------------------------------------------------------- coarsen: multilevel (c)


@njit(cache=True)
def depth_first_topological_order(gptr, gidx):
    """A topological order that keeps chains together: Kahn's algorithm with a stack, smallest id
    first among the nodes that become ready together (deterministic)."""
    k = gptr.shape[0] - 1
    indeg = in_degrees(gidx, k)
    stack = np.empty(k, np.int64)
    top = 0
    for u in range(k - 1, -1, -1):
        if indeg[u] == 0:
            stack[top] = u
            top += 1
    order = np.empty(k, np.int64)
    j = 0
    while top > 0:
        top -= 1
        u = stack[top]
        order[j] = u
        j += 1
        for e in range(gptr[u + 1] - 1, gptr[u] - 1, -1):
            v = gidx[e]
            indeg[v] -= 1
            if indeg[v] == 0:
                stack[top] = v
                top += 1
    return order


@njit(cache=True)
def interval_matching(gptr, gidx, gbytes, weight, cap, needed):
    """One level of acyclic coarsening: merge pairs of groups that are *consecutive* in a
    depth-first topological order.

    Any partition of a topological order into intervals has an acyclic quotient (every edge goes
    from an interval to itself or a later one), so these merges can never create a cycle; it is a
    cheap sufficient condition for "no other path u ~> v". Pairs joined by an edge are chosen
    first, by a maximum-weight matching on the order (score 1 + bytes / (max bytes + 1): as many
    pairs as possible, heavy edges preferred), with the merged weight at most ``cap``. When edges
    yield fewer than ``min(needed, ceil(k / 8))`` merges, unconnected consecutive pairs (first
    come, under ``cap``) make up the rest, so the number of levels stays logarithmic. At most
    ``needed`` pairs are merged: the heaviest, earlier first among equals.

    Returns (new group id per group int32, number of new groups); new ids follow the order, so
    the new group graph is again in topological order.
    """
    k = gptr.shape[0] - 1
    order = depth_first_topological_order(gptr, gidx)
    pos = np.empty(k, np.int64)
    for i in range(k):
        pos[order[i]] = i
    npairs = max(k - 1, 0)
    pair_bytes = np.full(npairs, -1, np.int64)  # -1: not joined by an edge
    bmax = 0
    for u in range(k):
        for e in range(gptr[u], gptr[u + 1]):
            v = gidx[e]
            if pos[v] == pos[u] + 1:
                pair_bytes[pos[u]] = gbytes[e]
                if gbytes[e] > bmax:
                    bmax = gbytes[e]
    pair_w = np.empty(npairs, np.int64)
    for i in range(npairs):
        pair_w[i] = weight[order[i]] + weight[order[i + 1]]
    # maximum-weight matching on the path of connected pairs (dynamic programming)
    best = np.zeros(npairs + 2, np.float64)  # best[i + 1]: pairs among positions < i + 1
    take = np.zeros(npairs + 1, np.bool_)
    for i in range(npairs):
        without = best[i + 1]
        with_ = -1.0
        if pair_bytes[i] >= 0 and pair_w[i] <= cap:
            with_ = best[i] + 1.0 + pair_bytes[i] / (bmax + 1.0)
        if with_ > without:
            best[i + 2] = with_
            take[i] = True
        else:
            best[i + 2] = without
    chosen = np.zeros(npairs, np.bool_)
    i = npairs - 1
    count = 0
    while i >= 0:
        if take[i]:
            chosen[i] = True
            count += 1
            i -= 2
        else:
            i -= 1
    if count > needed:
        # keep the ``needed`` heaviest pairs; among equal bytes the earlier ones
        chosen_bytes = np.empty(count, np.int64)
        j = 0
        for i in range(npairs):
            if chosen[i]:
                chosen_bytes[j] = pair_bytes[i]
                j += 1
        threshold = np.sort(chosen_bytes)[count - needed]
        above = 0
        for i in range(npairs):
            if chosen[i] and pair_bytes[i] > threshold:
                above += 1
        ties = needed - above
        for i in range(npairs):
            if chosen[i] and pair_bytes[i] < threshold:
                chosen[i] = False
            elif chosen[i] and pair_bytes[i] == threshold:
                if ties > 0:
                    ties -= 1
                else:
                    chosen[i] = False
        count = needed
    floor = min(needed, (k + 7) // 8)
    if count < floor:
        # too few edges to merge along: also merge unconnected neighbours in the order
        used = np.zeros(k, np.bool_)
        for i in range(npairs):
            if chosen[i]:
                used[i] = True
                used[i + 1] = True
        for i in range(npairs):
            if count >= floor:
                break
            if not used[i] and not used[i + 1] and pair_w[i] <= cap:
                chosen[i] = True
                used[i] = True
                used[i + 1] = True
                count += 1
    new_id = np.empty(k, np.int32)
    g = -1
    for i in range(k):
        if i == 0 or not chosen[i - 1]:
            g += 1
        new_id[order[i]] = g
    return new_id, g + 1


# --------------------------------------------------------------------------- coarsen: group data


@njit(cache=True)
def group_sums(values, group_of, k):
    """Row sums of ``values`` (n x c, float) per group, in float64 (inf stays inf)."""
    out = np.zeros((k, values.shape[1]), np.float64)
    for u in range(group_of.shape[0]):
        g = group_of[u]
        for j in range(values.shape[1]):
            out[g, j] += values[u, j]
    return out


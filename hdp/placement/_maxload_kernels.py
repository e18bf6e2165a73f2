"""Numba kernels of the max-load objective with a memory cap per device
(:mod:`hdp.placement.maxload`, :mod:`hdp.placement.maxload_search`) and of its contiguous splits as
chains of ideals (:mod:`hdp.placement.ideals`), over plain arrays.

Conventions: ``time[g, d]`` (``inf`` where group ``g`` may not run on ``d``), ``gbytes[g]``,
``cap[d]`` (``inf``: no cap), ``paid[d]`` (False for a ``free_comm`` device); tensors ``t`` with
producer group ``t_prod[t]``, distinct consumer groups ``t_cons[t_ptr[t]:t_ptr[t+1]]`` (the
producer's own excluded) and transfer time ``t_cost[t]``; ``g_ptr``/``g_tens``: the tensors each
group produces or consumes.
"""

from __future__ import annotations

import numpy as np

from hdp.base.jit import njit


@njit(cache=True)
def ml_tensor_terms(t, dev, t_prod, t_ptr, t_cons, t_cost, paid, sign, out):
    """Add ``sign`` × tensor ``t``'s transfer terms under ``dev`` to ``out`` (per device)."""
    home = dev[t_prod[t]]
    c = t_cost[t]
    if c == 0.0:
        return
    sent = False
    for i in range(t_ptr[t], t_ptr[t + 1]):
        d = dev[t_cons[i]]
        if d == home:
            continue
        dup = False
        for j in range(t_ptr[t], i):
            if dev[t_cons[j]] == d:
                dup = True
                break
        if dup:
            continue
        sent = True
        if paid[d]:
            out[d] += sign * c
    if sent and paid[home]:
        out[home] += sign * c


@njit(cache=True)
def ml_device_loads(dev, time, t_prod, t_ptr, t_cons, t_cost, paid, out):
    """Load per device of a device per group into ``out``."""
    out[:] = 0.0
    for g in range(dev.shape[0]):
        out[dev[g]] += time[g, dev[g]]
    for t in range(t_prod.shape[0]):
        ml_tensor_terms(t, dev, t_prod, t_ptr, t_cons, t_cost, paid, 1.0, out)


@njit(cache=True)
def ml_segment_loads(order, cuts, time_c, paid_c, gbytes, cap_c, allowed_c, t_prod, t_ptr, t_cons, t_cost, g_ptr,
                     g_tens, out):
    """``out[i, j]``: the load of a device of one class holding the groups ``order[cuts[i]:cuts[j]]``
    (inf when one is not allowed there or they exceed its cap); ``time_c`` that class's time column,
    ``cuts`` increasing positions in ``order`` (every position: every block). A walk from a cut
    stops once the block is over the cap or not allowed: longer blocks are inf too. Time is
    O(len(cuts) x the groups walked), memory O(len(cuts)²)."""
    n = order.shape[0]
    m = cuts.shape[0]
    nt = t_prod.shape[0]
    inside = np.zeros(time_c.shape[0], np.bool_)
    cnt = np.zeros(nt, np.int64)
    contrib = np.zeros(nt)
    for i in range(m):
        comm = 0.0
        comp = 0.0
        mem = 0.0
        a = cuts[i]
        j = i + 1
        b = a
        while b < n and j < m:
            g = order[b]
            b += 1
            inside[g] = True
            comp += time_c[g]
            mem += gbytes[g]
            if not allowed_c[g] or mem > cap_c:
                break
            if paid_c:
                for q in range(g_ptr[g], g_ptr[g + 1]):
                    t = g_tens[q]
                    if t_prod[t] != g:
                        cnt[t] += 1
                    comm -= contrib[t]
                    total = t_ptr[t + 1] - t_ptr[t]
                    if inside[t_prod[t]]:
                        contrib[t] = t_cost[t] if cnt[t] < total else 0.0
                    else:
                        contrib[t] = t_cost[t] if cnt[t] > 0 else 0.0
                    comm += contrib[t]
            if b == cuts[j]:
                out[i, j] = comp + comm
                j += 1
        for jj in range(j, m):
            out[i, jj] = np.inf
        for q in range(a, b):
            g = order[q]
            inside[g] = False
            for r in range(g_ptr[g], g_ptr[g + 1]):
                t = g_tens[r]
                cnt[t] = 0
                contrib[t] = 0.0


@njit(cache=True)
def _ml_key(loads):
    m = 0.0
    s = 0.0
    for d in range(loads.shape[0]):
        if loads[d] > m:
            m = loads[d]
        s += loads[d] * loads[d]
    return m, s


@njit(cache=True)
def ml_local_search(dev, time, gbytes, cap, paid, t_prod, t_ptr, t_cons, t_cost, g_ptr, g_tens, max_sweeps):
    """Move single groups to other devices while the (max load, Σ load²) pair drops, within the
    caps; ``dev`` is changed in place. Returns the max load."""
    k, nd = time.shape
    loads = np.zeros(nd)
    ml_device_loads(dev, time, t_prod, t_ptr, t_cons, t_cost, paid, loads)
    mem = np.zeros(nd)
    for g in range(k):
        mem[dev[g]] += gbytes[g]
    delta = np.zeros(nd)
    trial = np.zeros(nd)
    best_m, best_s = _ml_key(loads)
    for _ in range(max_sweeps):
        improved = False
        for g in range(k):
            d1 = dev[g]
            for d2 in range(nd):
                if d2 == d1 or not np.isfinite(time[g, d2]) or mem[d2] + gbytes[g] > cap[d2]:
                    continue
                delta[:] = 0.0
                delta[d1] -= time[g, d1]
                delta[d2] += time[g, d2]
                for i in range(g_ptr[g], g_ptr[g + 1]):
                    ml_tensor_terms(g_tens[i], dev, t_prod, t_ptr, t_cons, t_cost, paid, -1.0, delta)
                dev[g] = d2
                for i in range(g_ptr[g], g_ptr[g + 1]):
                    ml_tensor_terms(g_tens[i], dev, t_prod, t_ptr, t_cons, t_cost, paid, 1.0, delta)
                for d in range(nd):
                    trial[d] = loads[d] + delta[d]
                m, s = _ml_key(trial)
                if m < best_m - 1e-12 * best_m or (m <= best_m + 1e-12 * best_m and s < best_s * (1 - 1e-12)):
                    loads[:] = trial
                    best_m, best_s = m, s
                    mem[d1] -= gbytes[g]
                    mem[d2] += gbytes[g]
                    d1 = d2
                    improved = True
                else:
                    dev[g] = d1
        if not improved:
            break
    ml_device_loads(dev, time, t_prod, t_ptr, t_cons, t_cost, paid, loads)
    return loads.max()


# ---------------------------------------------------------------------------------------------
# Contiguous splits as chains of ideals (hdp.placement.ideals). A DAG over ``n`` nodes given by
# its predecessor CSR ``pred_ptr``/``pred_idx``; an ideal (a set closed under predecessors) is a
# bitset row of ``bits`` (node ``v`` at word ``v // 64``, bit ``v % 64``); ``node_ptr``/``node_groups``
# the groups each node holds. Ideals are numbered in breadth-first order from the empty one, so
# every ideal's subsets have smaller numbers and the full set is the last.


@njit(cache=True)
def ml_ideals(n, pred_ptr, pred_idx, keys, max_ideals):
    """(bits, trans_ptr, trans_node, trans_child, count): every ideal of the DAG and, per ideal
    ``i``, the nodes ``trans_node[trans_ptr[i]:trans_ptr[i+1]]`` that may join it and the ideal
    each makes. ``count`` is -1 (and the arrays partial) when there are more than ``max_ideals``.
    ``keys``: a random 64-bit key per node (the hash of an ideal is the xor of its members')."""
    words = (n + 63) // 64
    bits = np.zeros((max_ideals, max(words, 1)), np.uint64)
    hashes = np.zeros(max_ideals, np.uint64)
    size = 1
    while size < 2 * max_ideals:
        size *= 2
    mask = size - 1
    table = np.full(size, -1, np.int64)
    cap = 4 * max_ideals + 16
    trans_node = np.zeros(cap, np.int32)
    trans_child = np.zeros(cap, np.int32)
    trans_ptr = np.zeros(max_ideals + 1, np.int64)
    table[0] = 0  # the empty ideal: hash 0
    count = 1
    nt = 0
    head = 0
    one = np.uint64(1)
    while head < count:
        for v in range(n):
            w = v // 64
            b = one << np.uint64(v % 64)
            if bits[head, w] & b:
                continue
            ok = True
            for i in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred_idx[i]
                if not bits[head, u // 64] & (one << np.uint64(u % 64)):
                    ok = False
                    break
            if not ok:
                continue
            h = hashes[head] ^ keys[v]
            pos = np.int64(h & np.uint64(mask))
            found = -1
            while table[pos] >= 0:
                j = table[pos]
                if hashes[j] == h:
                    same = True
                    for x in range(words):
                        want = bits[head, x] | b if x == w else bits[head, x]
                        if bits[j, x] != want:
                            same = False
                            break
                    if same:
                        found = j
                        break
                pos = (pos + 1) & mask
            if found < 0:
                if count == max_ideals:
                    return bits, trans_ptr, trans_node, trans_child, -1
                found = count
                bits[found, :] = bits[head, :]
                bits[found, w] |= b
                hashes[found] = h
                table[pos] = found
                count += 1
            if nt == trans_node.shape[0]:
                grown = np.zeros(2 * nt, np.int32)
                grown[:nt] = trans_node
                trans_node = grown
                grown = np.zeros(2 * nt, np.int32)
                grown[:nt] = trans_child
                trans_child = grown
            trans_node[nt] = v
            trans_child[nt] = found
            nt += 1
        head += 1
        trans_ptr[head] = nt
    return bits[:count], trans_ptr[:count + 1], trans_node[:nt], trans_child[:nt], count


@njit(cache=True)
def _ml_block_add(v, sign, node_ptr, node_groups, time_cls, gbytes, t_prod, t_ptr, t_cons, t_cost, g_ptr, g_tens,
                  inside, cnt, contrib, comp, bad, state):
    """Add (``sign`` 1) or remove (-1) node ``v``'s groups to the block: ``comp[c]`` the compute
    per class (``bad[c]`` counts the groups class ``c`` may not run), ``state[0]`` the bytes,
    ``state[1]`` the transfer terms (the peer rule: a tensor costs once if it leaves the block or
    enters it)."""
    lo = node_ptr[v]
    hi = node_ptr[v + 1]
    for r in range(hi - lo):
        g = node_groups[lo + r] if sign > 0 else node_groups[hi - 1 - r]
        inside[g] = sign > 0
        for c in range(comp.shape[0]):
            if np.isfinite(time_cls[g, c]):
                comp[c] += sign * time_cls[g, c]
            else:
                bad[c] += sign
        state[0] += sign * gbytes[g]
        for i in range(g_ptr[g], g_ptr[g + 1]):
            t = g_tens[i]
            if t_prod[t] != g:
                cnt[t] += sign
            state[1] -= contrib[t]
            total = t_ptr[t + 1] - t_ptr[t]
            if inside[t_prod[t]]:
                contrib[t] = t_cost[t] if cnt[t] < total else 0.0
            else:
                contrib[t] = t_cost[t] if cnt[t] > 0 else 0.0
            state[1] += contrib[t]


@njit(cache=True)
def ml_ideal_dp(trans_ptr, trans_node, trans_child, node_ptr, node_groups, time_cls, paid_cls, cap_cls, size_cls,
                gbytes, t_prod, t_ptr, t_cons, t_cost, g_ptr, g_tens, bound, max_visits):
    """The least max-load of a chain of ideals ∅ = I0 ⊂ I1 ⊂ … ⊂ full, each difference one
    device's block, with at most ``size_cls[c]`` blocks on devices of class ``c`` (identical
    devices: ``time_cls[:, c]`` the class's time per group, ``inf`` where not allowed; its cap and
    whether it pays transfers). States count the devices used per class (mixed radix).

    Pushes from each ideal J (in order) to every ideal above it by a depth-first walk that adds
    one node at a time and stops where the block's compute, which only grows, reaches the best
    value known (``bound`` at first). A state is dropped where the work left cannot fit the devices
    left below that value: measured in each group's least time, a device of class ``c`` holds at
    most ``best * rho[c]`` of it, ``rho[c]`` the largest ratio of a group's least time to its time
    on ``c``. Returns (dp[state, ideal], back_ideal, back_class, visits, complete): ``complete``
    False when ``max_visits`` (ideal pairs) ran out first."""
    n_ideals = trans_ptr.shape[0] - 1
    C = size_cls.shape[0]
    stride = np.ones(C, np.int64)
    S = 1
    for c in range(C):
        stride[c] = S
        S *= size_cls[c] + 1
    can = np.zeros((S, C), np.bool_)
    for s in range(S):
        for c in range(C):
            can[s, c] = (s // stride[c]) % (size_cls[c] + 1) < size_cls[c]
    # the least time of each node, the work of each ideal, what the devices left can hold
    k0 = time_cls.shape[0]
    least = np.zeros(k0)
    rho = np.zeros(C)
    for g in range(k0):
        m = np.inf
        for c in range(C):
            if time_cls[g, c] < m:
                m = time_cls[g, c]
        least[g] = m
    for g in range(k0):
        for c in range(C):
            t = time_cls[g, c]
            if np.isfinite(t) and t > 0:
                r = least[g] / t
                if r > rho[c]:
                    rho[c] = r
    n_nodes0 = node_ptr.shape[0] - 1
    node_w = np.zeros(n_nodes0)
    for v in range(n_nodes0):
        for i in range(node_ptr[v], node_ptr[v + 1]):
            node_w[v] += least[node_groups[i]]
    work = np.full(n_ideals, -1.0)
    work[0] = 0.0
    for i in range(n_ideals):
        for ti in range(trans_ptr[i], trans_ptr[i + 1]):
            ch = trans_child[ti]
            if work[ch] < 0:
                work[ch] = work[i] + node_w[trans_node[ti]]
    total = work[n_ideals - 1]
    room = np.zeros(S)  # what the devices a state has not used can hold, per unit of max-load
    for s in range(S):
        for c in range(C):
            room[s] += (size_cls[c] - (s // stride[c]) % (size_cls[c] + 1)) * rho[c]
    slack = 1.0 + 1e-9
    dp = np.full((S, n_ideals), np.inf)
    back_j = np.full((S, n_ideals), -1, np.int32)
    back_c = np.full((S, n_ideals), -1, np.int8)
    dp[0, 0] = 0.0
    full = n_ideals - 1
    best = bound
    k = gbytes.shape[0]
    nt = t_prod.shape[0]
    inside = np.zeros(k, np.bool_)
    cnt = np.zeros(nt, np.int64)
    contrib = np.zeros(nt)
    comp = np.zeros(C)
    bad = np.zeros(C, np.int64)
    state = np.zeros(2)
    n_nodes = node_ptr.shape[0] - 1
    stack_id = np.zeros(n_nodes + 1, np.int64)
    stack_ti = np.zeros(n_nodes + 1, np.int64)
    stack_v = np.zeros(n_nodes + 1, np.int64)
    stamp = np.full(n_ideals, -1, np.int64)
    visits = 0
    for J in range(n_ideals):
        live = False
        for s in range(S):
            if dp[s, J] < best:
                if total - work[J] > best * room[s] * slack:
                    dp[s, J] = np.inf  # the devices left cannot finish below best
                    continue
                for c in range(C):
                    if can[s, c]:
                        live = True
        if not live:
            continue
        comp[:] = 0.0
        state[:] = 0.0
        stamp[J] = J
        depth = 0
        stack_id[0] = J
        stack_ti[0] = trans_ptr[J]
        while depth >= 0:
            I = stack_id[depth]
            ti = stack_ti[depth]
            if ti < trans_ptr[I + 1]:
                stack_ti[depth] = ti + 1
                child = trans_child[ti]
                if stamp[child] == J:
                    continue
                stamp[child] = J
                v = trans_node[ti]
                _ml_block_add(v, 1, node_ptr, node_groups, time_cls, gbytes, t_prod, t_ptr, t_cons, t_cost, g_ptr,
                              g_tens, inside, cnt, contrib, comp, bad, state)
                visits += 1
                alive = False
                for c in range(C):
                    if bad[c] == 0 and comp[c] < best and state[0] <= cap_cls[c]:
                        alive = True
                        cost = comp[c] + state[1] if paid_cls[c] else comp[c]
                        if cost >= best:
                            continue
                        for s in range(S):
                            if not can[s, c]:
                                continue
                            a = dp[s, J]
                            if a >= best:
                                continue
                            cand = a if a > cost else cost
                            ns = s + stride[c]
                            if cand < dp[ns, child] and total - work[child] <= best * room[ns] * slack:
                                dp[ns, child] = cand
                                back_j[ns, child] = J
                                back_c[ns, child] = c
                                if child == full and cand < best:
                                    best = cand
                if alive:
                    depth += 1
                    stack_id[depth] = child
                    stack_ti[depth] = trans_ptr[child]
                    stack_v[depth] = v
                else:
                    _ml_block_add(v, -1, node_ptr, node_groups, time_cls, gbytes, t_prod, t_ptr, t_cons, t_cost,
                                  g_ptr, g_tens, inside, cnt, contrib, comp, bad, state)
            else:
                if depth > 0:
                    _ml_block_add(stack_v[depth], -1, node_ptr, node_groups, time_cls, gbytes, t_prod, t_ptr, t_cons,
                                  t_cost, g_ptr, g_tens, inside, cnt, contrib, comp, bad, state)
                depth -= 1
        if visits > max_visits:
            return dp, back_j, back_c, visits, False
    return dp, back_j, back_c, visits, True

"""Numba kernels of the serving-plan search (:mod:`hdp.placement.plan_search`): contiguous plans as
chains of ideals with a replica count and streams per stage (Piper's recurrence, Tarnawski et al.,
NeurIPS 2021, over the ideals walk of :mod:`hdp.placement._maxload_kernels`).

Conventions: the DAG's ideals come from :func:`hdp.placement._maxload_kernels.ml_ideals`
(``trans_ptr``/``trans_node``/``trans_child``), ``node_ptr``/``node_groups`` the groups of each node.
Device *columns* ``col`` are the devices a stage may be priced on: one per class of interchangeable
compute slots (the class's first slot), every device of a slot that shares compute; ``col_class``
names the class. ``time_col[g, col]`` (``inf`` where not allowed); replicated chains: ``gr_ptr``/
``gr_unit`` the units each group feeds, ``r_col[u, col]`` their time; tensors ``t_prod``, ``t_ptr``/
``t_cons`` (distinct consumer groups), ``t_cost``, ``g_ptr``/``g_tens`` the tensors of each group;
memory: ``fix_col[g, col]`` (weights at the device's precision + state), ``gm_ptr``/``gm_unit`` the
shared constant units each group reads with ``mu_col[u, col]``, ``over_col``, ``act[g]``,
``state[g]``, ``cap_col``. Options ``o``: a column, a replica count, streams, the multiplier
``mult = r sp(S)`` of the stage's rate, the latency factor ``S / sp(S)`` and the dispatch ``delta``.
"""

from __future__ import annotations

import numpy as np

from hdp.base.jit import njit


@njit(cache=True)
def _plan_add(v, sign, node_ptr, node_groups, time_col, gr_ptr, gr_unit, r_col, t_prod, t_ptr, t_cost, g_ptr, g_tens,
              fix_col, gm_ptr, gm_unit, mu_col, state, recv, send, inside, cnt, contrib, ucnt, mcnt, comp, rcomp, bad,
              memfix, acc):
    """Add (``sign`` 1) or remove (-1) node ``v``'s groups to the block: per column its compute
    ``comp`` (``bad`` counts groups it may not run), replicated chains ``rcomp``, bytes ``memfix``;
    ``acc[0]`` the copies (receive × what enters, send × what leaves), ``acc[1]`` the state."""
    lo = node_ptr[v]
    hi = node_ptr[v + 1]
    ncol = comp.shape[0]
    for r in range(hi - lo):
        g = node_groups[lo + r] if sign > 0 else node_groups[hi - 1 - r]
        inside[g] = sign > 0
        for c in range(ncol):
            if np.isfinite(time_col[g, c]):
                comp[c] += sign * time_col[g, c]
            else:
                bad[c] += sign
            memfix[c] += sign * fix_col[g, c]
        acc[1] += sign * state[g]
        for i in range(gr_ptr[g], gr_ptr[g + 1]):
            u = gr_unit[i]
            if sign > 0:
                ucnt[u] += 1
                if ucnt[u] == 1:
                    for c in range(ncol):
                        rcomp[c] += r_col[u, c]
            else:
                ucnt[u] -= 1
                if ucnt[u] == 0:
                    for c in range(ncol):
                        rcomp[c] -= r_col[u, c]
        for i in range(gm_ptr[g], gm_ptr[g + 1]):
            u = gm_unit[i]
            if sign > 0:
                mcnt[u] += 1
                if mcnt[u] == 1:
                    for c in range(ncol):
                        memfix[c] += mu_col[u, c]
            else:
                mcnt[u] -= 1
                if mcnt[u] == 0:
                    for c in range(ncol):
                        memfix[c] -= mu_col[u, c]
        for i in range(g_ptr[g], g_ptr[g + 1]):
            t = g_tens[i]
            if t_prod[t] != g:
                cnt[t] += sign
            acc[0] -= contrib[t]
            total = t_ptr[t + 1] - t_ptr[t]
            if inside[t_prod[t]]:
                contrib[t] = send * t_cost[t] if cnt[t] < total else 0.0
            else:
                contrib[t] = recv * t_cost[t] if cnt[t] > 0 else 0.0
            acc[0] += contrib[t]


@njit(cache=True)
def plan_ideal_dp(trans_ptr, trans_node, trans_child, node_ptr, node_groups, col_class, size_cls, time_col, gr_ptr,
                  gr_unit, r_col, t_prod, t_ptr, t_cost, g_ptr, g_tens, paid_col, recv, send, overhead, fix_col,
                  gm_ptr, gm_unit, mu_col, over_col, act, state, cap_col, opt_col, opt_r, opt_s, opt_mult, opt_lat,
                  opt_delta, mode, bound, sum_bound, min_slots, max_visits):
    """The best chain of ideals ∅ = I0 ⊂ … ⊂ full, each difference a stage priced on one option
    (a column, ``r`` replicas on ``r`` slots of its class, ``S`` streams each), at most
    ``size_cls[c]`` slots of class ``c`` in all (states count the slots used per class, mixed radix).

    ``mode`` 0: least bottleneck, a stage's period ``L / mult + delta`` (``bound``: one the result
    reaches, it prunes); ``mode`` 1: least Σ of the stages' latencies ``L lat + delta`` among chains
    whose every stage period is at most ``bound`` and whose sum a chain reaches below ``sum_bound``
    (a sum some such chain reaches: it prunes, the result is found even when it equals it). Only chains using ``min_slots`` slots or more
    count as results (and prune). ``L`` = compute + replicated chains + copies
    (where the column pays them) + ``overhead``; a stage fits an option when its bytes (``S``
    streams: ``S`` times its largest activation, ``S - 1`` more times its state) stay within the
    column's cap.

    The walk pushes from each ideal J to every ideal above it adding one node at a time and stops
    where no option can keep the block below the bound (compute and bytes only grow). Returns
    (dp[state, ideal], back_ideal, back_option, visits, complete)."""
    n_ideals = trans_ptr.shape[0] - 1
    C = size_cls.shape[0]
    ncol = time_col.shape[1]
    n_opt = opt_col.shape[0]
    stride = np.ones(C, np.int64)
    S = 1
    for c in range(C):
        stride[c] = S
        S *= size_cls[c] + 1
    used = np.zeros((S, C), np.int64)
    n_used = np.zeros(S, np.int64)
    for s in range(S):
        for c in range(C):
            used[s, c] = (s // stride[c]) % (size_cls[c] + 1)
            n_used[s] += used[s, c]
    maxmult = np.zeros(ncol)
    for o in range(n_opt):
        if opt_mult[o] > maxmult[opt_col[o]]:
            maxmult[opt_col[o]] = opt_mult[o]
    # pruning by the work left: a slot of class c does at most `bound * rho[c] * per_slot[c]` of the
    # least work (rho: the largest ratio of a group's least time to its time on the class)
    k0 = time_col.shape[0]
    least = np.zeros(k0)
    for g in range(k0):
        m = np.inf
        for c in range(ncol):
            if time_col[g, c] < m:
                m = time_col[g, c]
        least[g] = m
    rho = np.zeros(C)
    per_slot = np.zeros(C)
    for o in range(n_opt):
        c = col_class[opt_col[o]]
        v = opt_mult[o] / opt_r[o]
        if v > per_slot[c]:
            per_slot[c] = v
    for g in range(k0):
        for c in range(ncol):
            t = time_col[g, c]
            if np.isfinite(t) and t > 0:
                r = least[g] / t
                if r > rho[col_class[c]]:
                    rho[col_class[c]] = r
    n_nodes = node_ptr.shape[0] - 1
    node_w = np.zeros(n_nodes)
    for v in range(n_nodes):
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
    room = np.zeros(S)
    for s in range(S):
        for c in range(C):
            room[s] += (size_cls[c] - used[s, c]) * rho[c] * per_slot[c]
    slack = 1.0 + 1e-9
    dp = np.full((S, n_ideals), np.inf)
    back_j = np.full((S, n_ideals), -1, np.int32)
    back_o = np.full((S, n_ideals), -1, np.int32)
    dp[0, 0] = 0.0
    full = n_ideals - 1
    best = bound if mode == 0 else sum_bound  # mode 0: the best bottleneck; mode 1: the best sum
    cap_p = bound  # mode 1: the period every stage must keep
    k = time_col.shape[0]
    nt = t_prod.shape[0]
    inside = np.zeros(k, np.bool_)
    cnt = np.zeros(nt, np.int64)
    contrib = np.zeros(nt)
    ucnt = np.zeros(r_col.shape[0], np.int64)
    mcnt = np.zeros(mu_col.shape[0], np.int64)
    comp = np.zeros(ncol)
    rcomp = np.zeros(ncol)
    memfix = np.zeros(ncol)
    bad = np.zeros(ncol, np.int64)
    acc = np.zeros(2)
    act_stack = np.zeros(n_nodes + 2)
    stack_id = np.zeros(n_nodes + 1, np.int64)
    stack_ti = np.zeros(n_nodes + 1, np.int64)
    stack_v = np.zeros(n_nodes + 1, np.int64)
    stamp = np.full(n_ideals, -1, np.int64)
    visits = 0
    limit = best if mode == 0 else cap_p
    for J in range(n_ideals):
        if mode == 0:
            limit = best
        live = False
        for s in range(S):
            if dp[s, J] < best:
                need = total - work[J]
                if need > 0 and need > limit * room[s] * slack:
                    dp[s, J] = np.inf  # the slots left cannot finish within the bound
                    continue
                for c in range(C):
                    if used[s, c] < size_cls[c]:
                        live = True
        if not live:
            continue
        comp[:] = 0.0
        rcomp[:] = 0.0
        memfix[:] = 0.0
        bad[:] = 0
        acc[:] = 0.0
        act_stack[0] = 0.0
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
                _plan_add(v, 1, node_ptr, node_groups, time_col, gr_ptr, gr_unit, r_col, t_prod, t_ptr, t_cost, g_ptr,
                          g_tens, fix_col, gm_ptr, gm_unit, mu_col, state, recv, send, inside, cnt, contrib, ucnt, mcnt,
                          comp, rcomp, bad, memfix, acc)
                a_max = act_stack[depth]
                for i in range(node_ptr[v], node_ptr[v + 1]):
                    if act[node_groups[i]] > a_max:
                        a_max = act[node_groups[i]]
                act_stack[depth + 1] = a_max
                visits += 1
                if mode == 0:
                    limit = best
                alive = False
                for c in range(ncol):
                    if bad[c] == 0 and (comp[c] + rcomp[c]) < limit * maxmult[c] * slack \
                            and memfix[c] + over_col[c] + a_max <= cap_col[c]:
                        alive = True
                if alive:
                    for o in range(n_opt):
                        c = opt_col[o]
                        if bad[c] != 0:
                            continue
                        mem = memfix[c] + over_col[c] + opt_s[o] * a_max + (opt_s[o] - 1) * acc[1]
                        if mem > cap_col[c]:
                            continue
                        load = comp[c] + rcomp[c] + overhead + (acc[0] if paid_col[c] else 0.0)
                        per = load / opt_mult[o] + opt_delta[o]
                        if (mode == 0 and per >= best) or (mode == 1 and per > cap_p * slack):
                            continue
                        step = per if mode == 0 else load * opt_lat[o] + opt_delta[o]
                        cls = col_class[c]
                        inc = opt_r[o] * stride[cls]
                        for s in range(S):
                            if used[s, cls] + opt_r[o] > size_cls[cls]:
                                continue
                            a = dp[s, J]
                            if a >= best:
                                continue
                            cand = (a if a > step else step) if mode == 0 else a + step
                            if cand >= best:
                                continue
                            ns = s + inc
                            need = total - work[child]
                            if cand < dp[ns, child] and (need <= 0 or need <= limit * room[ns] * slack):
                                dp[ns, child] = cand
                                back_j[ns, child] = J
                                back_o[ns, child] = o
                                if child == full and cand < best and n_used[ns] >= min_slots:
                                    best = cand
                    depth += 1
                    stack_id[depth] = child
                    stack_ti[depth] = trans_ptr[child]
                    stack_v[depth] = v
                else:
                    _plan_add(v, -1, node_ptr, node_groups, time_col, gr_ptr, gr_unit, r_col, t_prod, t_ptr, t_cost,
                              g_ptr, g_tens, fix_col, gm_ptr, gm_unit, mu_col, state, recv, send, inside, cnt, contrib,
                              ucnt, mcnt, comp, rcomp, bad, memfix, acc)
            else:
                if depth > 0:
                    _plan_add(stack_v[depth], -1, node_ptr, node_groups, time_col, gr_ptr, gr_unit, r_col, t_prod,
                              t_ptr, t_cost, g_ptr, g_tens, fix_col, gm_ptr, gm_unit, mu_col, state, recv, send, inside,
                              cnt, contrib, ucnt, mcnt, comp, rcomp, bad, memfix, acc)
                depth -= 1
        if visits > max_visits:
            return dp, back_j, back_o, visits, False
    return dp, back_j, back_o, visits, True

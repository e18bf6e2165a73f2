"""Numba kernels of the max-load objective (:mod:`hdp.placement.maxload`), over plain arrays.

Conventions: ``time[g, d]`` (``inf`` where group ``g`` may not run on ``d``), ``gbytes[g]``,
``cap[d]`` (``inf``: no cap), ``paid[d]`` (False for a ``free_comm`` device); tensors ``t`` with
producer group ``t_prod[t]``, distinct consumer groups ``t_cons[t_ptr[t]:t_ptr[t+1]]`` (the
producer's own excluded) and transfer time ``t_cost[t]``; ``g_ptr``/``g_tens``: the tensors each
group produces or consumes.
"""

from __future__ import annotations

import numpy as np

from hdp.jit import njit


@njit(cache=True)
def tensor_terms(t, dev, t_prod, t_ptr, t_cons, t_cost, paid, sign, out):
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
def device_loads(dev, time, t_prod, t_ptr, t_cons, t_cost, paid, out):
    """Load per device of a device per group into ``out``."""
    out[:] = 0.0
    for g in range(dev.shape[0]):
        out[dev[g]] += time[g, dev[g]]
    for t in range(t_prod.shape[0]):
        tensor_terms(t, dev, t_prod, t_ptr, t_cons, t_cost, paid, 1.0, out)


@njit(cache=True)
def segment_loads(order, time_c, paid_c, gbytes, cap_c, allowed_c, t_prod, t_ptr, t_cons, t_cost, g_ptr, g_tens,
                  out):
    """``out[a, b]``: the load of a device of one class holding the groups ``order[a:b]`` (inf when
    one is not allowed there or they exceed its cap); ``time_c`` that class's time column."""
    n = order.shape[0]
    nt = t_prod.shape[0]
    inside = np.zeros(time_c.shape[0], np.bool_)
    cnt = np.zeros(nt, np.int64)
    contrib = np.zeros(nt)
    for a in range(n):
        comm = 0.0
        comp = 0.0
        mem = 0.0
        bad = False
        for b in range(a + 1, n + 1):
            g = order[b - 1]
            inside[g] = True
            comp += time_c[g]
            mem += gbytes[g]
            if not allowed_c[g] or mem > cap_c:
                bad = True
            if paid_c:
                for i in range(g_ptr[g], g_ptr[g + 1]):
                    t = g_tens[i]
                    if t_prod[t] != g:
                        cnt[t] += 1
                    comm -= contrib[t]
                    total = t_ptr[t + 1] - t_ptr[t]
                    if inside[t_prod[t]]:
                        contrib[t] = t_cost[t] if cnt[t] < total else 0.0
                    else:
                        contrib[t] = t_cost[t] if cnt[t] > 0 else 0.0
                    comm += contrib[t]
            out[a, b] = np.inf if bad else comp + comm
        for b in range(a, n):
            g = order[b]
            inside[g] = False
            for i in range(g_ptr[g], g_ptr[g + 1]):
                t = g_tens[i]
                cnt[t] = 0
                contrib[t] = 0.0


@njit(cache=True)
def _key(loads):
    m = 0.0
    s = 0.0
    for d in range(loads.shape[0]):
        if loads[d] > m:
            m = loads[d]
        s += loads[d] * loads[d]
    return m, s


@njit(cache=True)
def local_search(dev, time, gbytes, cap, paid, t_prod, t_ptr, t_cons, t_cost, g_ptr, g_tens, max_sweeps):
    """Move single groups to other devices while the (max load, Σ load²) pair drops, within the
    caps; ``dev`` is changed in place. Returns the max load."""
    k, nd = time.shape
    loads = np.zeros(nd)
    device_loads(dev, time, t_prod, t_ptr, t_cons, t_cost, paid, loads)
    mem = np.zeros(nd)
    for g in range(k):
        mem[dev[g]] += gbytes[g]
    delta = np.zeros(nd)
    trial = np.zeros(nd)
    best_m, best_s = _key(loads)
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
                    tensor_terms(g_tens[i], dev, t_prod, t_ptr, t_cons, t_cost, paid, -1.0, delta)
                dev[g] = d2
                for i in range(g_ptr[g], g_ptr[g + 1]):
                    tensor_terms(g_tens[i], dev, t_prod, t_ptr, t_cons, t_cost, paid, 1.0, delta)
                for d in range(nd):
                    trial[d] = loads[d] + delta[d]
                m, s = _key(trial)
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
    device_loads(dev, time, t_prod, t_ptr, t_cons, t_cost, paid, loads)
    return loads.max()

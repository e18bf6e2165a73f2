"""Numba kernels of HEFT (:func:`hdp.placers.classical.heft`), over the simulator's arrays.

``time``: float64 n_groups x n_devices, ``inf`` where a group may not run; ``zero``: the groups
that take no time and occupy no device (Parameter, Constant, Result); ``p_ptr``/``p_src``/``p_cost``:
each group's incoming edges in CSR (producer, copy seconds), ``s_ptr``/``s_dst``/``s_cost`` its
outgoing ones (see :class:`hdp.placement.simulate.Simulator`).
"""

from __future__ import annotations

import numpy as np

from hdp.base.jit import njit


@njit(cache=True)
def upward_rank(time, s_ptr, s_dst, s_cost):
    """HEFT's upward rank: mean supported time plus the costliest path to an exit."""
    n, nd = time.shape
    rank = np.zeros(n)
    for i in range(n - 1, -1, -1):
        w = 0.0
        c = 0
        for d in range(nd):
            if np.isfinite(time[i, d]):
                w += time[i, d]
                c += 1
        w = w / c if c else 0.0
        best = 0.0
        for k in range(s_ptr[i], s_ptr[i + 1]):
            r = s_cost[k] + rank[s_dst[k]]
            if r > best:
                best = r
        rank[i] = w + best
    return rank


@njit(cache=True)
def heft_schedule(order, time, zero, p_ptr, p_src, p_cost, dev):
    """Earliest-finish-time assignment in ``order`` (non-insertion); fills ``dev``, returns makespan."""
    nd = time.shape[1]
    none = np.empty((0, nd))  # no caps: the memory arguments are not read
    return _earliest_finish(order, time, zero, p_ptr, p_src, p_cost, dev, False, none, np.empty(0),
                            np.empty(0, np.int64), np.empty(0, np.int64), none, np.empty(0), np.empty(0),
                            np.empty(0), np.empty(0), np.empty((0, nd), np.bool_))


@njit(cache=True)
def heft_schedule_mem(order, time, zero, p_ptr, p_src, p_cost, dev, fixed, act, gu_ptr, gu_units, u_bytes, overhead,
                      cap, base, peak, unit_on):
    """:func:`heft_schedule` that only considers devices with room for the group (Baechi's m-ETF):
    a device's memory is ``base`` (its overhead once it runs a group, ``fixed[g, d]`` + shared
    constant units ``u_bytes[u, d]``, once each) + ``peak`` (the largest activation). Returns the
    makespan, or ``-1 - v`` when group ``v`` fits no device (``dev`` then holds the groups placed so
    far); ``base``/``peak``/``unit_on`` are scratch."""
    return _earliest_finish(order, time, zero, p_ptr, p_src, p_cost, dev, True, fixed, act, gu_ptr, gu_units,
                            u_bytes, overhead, cap, base, peak, unit_on)


@njit(cache=True)
def _earliest_finish(order, time, zero, p_ptr, p_src, p_cost, dev, capped, fixed, act, gu_ptr, gu_units, u_bytes,
                     overhead, cap, base, peak, unit_on):
    """The list scheduling of both kernels above; the memory arguments are read only when ``capped``."""
    n, nd = time.shape
    finish = np.zeros(n)
    avail = np.zeros(nd)
    if capped:
        base[:] = 0.0
        peak[:] = -1.0
        unit_on[:, :] = False
    end = 0.0
    for j in range(n):
        v = order[j]
        best_d = -1
        best_f = np.inf
        for d in range(nd):
            t = time[v, d]
            if not np.isfinite(t):
                continue
            if capped:
                extra = fixed[v, d]
                for k in range(gu_ptr[v], gu_ptr[v + 1]):
                    if not unit_on[gu_units[k], d]:
                        extra += u_bytes[gu_units[k], d]
                if peak[d] < 0.0:
                    extra += overhead[d]
                pk = act[v] if act[v] > peak[d] else peak[d]
                if base[d] + extra + pk > cap[d]:
                    continue
            ready = 0.0
            for k in range(p_ptr[v], p_ptr[v + 1]):
                u = p_src[k]
                a = finish[u] + (p_cost[k] if dev[u] != d else 0.0)
                if a > ready:
                    ready = a
            if zero[v]:
                f = ready
            else:
                f = (ready if ready > avail[d] else avail[d]) + t
            if f < best_f or best_d < 0:
                best_f = f
                best_d = d
        if capped:
            if best_d < 0:
                return -1.0 - v
            if peak[best_d] < 0.0:
                base[best_d] += overhead[best_d]
                peak[best_d] = 0.0
            base[best_d] += fixed[v, best_d]
            for k in range(gu_ptr[v], gu_ptr[v + 1]):
                u = gu_units[k]
                if not unit_on[u, best_d]:
                    unit_on[u, best_d] = True
                    base[best_d] += u_bytes[u, best_d]
            if act[v] > peak[best_d]:
                peak[best_d] = act[v]
        dev[v] = best_d
        finish[v] = best_f
        if not zero[v]:
            avail[best_d] = best_f
        if best_f > end:
            end = best_f
    return end

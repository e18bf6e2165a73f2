"""Numba kernels of the simulator and the list-scheduling placer, over plain arrays.

Conventions shared by every kernel (built once by :class:`hdp.placement.simulate.Simulator`):

- ``dev``: int64 device per op; ``res_src``: producer of each Result op (``-1`` otherwise), a
  Result always runs where its producer runs (HETERO overrides its affinity);
- ``time``: float64 n_ops x n_devices, ``inf`` where unsupported, 0 for Parameter/Constant/Result;
- tensors ``t``: CSR ``t_ptr``/``t_cons`` of the distinct consumer ops of each chargeable output
  tensor, ``t_prod`` its producer and ``t_cost`` the seconds one copy of it costs;
- replicated units ``u``: CSR ``r_ptr``/``r_grp`` of the groups each feeds and ``r_time[u, d]``, its
  seconds on device ``d``, paid once on every device that runs one of those groups;
- union edges ``u_src``/``u_dst``: every edge whose producer is not a Constant, in CSR (producer)
  order, so that a producer's incoming edges are all seen before its outgoing ones.
"""

from __future__ import annotations

import numpy as np

from hdp.jit import njit


@njit(cache=True, inline="always")
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@njit(cache=True, inline="always")
def _union(parent, a, b):
    ra = _find(parent, a)
    rb = _find(parent, b)
    if ra != rb:
        if ra < rb:
            parent[rb] = ra
        else:
            parent[ra] = rb


@njit(cache=True)
def effective_devices(dev, res_src, eff):
    """``eff[i]``: the device op ``i`` really runs on (a Result runs with its producer)."""
    for i in range(dev.shape[0]):
        s = res_src[i]
        eff[i] = dev[s] if s >= 0 else dev[i]


@njit(cache=True)
def compute_time(eff, time):
    """Sum of every op's time on its device."""
    total = 0.0
    for i in range(eff.shape[0]):
        total += time[i, eff[i]]
    return total


@njit(cache=True)
def copy_time(eff, t_ptr, t_prod, t_cons, t_cost, stamp):
    """Each tensor is copied once to every device other than its producer's that consumes it.

    ``stamp`` is scratch of length n_devices (overwritten).
    """
    stamp[:] = -1
    total = 0.0
    for t in range(t_prod.shape[0]):
        home = eff[t_prod[t]]
        for k in range(t_ptr[t], t_ptr[t + 1]):
            d = eff[t_cons[k]]
            if d != home and stamp[d] != t:
                stamp[d] = t
                total += t_cost[t]
    return total


@njit(cache=True)
def _components(n, eff, u_src, u_dst, stage, in_scc, comp0, mode, parent, label):
    """Union-find over same-device edges; returns the number of components and fills ``label``.

    mode 0: every same-device edge unites; mode 1: only edges within one stage;
    mode 2: within one stage where the mode-0 component ``comp0`` is on a quotient cycle.
    """
    for i in range(n):
        parent[i] = i
    for e in range(u_src.shape[0]):
        u = u_src[e]
        v = u_dst[e]
        if eff[u] != eff[v]:
            continue
        if mode == 1 and stage[u] != stage[v]:
            continue
        if mode == 2 and stage[u] != stage[v] and in_scc[comp0[u]]:
            continue
        _union(parent, u, v)
    k = 0
    for i in range(n):
        r = _find(parent, i)
        if r == i:
            label[i] = k
            k += 1
        else:
            label[i] = label[r]  # r < i: the root is the smallest member
    return k


@njit(cache=True)
def _cyclic_components(k, label, eff, u_src, u_dst, in_scc):
    """Mark the components that lie on a cycle of the quotient graph (Tarjan, iterative)."""
    m = 0
    for e in range(u_src.shape[0]):
        if label[u_src[e]] != label[u_dst[e]]:
            m += 1
    q_ptr = np.zeros(k + 1, np.int64)
    for e in range(u_src.shape[0]):
        a = label[u_src[e]]
        if a != label[u_dst[e]]:
            q_ptr[a + 1] += 1
    for a in range(k):
        q_ptr[a + 1] += q_ptr[a]
    fill = q_ptr[:k].copy()
    q_idx = np.empty(m, np.int64)
    for e in range(u_src.shape[0]):
        a = label[u_src[e]]
        b = label[u_dst[e]]
        if a != b:
            q_idx[fill[a]] = b
            fill[a] += 1
    index = np.full(k, -1, np.int64)
    low = np.zeros(k, np.int64)
    on_stack = np.zeros(k, np.bool_)
    stack = np.empty(k, np.int64)
    sp = 0
    call = np.empty(k, np.int64)
    nxt = np.empty(k, np.int64)
    cp = 0
    counter = 0
    in_scc[:k] = False
    for root in range(k):
        if index[root] >= 0:
            continue
        call[0] = root
        nxt[0] = q_ptr[root]
        cp = 1
        index[root] = counter
        low[root] = counter
        counter += 1
        stack[sp] = root
        sp += 1
        on_stack[root] = True
        while cp > 0:
            v = call[cp - 1]
            if nxt[cp - 1] < q_ptr[v + 1]:
                w = q_idx[nxt[cp - 1]]
                nxt[cp - 1] += 1
                if index[w] < 0:
                    index[w] = counter
                    low[w] = counter
                    counter += 1
                    stack[sp] = w
                    sp += 1
                    on_stack[w] = True
                    call[cp] = w
                    nxt[cp] = q_ptr[w]
                    cp += 1
                elif on_stack[w] and index[w] < low[v]:
                    low[v] = index[w]
            else:
                if low[v] == index[v]:
                    top = sp
                    while True:
                        sp -= 1
                        w = stack[sp]
                        on_stack[w] = False
                        if w == v:
                            break
                    if top - sp > 1:
                        for j in range(sp, top):
                            in_scc[stack[j]] = True
                cp -= 1
                if cp > 0:
                    u = call[cp - 1]
                    if low[v] < low[u]:
                        low[u] = low[v]


@njit(cache=True)
def subgraph_labels(eff, u_src, u_dst, label, scratch_parent, scratch_label, stage, comp0, in_scc):
    """HETERO subgraphs of a placement: fills ``label`` (subgraph per op), returns their number.

    Subgraphs are the connected components of same-device edges. Where such components would
    depend on each other cyclically (a device-A op feeding device B feeding back into the same
    A component, e.g. a residual block), the components on the cycle are split by *stage*, the
    number of device switches on the longest path reaching an op, which makes the order acyclic.
    """
    n = eff.shape[0]
    for i in range(n):
        stage[i] = 0
    for e in range(u_src.shape[0]):
        u = u_src[e]
        v = u_dst[e]
        s = stage[u] + (1 if eff[u] != eff[v] else 0)
        if s > stage[v]:
            stage[v] = s
    k0 = _components(n, eff, u_src, u_dst, stage, in_scc, comp0, 0, scratch_parent, comp0)
    k1 = _components(n, eff, u_src, u_dst, stage, in_scc, comp0, 1, scratch_parent, scratch_label)
    if k1 == k0:  # the stage split refines the components; equal counts: nothing was split
        label[:] = comp0
        return k0
    _cyclic_components(k0, comp0, eff, u_src, u_dst, in_scc)
    return _components(n, eff, u_src, u_dst, stage, in_scc, comp0, 2, scratch_parent, label)


@njit(cache=True)
def concurrent_labels(eff, zero, u_src, u_dst, label, parent, fwd, bwd):
    """The subgraphs of concurrent execution: fills ``label``, returns their number.

    A subgraph runs whole (one infer request), so a tensor another device needs should leave at its
    end and a tensor it gets from another device should be due at its start. An op with a consumer
    on another device (a *sender*) therefore ends its subgraph and an op with a producer on another
    device (a *receiver*) starts one: ``fwd[v]`` is the longest path reaching ``v`` counting device
    switches and edges out of senders, ``bwd[u]`` the longest path leaving ``u`` counting device
    switches and edges into receivers, and a subgraph is a region of same-device edges whose ops
    agree on both. These are HETERO's subgraphs cut further. The order is acyclic: along every
    edge ``fwd`` never falls and ``bwd`` never rises, and an edge keeping both is a same-device edge
    inside one subgraph. Edges touching a ``zero`` op (Parameter, Constant, Result: no subgraph
    runs them) are ignored; each such op is alone.
    """
    n = eff.shape[0]
    for i in range(n):
        fwd[i] = 0
        bwd[i] = 0
        parent[i] = i
        label[i] = 0  # scratch: bit 1 sender, bit 2 receiver
    for e in range(u_src.shape[0]):
        u = u_src[e]
        v = u_dst[e]
        if not zero[u] and not zero[v] and eff[u] != eff[v]:
            label[u] |= 1
            label[v] |= 2
    for e in range(u_src.shape[0]):
        u = u_src[e]
        v = u_dst[e]
        if zero[u] or zero[v]:
            continue
        s = fwd[u] + (1 if eff[u] != eff[v] or (label[u] & 1) else 0)
        if s > fwd[v]:
            fwd[v] = s
    for e in range(u_src.shape[0] - 1, -1, -1):
        u = u_src[e]
        v = u_dst[e]
        if zero[u] or zero[v]:
            continue
        s = bwd[v] + (1 if eff[u] != eff[v] or (label[v] & 2) else 0)
        if s > bwd[u]:
            bwd[u] = s
    for e in range(u_src.shape[0]):
        u = u_src[e]
        v = u_dst[e]
        if zero[u] or zero[v]:
            continue
        if eff[u] == eff[v] and fwd[u] == fwd[v] and bwd[u] == bwd[v]:
            _union(parent, u, v)
    k = 0
    for i in range(n):
        r = _find(parent, i)
        if r == i:
            label[i] = k
            k += 1
        else:
            label[i] = label[r]
    return k


@njit(cache=True)
def count_subgraphs(label, k, counted, seen):
    """Number of subgraphs holding at least one op that HETERO turns into a submodel
    (``counted``: not a Constant, not a Result)."""
    seen[:k] = False
    c = 0
    for i in range(label.shape[0]):
        if counted[i] and not seen[label[i]]:
            seen[label[i]] = True
            c += 1
    return c


@njit(cache=True)
def replicated_time(eff, r_ptr, r_grp, r_time, stamp):
    """Each unit of replicated ops costs its time once on every device running one of its groups."""
    stamp[:] = -1
    total = 0.0
    for u in range(r_ptr.shape[0] - 1):
        for i in range(r_ptr[u], r_ptr[u + 1]):
            d = eff[r_grp[i]]
            if stamp[d] != u:
                stamp[d] = u
                total += r_time[u, d]
    return total


@njit(cache=True)
def sequential_terms(dev, res_src, time, t_ptr, t_prod, t_cons, t_cost, r_ptr, r_grp, r_time, u_src, u_dst,
                     counted, eff, stamp, label, parent, label2, stage, comp0, flags, seen):
    """(compute seconds, copy seconds, number of subgraphs) of one placement."""
    effective_devices(dev, res_src, eff)
    comp = compute_time(eff, time) + replicated_time(eff, r_ptr, r_grp, r_time, stamp)
    copy = copy_time(eff, t_ptr, t_prod, t_cons, t_cost, stamp)
    k = subgraph_labels(eff, u_src, u_dst, label, parent, label2, stage, comp0, flags)
    nsub = count_subgraphs(label, k, counted, seen)
    return comp, copy, nsub


@njit(cache=True)
def sequential_batch(devs, res_src, time, t_ptr, t_prod, t_cons, t_cost, r_ptr, r_grp, r_time, u_src, u_dst,
                     counted, overhead, out, eff, stamp, label, parent, label2, stage, comp0, flags, seen):
    """Sequential latency of every row of ``devs`` into ``out``."""
    for b in range(devs.shape[0]):
        comp, copy, nsub = sequential_terms(devs[b], res_src, time, t_ptr, t_prod, t_cons, t_cost,
                                            r_ptr, r_grp, r_time, u_src, u_dst, counted, eff, stamp, label,
                                            parent, label2, stage, comp0, flags, seen)
        out[b] = comp + copy + overhead * nsub


@njit(cache=True)
def parallel_latency(eff, time, zero, p_ptr, p_src, p_cost, label, counted, overhead,
                     finish, avail, opened):
    """Makespan when devices run concurrently.

    Ops are list-scheduled in topological (index) order; an op starts when its inputs have
    arrived (producer finish, plus the copy time when it crosses devices; links never congest)
    and its device is free. Zero-time ops (Parameter/Constant/Result) do not occupy a device.
    A subgraph pays ``overhead`` once, before its first op.
    """
    avail[:] = 0.0
    opened[:] = False
    end = 0.0
    for v in range(eff.shape[0]):
        d = eff[v]
        ready = 0.0
        for k in range(p_ptr[v], p_ptr[v + 1]):
            u = p_src[k]
            a = finish[u]
            if eff[u] != d:
                a += p_cost[k]
            if a > ready:
                ready = a
        if zero[v]:
            finish[v] = ready
        else:
            start = ready if ready > avail[d] else avail[d]
            if counted[v] and not opened[label[v]]:
                opened[label[v]] = True
                start += overhead
            finish[v] = start + time[v, d]
            avail[d] = finish[v]
        if finish[v] > end:
            end = finish[v]
    return end


@njit(cache=True)
def concurrent_makespan(eff, time, zero, p_ptr, p_src, p_cost, label, n_lab, n_dev, launch, handover):
    """Makespan of hdp's concurrent executor: its subgraphs (``label``, from
    :func:`concurrent_labels`) run whole, one at a time per device.

    A subgraph takes ``launch`` plus the time of its ops on its device; it starts when its device
    is free and every input has arrived: the producing subgraph's end, plus ``handover`` per edge
    between subgraphs and the copy time ``p_cost`` of an edge that crosses devices. Subgraphs are
    started earliest-start first (an event simulation: start times never decrease), which is what
    the executor's per-device lanes do. Zero-time ops (Parameter, Constant, Result) occupy no
    device and cost nothing to hand over. ``inf`` if some op's device cannot run it.
    """
    n = eff.shape[0]
    sub_time = np.zeros(n_lab)
    sub_dev = np.full(n_lab, -1, np.int64)
    for v in range(n):
        if not zero[v]:
            sub_time[label[v]] += time[v, eff[v]]
            sub_dev[label[v]] = eff[v]
    m = p_ptr[n]
    e_a = np.empty(m, np.int64)
    e_b = np.empty(m, np.int64)
    e_c = np.empty(m)
    ne = 0
    for v in range(n):
        for k in range(p_ptr[v], p_ptr[v + 1]):
            u = p_src[k]
            if label[u] == label[v]:
                continue
            c = 0.0
            if not zero[u] and not zero[v]:
                c = handover + (p_cost[k] if eff[u] != eff[v] else 0.0)
            e_a[ne] = label[u]
            e_b[ne] = label[v]
            e_c[ne] = c
            ne += 1
    ptr = np.zeros(n_lab + 1, np.int64)
    pending = np.zeros(n_lab, np.int64)
    for j in range(ne):
        ptr[e_a[j] + 1] += 1
        pending[e_b[j]] += 1
    for a in range(n_lab):
        ptr[a + 1] += ptr[a]
    fill = ptr[:n_lab].copy()
    out_b = np.empty(ne, np.int64)
    out_c = np.empty(ne)
    for j in range(ne):
        a = e_a[j]
        out_b[fill[a]] = e_b[j]
        out_c[fill[a]] = e_c[j]
        fill[a] += 1
    ready = np.zeros(n_lab)
    done = np.zeros(n_lab, np.bool_)
    avail = np.zeros(n_dev)
    end = 0.0
    for _ in range(n_lab):
        best = -1
        best_s = np.inf
        for a in range(n_lab):
            if done[a] or pending[a] > 0:
                continue
            s = ready[a]
            d = sub_dev[a]
            if d >= 0 and avail[d] > s:
                s = avail[d]
            if best < 0 or s < best_s:
                best = a
                best_s = s
        if best < 0:
            return np.inf  # a cycle: the labels were not from concurrent_labels
        done[best] = True
        d = sub_dev[best]
        f = best_s
        if d >= 0:
            f = best_s + launch + sub_time[best]
            avail[d] = f
        if f > end:
            end = f
        for j in range(ptr[best], ptr[best + 1]):
            b = out_b[j]
            t = f + out_c[j]
            if t > ready[b]:
                ready[b] = t
            pending[b] -= 1
    return end


@njit(cache=True)
def concurrent_batch(devs, time, zero, u_src, u_dst, p_ptr, p_src, p_cost, n_dev, launch, handover, request,
                     out, label, parent, fwd, bwd):
    """:func:`concurrent_makespan` (+ ``request``) of every row of ``devs`` into ``out``."""
    for b in range(devs.shape[0]):
        k = concurrent_labels(devs[b], zero, u_src, u_dst, label, parent, fwd, bwd)
        out[b] = request + concurrent_makespan(devs[b], time, zero, p_ptr, p_src, p_cost, label, k, n_dev,
                                               launch, handover)


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
    n, nd = time.shape
    finish = np.zeros(n)
    avail = np.zeros(nd)
    end = 0.0
    for j in range(n):
        v = order[j]
        best_d = -1
        best_f = np.inf
        for d in range(nd):
            t = time[v, d]
            if not np.isfinite(t):
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
        dev[v] = best_d
        finish[v] = best_f
        if not zero[v]:
            avail[best_d] = best_f
        if best_f > end:
            end = best_f
    return end


@njit(cache=True)
def device_loads(eff, time, t_ptr, t_prod, t_cons, t_cost, r_ptr, r_grp, r_time, u_src, u_dst, counted,
                 overhead, send, receive, free, load, stamp, label, parent, label2, stage, comp0, flags, seen):
    """Each device's share of one request (seconds) into ``load``: the compute of its groups, each
    replicated unit once, ``receive`` × copy for every tensor it receives and ``send`` × copy once
    for every tensor it sends to another device (devices with ``free[d]`` pay no copies), and one
    ``overhead`` per subgraph on it."""
    load[:] = 0.0
    for g in range(eff.shape[0]):
        load[eff[g]] += time[g, eff[g]]
    stamp[:] = -1
    for u in range(r_ptr.shape[0] - 1):
        for i in range(r_ptr[u], r_ptr[u + 1]):
            d = eff[r_grp[i]]
            if stamp[d] != u:
                stamp[d] = u
                load[d] += r_time[u, d]
    stamp[:] = -1
    for t in range(t_prod.shape[0]):
        home = eff[t_prod[t]]
        sent = False
        for k in range(t_ptr[t], t_ptr[t + 1]):
            d = eff[t_cons[k]]
            if d != home and stamp[d] != t:
                stamp[d] = t
                sent = True
                if not free[d]:
                    load[d] += receive * t_cost[t]
        if sent and not free[home]:
            load[home] += send * t_cost[t]
    k = subgraph_labels(eff, u_src, u_dst, label, parent, label2, stage, comp0, flags)
    seen[:k] = False
    for g in range(eff.shape[0]):
        if counted[g] and not seen[label[g]]:
            seen[label[g]] = True
            load[eff[g]] += overhead


@njit(cache=True)
def device_memory(eff, fixed, activation, u_ptr, u_grp, u_bytes, overhead, mem, peak, stamp):
    """Bytes each device needs into ``mem`` (see :mod:`hdp.placement.memory`): ``fixed[g, d]``
    (private weights + state) summed, shared constant units ``u_bytes[u, d]`` once per device, the
    largest ``activation``, and ``overhead[d]`` on every device that runs a group."""
    mem[:] = 0.0
    peak[:] = -1.0
    for g in range(eff.shape[0]):
        d = eff[g]
        mem[d] += fixed[g, d]
        if activation[g] > peak[d]:
            peak[d] = activation[g]
    stamp[:] = -1
    for u in range(u_ptr.shape[0] - 1):
        for i in range(u_ptr[u], u_ptr[u + 1]):
            d = eff[u_grp[i]]
            if stamp[d] != u:
                stamp[d] = u
                mem[d] += u_bytes[u, d]
    for d in range(mem.shape[0]):
        if peak[d] >= 0.0:  # the device runs a group
            mem[d] += peak[d] + overhead[d]


@njit(cache=True)
def throughput_batch(devs, res_src, time, t_ptr, t_prod, t_cons, t_cost, r_ptr, r_grp, r_time, u_src, u_dst,
                     counted, overhead, requests, send, receive, free, out, load, eff, stamp, label, parent,
                     label2, stage, comp0, flags, seen):
    """Steady-state seconds per request of every row of ``devs`` into ``out``:
    ``max(latency / requests, max_d load[d])``."""
    for b in range(devs.shape[0]):
        comp, copy, nsub = sequential_terms(devs[b], res_src, time, t_ptr, t_prod, t_cons, t_cost,
                                            r_ptr, r_grp, r_time, u_src, u_dst, counted, eff, stamp, label,
                                            parent, label2, stage, comp0, flags, seen)
        lat = comp + copy + overhead * nsub
        device_loads(eff, time, t_ptr, t_prod, t_cons, t_cost, r_ptr, r_grp, r_time, u_src, u_dst, counted,
                     overhead, send, receive, free, load, stamp, label, parent, label2, stage, comp0, flags,
                     seen)
        worst = lat / requests
        for d in range(load.shape[0]):
            if load[d] > worst:
                worst = load[d]
        out[b] = worst


@njit(cache=True)
def heft_schedule_mem(order, time, zero, p_ptr, p_src, p_cost, dev, fixed, act, gu_ptr, gu_units, u_bytes, overhead,
                      cap, base, peak, unit_on):
    """:func:`heft_schedule` that only considers devices with room for the group (Baechi's m-ETF):
    a device's memory is ``base`` (its overhead once it runs a group, ``fixed[g, d]`` + shared
    constant units ``u_bytes[u, d]``, once each) + ``peak`` (the largest activation). Returns the
    makespan, or ``-1 - v`` when group ``v`` fits no device (``dev`` then holds the groups placed so
    far); ``base``/``peak``/``unit_on`` are scratch."""
    n, nd = time.shape
    finish = np.zeros(n)
    avail = np.zeros(nd)
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
        if best_d < 0:
            return -1.0 - v
        dev[v] = best_d
        finish[v] = best_f
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
        if not zero[v]:
            avail[best_d] = best_f
        if best_f > end:
            end = best_f
    return end


# ---------------------------------------------------------------------------------------------
# The max-load objective with a memory cap per device (hdp.placement.maxload).
# Conventions: ``time[g, d]`` (``inf`` where group ``g`` may not run on ``d``), ``gbytes[g]``,
# ``cap[d]`` (``inf``: no cap), ``paid[d]`` (False for a ``free_comm`` device); tensors ``t`` with
# producer group ``t_prod[t]``, distinct consumer groups ``t_cons[t_ptr[t]:t_ptr[t+1]]`` (the
# producer's own excluded) and transfer time ``t_cost[t]``; ``g_ptr``/``g_tens``: the tensors each
# group produces or consumes.


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
def ml_segment_loads(order, time_c, paid_c, gbytes, cap_c, allowed_c, t_prod, t_ptr, t_cons, t_cost, g_ptr, g_tens,
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

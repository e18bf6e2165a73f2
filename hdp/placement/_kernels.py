"""Numba kernels of the simulator (:class:`hdp.placement.simulate.Simulator`), over plain arrays:
HETERO's subgraphs and the concurrent executor's, and a placement's latency (sequential, list-
scheduled, concurrent), throughput, device loads and device memory. The kernels of HEFT are in
:mod:`hdp.placers._kernels`, those of the max-load objective in :mod:`hdp.placement._maxload_kernels`.

Conventions shared by every kernel (built once by the Simulator):

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

from hdp.base.jit import njit


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


@njit(cache=True, inline="always")
def _root_labels(n, parent, label):
    """Number the sets of the union-find forest ``parent`` 0, 1, … in the order of their smallest
    member (each set's root, see :func:`_union`) into ``label``; returns their number."""
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
    return _root_labels(n, parent, label)


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
    return _root_labels(n, parent, label)


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
def concurrent_makespan(eff, time, zero, p_ptr, p_src, p_cost, label, n_lab, n_dev, launch, handover,
                        t_ptr, t_prod, t_cons, t_bytes, convert):
    """Makespan of hdp's concurrent executor: its subgraphs (``label``, from
    :func:`concurrent_labels`) run whole, one at a time per device.

    A subgraph takes ``launch`` plus the time of its ops on its device, plus ``convert`` seconds per
    byte of every tensor it receives from another subgraph (once per tensor) and of every tensor it
    hands to another (once per tensor): a compiled sub-model takes and gives plain tensors, which
    the plugin converts into and out of its own layout, work on the subgraph's device that the
    whole-model profile never saw. It starts when its device is free and every input has arrived:
    the producing subgraph's end, plus ``handover`` per edge between subgraphs and the copy time
    ``p_cost`` of an edge that crosses devices. Subgraphs are started earliest-start first (an
    event simulation: start times never decrease), which is what the executor's per-device lanes
    do. Zero-time ops (Parameter, Constant, Result) occupy no device and cost nothing to hand over.
    ``inf`` if some op's device cannot run it.
    """
    n = eff.shape[0]
    sub_time = np.zeros(n_lab)
    sub_dev = np.full(n_lab, -1, np.int64)
    for v in range(n):
        if not zero[v]:
            sub_time[label[v]] += time[v, eff[v]]
            sub_dev[label[v]] = eff[v]
    if convert > 0.0:
        seen = np.full(n_lab, -1, np.int64)
        for t in range(t_prod.shape[0]):
            p = t_prod[t]
            if zero[p]:
                continue
            sent = False
            for k in range(t_ptr[t], t_ptr[t + 1]):
                c = t_cons[k]
                if zero[c] or label[c] == label[p] or seen[label[c]] == t:
                    continue
                seen[label[c]] = t
                sub_time[label[c]] += convert * t_bytes[t]
                sent = True
            if sent:
                sub_time[label[p]] += convert * t_bytes[t]
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
                     t_ptr, t_prod, t_cons, t_bytes, convert, out, label, parent, fwd, bwd):
    """:func:`concurrent_makespan` (+ ``request``) of every row of ``devs`` into ``out``."""
    for b in range(devs.shape[0]):
        k = concurrent_labels(devs[b], zero, u_src, u_dst, label, parent, fwd, bwd)
        out[b] = request + concurrent_makespan(devs[b], time, zero, p_ptr, p_src, p_cost, label, k, n_dev,
                                               launch, handover, t_ptr, t_prod, t_cons, t_bytes, convert)


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

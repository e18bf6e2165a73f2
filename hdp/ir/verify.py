"""Invariant checks for Modules: run between passes, and on every Module decoded from bytes.

A decoded ``.hdp`` file (or cache entry) may be forged or corrupt; Numba kernels index arrays
without bounds checks, so nothing reaches them before :func:`verify` has checked, in order:

- every Array: a numeric dtype of the expected kind in little-endian/native order, a shape of
  the expected rank with non-negative dimensions, and exactly ``prod(shape) * itemsize`` bytes;
- the graph: CSR ``indptr`` starts at 0, never decreases, ends at the edge count; every edge
  ``u -> v`` has ``0 <= u < v < n`` (so ops are in topological order and there is no cycle); ports
  and edge bytes are in range; op names are unique; shapes, FLOPs and weight bytes are sane;
- every stage present: lengths agree with the op count, ids (groups, devices) are in range, group
  graphs go forward, device lists are unique and non-empty names, and floating-point data is
  finite where it must be (times may be ``inf`` for "unsupported", never NaN or negative).

The first broken invariant raises :class:`VerifyError` naming the field.
"""

from __future__ import annotations

import math

import numpy as np

from hdp.ir.types import Array, Module

#: Largest time (seconds) a cost table may hold; beyond it sums overflow and mean nothing.
MAX_SECONDS = 1e9
#: Largest element count of one tensor shape (keeps byte products inside int64).
MAX_NUMEL = 1 << 50
_KINDS = {"int": "i", "bool": "b", "float": "f"}


class VerifyError(ValueError):
    """A Module breaks an IR invariant (a bug in the pass that produced it, or a forged file)."""


def _check(cond, msg: str) -> None:
    if not cond:
        raise VerifyError(msg)


def arr(a, name: str, kind: str, ndim: int, shape: tuple | None = None) -> np.ndarray:
    """The numpy view of Array ``a`` after checking its dtype kind, rank, shape and byte length."""
    _check(isinstance(a, Array), f"{name}: not an array")
    _check(isinstance(a.dtype, str) and 0 < len(a.dtype) <= 8, f"{name}: invalid dtype {a.dtype!r}")
    try:
        dt = np.dtype(a.dtype)
    except (TypeError, ValueError, SyntaxError):
        raise VerifyError(f"{name}: invalid dtype {a.dtype!r}") from None
    _check(dt.kind in _KINDS[kind] and dt.fields is None and dt.shape == () and dt.byteorder in "=<|"
           and 0 < dt.itemsize <= 8, f"{name}: dtype {a.dtype!r} is not a {kind} type")
    _check(len(a.shape) == ndim, f"{name}: rank {len(a.shape)}, expected {ndim}")
    _check(all(isinstance(s, int) and s >= 0 for s in a.shape), f"{name}: negative dimension in {a.shape}")
    if shape is not None and not all(want is None or got == want for got, want in zip(a.shape, shape)):
        if ndim == 1:
            raise VerifyError(f"{name}: length {a.shape[0]}, expected {shape[0]}")
        raise VerifyError(f"{name}: shape {a.shape}, expected {tuple('*' if s is None else s for s in shape)}")
    _check(math.prod(a.shape) * dt.itemsize == len(a.data),
           f"{name}: {len(a.data)} bytes of data for shape {a.shape} of {a.dtype}")
    return a.numpy()


def _devices(devs, name: str) -> int:
    _check(isinstance(devs, tuple) and len(devs) > 0, f"{name}: empty device list")
    _check(all(isinstance(d, str) and d for d in devs), f"{name}: empty device name")
    _check(len(set(devs)) == len(devs), f"{name}: duplicate device name")
    return len(devs)


def _finite_nonneg(x, name: str, positive: bool = False) -> None:
    ok = isinstance(x, (int, float)) and math.isfinite(x) and (x > 0 if positive else x >= 0)
    _check(ok, f"{name}: {x!r} must be finite and {'> 0' if positive else '>= 0'}")


def _ids(a: np.ndarray, hi: int, name: str) -> None:
    if a.size:
        _check(int(a.min()) >= 0 and int(a.max()) < hi, f"{name} out of range (0..{hi - 1})")


def _csr(indptr: np.ndarray, indices: np.ndarray, k: int, name: str) -> None:
    e = indices.shape[0]
    _check(int(indptr[0]) == 0, f"{name}.indptr must start at 0")
    _check(int(indptr[-1]) == e, f"{name}.indptr ends at {int(indptr[-1])} but there are {e} edges")
    _check(bool(np.all(np.diff(indptr) >= 0)), f"{name}.indptr is not non-decreasing")
    if e:
        _ids(indices, k, f"{name}.indices")
        src = np.repeat(np.arange(k, dtype=np.int64), np.diff(indptr))
        bad = np.nonzero(src >= indices)[0]
        _check(bad.size == 0, f"{name}: edge {src[bad[0]] if bad.size else 0}->{indices[bad[0]] if bad.size else 0}"
               " is not forward in topological order")


def verify(m: Module) -> None:
    """Raise VerifyError naming the first broken invariant."""
    g = m.graph
    n = g.n_ops
    _check(isinstance(m.schema, int) and m.schema >= 1, f"invalid schema {m.schema!r}")
    names = set()
    nout = np.zeros(n, np.int64)
    for i, op in enumerate(g.ops):
        where = f"op {i} ('{op.name}')"
        _check(op.name not in names, f"{where}: op names are not unique")
        names.add(op.name)
        _check(len(op.out_shapes) == len(op.out_types), f"{where}: out_shapes and out_types differ in length")
        for s in op.out_shapes:
            _check(all(d >= 0 for d in s) and math.prod(s) <= MAX_NUMEL, f"{where}: invalid output shape {s}")
        _check(math.isfinite(op.flops) and op.flops >= 0, f"{where}: flops {op.flops} must be finite and >= 0")
        _check(op.weight_bytes >= 0, f"{where}: weight_bytes {op.weight_bytes} must be >= 0")
        nout[i] = len(op.out_shapes)
    unknown = [k for k in g.renamed if k not in names]
    _check(not unknown, f"graph.renamed names an op that does not exist ('{unknown[0] if unknown else ''}')")

    indptr = arr(g.indptr, "graph.indptr", "int", 1, (n + 1,))
    idx = arr(g.indices, "graph.indices", "int", 1)
    e = idx.shape[0]
    eb = arr(g.edge_bytes, "graph.edge_bytes", "int", 1, (e,))
    sp = arr(g.src_port, "graph.src_port", "int", 1, (e,))
    dp = arr(g.dst_port, "graph.dst_port", "int", 1, (e,))
    _csr(indptr, idx, n, "graph")
    for field in ("fragile", "live_shapes"):
        if getattr(g, field) is not None:
            arr(getattr(g, field), f"graph.{field}", "bool", 1, (n,))
    if e:
        _check(int(eb.min()) >= 0, "graph.edge_bytes: negative byte count")
        _check(int(dp.min()) >= 0, "graph.dst_port: negative port")
        src = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
        badp = np.nonzero((sp < 0) | (sp >= nout[src]))[0]
        _check(badp.size == 0, "edge source port out of range" + (
            f" (op '{g.ops[src[badp[0]]].name}')" if badp.size else ""))

    if m.features is not None:
        f = m.features
        mat = arr(f.matrix, "features.matrix", "float", 2, (n, len(f.legend)))
        _check(bool(np.all(np.isfinite(mat))), "features.matrix has NaN or infinite values")
    if m.support is not None:
        d = _devices(m.support.devices, "support.devices")
        arr(m.support.mask, "support.mask", "bool", 2, (n, d))
    if m.costs is not None:
        c = m.costs
        d = _devices(c.devices, "costs.devices")
        t = arr(c.op_time, "costs.op_time", "float", 2, (n, d))
        _check(not np.any(np.isnan(t)) and not np.any(t < 0), "costs.op_time has NaN or negative times")
        _check(not np.any(np.isfinite(t) & (t > MAX_SECONDS)), f"costs.op_time has times above {MAX_SECONDS:g} s")
        _check(len(c.kind) == d, "costs.kind length differs from devices")
        _check(all(k in ("measured", "modeled") for k in c.kind), "costs.kind: 'measured' or 'modeled'")
        _finite_nonneg(c.link_latency, "costs.link_latency")
        _finite_nonneg(c.link_bandwidth, "costs.link_bandwidth", positive=True)
        _finite_nonneg(c.subgraph_overhead, "costs.subgraph_overhead")
        _check(len(c.measured_total) in (0, d), "costs.measured_total length differs from devices")
        for x in c.measured_total:
            _finite_nonneg(x, "costs.measured_total")
        if c.edge_time is not None:
            et = arr(c.edge_time, "costs.edge_time", "float", 1, (e,))
            _check(bool(np.all(np.isfinite(et) & (et >= 0) & (et <= MAX_SECONDS))),
                   f"costs.edge_time must be finite, >= 0 and <= {MAX_SECONDS:g} s")
    if m.coarse is not None:
        c = m.coarse
        k = c.n_groups
        _check(0 <= k <= n and (k > 0 or n == 0), f"coarse.n_groups {k} with {n} ops")
        go = arr(c.group_of, "coarse.group_of", "int", 1, (n,))
        _ids(go, k, "coarse.group_of")
        counts = np.bincount(go.astype(np.int64), minlength=k) if n else np.zeros(k, np.int64)
        _check(bool(np.all(counts > 0)), "coarse has empty groups")
        cp = arr(c.indptr, "coarse.indptr", "int", 1, (k + 1,))
        ci = arr(c.indices, "coarse.indices", "int", 1)
        _check(k > 0 or ci.shape[0] == 0, "coarse CSR malformed")
        if k:
            _csr(cp, ci, k, "coarse")
        ceb = arr(c.edge_bytes, "coarse.edge_bytes", "int", 1, (ci.shape[0],))
        _check(ceb.size == 0 or int(ceb.min()) >= 0, "coarse.edge_bytes: negative byte count")
        if c.features is not None:
            cf = arr(c.features, "coarse.features", "float", 2, (k, None))
            _check(bool(np.all(np.isfinite(cf))), "coarse.features has NaN or infinite values")
        if c.member_count is not None:
            mc = arr(c.member_count, "coarse.member_count", "int", 1, (k,))
            _check(bool(np.array_equal(mc.astype(np.int64), counts)), "coarse.member_count disagrees with group_of")
        if c.cost is not None:
            cc = arr(c.cost, "coarse.cost", "float", 2, (k, None))
            _check(not np.any(np.isnan(cc)) and not np.any(cc < 0), "coarse.cost has NaN or negative times")
    if m.partition is not None:
        p = m.partition
        d = _devices(p.devices, "partition.devices")
        go = arr(p.group_of, "partition.group_of", "int", 1, (n,))
        gd = arr(p.group_device, "partition.group_device", "int", 1)
        _ids(go, gd.shape[0], "partition.group_of")
        _ids(gd, d, "partition device id")
    if m.placement is not None:
        p = m.placement
        d = _devices(p.devices, "placement.devices")
        dev = arr(p.device_of, "placement.device_of", "int", 1, (n,))
        _ids(dev, d, "placement device id")

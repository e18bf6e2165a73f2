"""Invariant checks for Modules, run between passes unless disabled."""

from __future__ import annotations

import numpy as np

from hdp.ir.types import Module


class VerifyError(ValueError):
    """A Module breaks an IR invariant (a bug in the pass that produced it, or a forged file)."""


def _check(cond: bool, msg: str) -> None:
    if not cond:
        raise VerifyError(msg)


def verify(m: Module) -> None:
    """Raise VerifyError naming the first broken invariant."""
    g = m.graph
    n = g.n_ops
    indptr = g.indptr.numpy()
    idx = g.indices.numpy()
    e = idx.shape[0]
    _check(indptr.shape == (n + 1,), f"graph.indptr has length {indptr.shape[0]}, expected {n + 1}")
    _check(n == 0 or indptr[0] == 0, "graph.indptr must start at 0")
    _check(indptr[-1] == e, f"graph.indptr ends at {indptr[-1]} but there are {e} edges")
    _check(bool(np.all(np.diff(indptr) >= 0)), "graph.indptr is not non-decreasing")
    for name in ("edge_bytes", "src_port", "dst_port"):
        _check(getattr(g, name).shape == (e,), f"graph.{name} length differs from edge count {e}")
    if e:
        _check(0 <= idx.min() and idx.max() < n, "graph.indices out of range")
        src = np.repeat(np.arange(n), np.diff(indptr))
        bad = np.nonzero(src >= idx)[0]
        _check(bad.size == 0, f"edge {src[bad[0]] if bad.size else 0}->"
               f"{idx[bad[0]] if bad.size else 0} is not forward in topological order")
        sp = g.src_port.numpy()
        nout = np.fromiter((len(op.out_shapes) for op in g.ops), np.int64, n)
        badp = np.nonzero(sp >= nout[src])[0]
        _check(badp.size == 0, "edge source port out of range" + (
            f" (op '{g.ops[src[badp[0]]].name}')" if badp.size else ""))
    names = {op.name for op in g.ops}
    _check(len(names) == n, "op names are not unique")
    for op in g.ops:
        if len(op.out_shapes) != len(op.out_types):
            raise VerifyError(f"op '{op.name}': out_shapes and out_types differ in length")

    if m.features is not None:
        f = m.features
        _check(f.matrix.shape == (n, len(f.legend)),
               f"features.matrix shape {f.matrix.shape} != ({n}, {len(f.legend)})")
    if m.support is not None:
        _check(m.support.mask.shape == (n, len(m.support.devices)), "support.mask shape mismatch")
    if m.costs is not None:
        c = m.costs
        d = len(c.devices)
        _check(c.op_time.shape == (n, d), f"costs.op_time shape {c.op_time.shape} != ({n}, {d})")
        _check(len(c.kind) == d, "costs.kind length differs from devices")
    if m.coarse is not None:
        c = m.coarse
        k = c.n_groups
        go = c.group_of.numpy()
        _check(go.shape == (n,), "coarse.group_of length differs from op count")
        if n:
            _check(go.min() >= 0 and go.max() < k, "coarse.group_of out of range")
            _check(np.unique(go).shape[0] == k, "coarse has empty groups")
        cp = c.indptr.numpy()
        ci = c.indices.numpy()
        _check(cp.shape == (k + 1,) and cp[-1] == ci.shape[0], "coarse CSR malformed")
        _check(c.edge_bytes.shape == ci.shape, "coarse.edge_bytes length mismatch")
        if ci.size:
            _check(ci.min() >= 0 and ci.max() < k, "coarse.indices out of range")
            csrc = np.repeat(np.arange(k), np.diff(cp))
            _check(bool(np.all(csrc < ci)), "coarse graph is not in topological order (or cyclic)")
        if c.features is not None:
            _check(c.features.shape[0] == k, "coarse.features row count differs from n_groups")
        if c.member_count is not None:
            _check(c.member_count.shape == (k,), "coarse.member_count length mismatch")
        if c.cost is not None:
            _check(c.cost.shape[0] == k, "coarse.cost row count differs from n_groups")
    if m.partition is not None:
        p = m.partition
        go = p.group_of.numpy()
        gd = p.group_device.numpy()
        _check(go.shape == (n,), "partition.group_of length differs from op count")
        if n:
            _check(go.min() >= 0 and go.max() < gd.shape[0], "partition.group_of out of range")
        if gd.size:
            _check(gd.min() >= 0 and gd.max() < len(p.devices), "partition device id out of range")
    if m.placement is not None:
        p = m.placement
        d = p.device_of.numpy()
        _check(d.shape == (n,), "placement.device_of length differs from op count")
        if n:
            _check(d.min() >= 0 and d.max() < len(p.devices), "placement device id out of range")

"""The graph the placement network sees, as plain numpy arrays (no torch here).

Nodes are the coarse groups of ``module.coarse`` when present, else the ops. Per node it holds:

- ``x``: input features — the module's features (coarse: the stored mean of members, else the mean
  computed here), squashed with ``sign(x)·log1p(|x|)`` and standardised per column over the graph
  (feature passes emit counts, byte sizes and fractions on very different scales), followed, when
  ``cost_aware``, by :data:`N_COST_FEATURES` device-count-independent cost features;
- ``cost``: seconds per device (the sum of the members' op times), ``allowed``: devices that support
  every member and have a finite time (all devices when none does: the assign pass fixes that);
- ``size``: member op count (the parser's group-size cap counts ops, not nodes).

Edges are undirected (the GCN and the parser treat the DAG symmetrically), unique, ``u < v``, each
with the time to copy its tensors across a link (the sum over the op edges it stands for).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from hdp.errors import InputError
from hdp.ir.build import edge_sources
from hdp.ir.types import Module

#: Per-node cost features appended to the module features when ``cost_aware``: the node's share of
#: the model's best-device time (scaled by node count), log(slowest/fastest device time), and the
#: time to copy its outputs / inputs across a link (same scale).
N_COST_FEATURES = 4


@dataclass(frozen=True)
class LearnGraph:
    """Arrays for one placement problem; see the module docstring."""

    x: np.ndarray  # float32, n_nodes x width
    edges: np.ndarray  # int64, 2 x m, undirected, u < v
    edge_copy: np.ndarray  # float64, m: seconds to copy every tensor on the edge across a link
    cost: np.ndarray  # float64, n_nodes x n_devices, finite (disallowed entries are 0)
    allowed: np.ndarray  # bool, n_nodes x n_devices
    size: np.ndarray  # float64, n_nodes: member op count
    node_of_op: np.ndarray  # int64, n_ops
    devices: tuple[str, ...]
    feature_width: int  # width of module.features (what a reused policy must match)
    cost_aware: bool
    digest: str  # identifies the problem: a checkpoint resumes only on the same digest

    @property
    def n_nodes(self) -> int:
        return self.x.shape[0]

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def op_devices(self, node_device: np.ndarray) -> np.ndarray:
        """Per-op device ids (int16) from per-node device ids."""
        return np.asarray(node_device, np.int16)[self.node_of_op]


def _squash_standardise(x: np.ndarray) -> np.ndarray:
    x = np.sign(x) * np.log1p(np.abs(x))
    if x.shape[0] == 0:
        return x
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    return np.where(sd > 1e-12, (x - mu) / np.where(sd > 1e-12, sd, 1.0), 0.0)


def _costs_in_order(module: Module, devices: tuple[str, ...]) -> np.ndarray:
    c = module.costs
    if c is None:
        raise InputError("the learned placer needs costs; run the profile pass first")
    if set(c.devices) != set(devices):
        raise InputError(f"costs were computed for devices {c.devices}, not for target {devices}")
    t = c.op_time.numpy()
    return t[:, [c.devices.index(d) for d in devices]].astype(np.float64)


def build_learn_graph(module: Module, devices: tuple[str, ...], cost_aware: bool = True) -> LearnGraph:
    """Derive the network's view of ``module`` for the target ``devices`` (in target order)."""
    g = module.graph
    n_ops = g.n_ops
    if module.features is None:
        raise InputError("the learned placer needs features; run the features pass first")
    feats = module.features.matrix.numpy().astype(np.float64)
    width = feats.shape[1]
    op_time = _costs_in_order(module, devices)
    support = np.ones((n_ops, len(devices)), bool)
    if module.support is not None:
        s = module.support
        if set(s.devices) != set(devices):
            raise InputError(f"support was computed for devices {s.devices}, not for target {devices}")
        support = s.mask.numpy()[:, [s.devices.index(d) for d in devices]]
    ok_op = support & np.isfinite(op_time)
    op_time_f = np.where(np.isfinite(op_time), op_time, 0.0)

    src, dst = edge_sources(g).astype(np.int64), g.indices.numpy().astype(np.int64)
    ebytes = g.edge_bytes.numpy().astype(np.float64)
    co = module.coarse
    if co is not None:
        node_of_op = co.group_of.numpy().astype(np.int64)
        n = int(co.n_groups)
        if co.features is not None and co.features.shape[1] == width:
            x = co.features.numpy().astype(np.float64)
        else:
            x = np.zeros((n, width))
            np.add.at(x, node_of_op, feats)
            x /= np.maximum(np.bincount(node_of_op, minlength=n), 1)[:, None]
    else:
        node_of_op = np.arange(n_ops, dtype=np.int64)
        n = n_ops
        x = feats
    size = np.bincount(node_of_op, minlength=n).astype(np.float64)
    cost = np.zeros((n, len(devices)))
    np.add.at(cost, node_of_op, op_time_f)
    bad = np.zeros((n, len(devices)), np.int64)
    np.add.at(bad, node_of_op, (~ok_op).astype(np.int64))
    allowed = bad == 0
    allowed[~allowed.any(axis=1)] = True
    cost = np.where(allowed, cost, 0.0)

    # Node-level edges from the op edges (fine edges inside a node vanish).
    nu, nv = node_of_op[src], node_of_op[dst]
    cross = nu != nv
    lo, hi = np.minimum(nu, nv)[cross], np.maximum(nu, nv)[cross]
    c = module.costs
    copy = c.link_latency + ebytes / (c.link_bandwidth if c.link_bandwidth > 0 else np.inf)
    if lo.size:
        edges, inv = np.unique(np.stack([lo, hi]), axis=1, return_inverse=True)
        edge_copy = np.bincount(inv.reshape(-1), weights=copy[cross], minlength=edges.shape[1])
    else:
        edges, edge_copy = np.zeros((2, 0), np.int64), np.zeros(0)

    x = _squash_standardise(x)
    if cost_aware:
        x = np.concatenate([x, _cost_features(cost, allowed, nu, nv, cross, copy)], axis=1)
    digest = hashlib.blake2b(digest_size=12)
    for a in (x.astype(np.float32), edges, cost, allowed, node_of_op):
        digest.update(np.ascontiguousarray(a).tobytes())
    digest.update("|".join(devices).encode())
    return LearnGraph(x=x.astype(np.float32), edges=edges.astype(np.int64), edge_copy=edge_copy,
                      cost=cost, allowed=allowed,
                      size=size, node_of_op=node_of_op, devices=tuple(devices), feature_width=width,
                      cost_aware=cost_aware, digest=digest.hexdigest())


def _cost_features(cost, allowed, nu, nv, cross, copy) -> np.ndarray:
    n = cost.shape[0]
    big = np.where(allowed, cost, np.inf)
    tmin = big.min(axis=1)
    tmax = np.where(allowed, cost, -np.inf).max(axis=1)
    total = max(float(tmin.sum()), 1e-12)
    eps = 1e-6 * total / max(n, 1) + 1e-15
    share = tmin * n / total
    spread = np.log((tmax + eps) / (tmin + eps))
    copy = copy * n / total
    out_t = np.zeros(n)
    in_t = np.zeros(n)
    np.add.at(out_t, nu[cross], copy[cross])
    np.add.at(in_t, nv[cross], copy[cross])
    f = np.stack([share, spread, out_t, in_t], axis=1)
    return np.log1p(np.clip(f, 0.0, 1e6))

"""The graph the placement network sees, as plain numpy arrays (no torch here).

Nodes are unions of the placement problem's tie groups: the coarse groups of ``module.coarse``
when present (each tie group joins the coarse group of its first member op), else the tie groups
themselves. Per node it holds:

- ``x``: input features — the mean of the member ops' features, squashed with
  ``sign(x)·log1p(|x|)`` and standardised per column over the graph (feature passes emit counts,
  byte sizes and fractions on very different scales), followed, when ``cost_aware``, by
  :data:`N_COST_FEATURES` device-count-independent cost features;
- ``cost``: seconds per device (the sum of the tie groups' times), ``allowed``: devices allowed
  for every tie group of the node (all devices when none is: such a node is never sampled there,
  see :mod:`hdp.learn.model`);
- ``size``: member op count (the parser's group-size cap counts ops, not nodes).

Edges are undirected (the GCN and the parser treat the DAG symmetrically), unique, ``u < v``, each
with the time to copy its tensors across a link. A placement the network emits is a device per
node; :meth:`LearnGraph.group_devices` turns it into a device per tie group.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from hdp.base.errors import InputError
from hdp.ir.types import Module
from hdp.placement.problem import PlacementProblem

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
    node_of_group: np.ndarray  # int64, n_groups: the node of every tie group
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

    def group_devices(self, node_device: np.ndarray) -> np.ndarray:
        """Device per tie group (int16) from a device per node."""
        return np.asarray(node_device, np.int16)[self.node_of_group]


def _squash_standardise(x: np.ndarray) -> np.ndarray:
    x = np.sign(x) * np.log1p(np.abs(x))
    if x.shape[0] == 0:
        return x
    mu = x.mean(axis=0)
    sd = x.std(axis=0)
    return np.where(sd > 1e-12, (x - mu) / np.where(sd > 1e-12, sd, 1.0), 0.0)


def build_learn_graph(module: Module, problem: PlacementProblem, cost_aware: bool = True) -> LearnGraph:
    """Derive the network's view of ``problem`` (built from ``module``, whose features it reads)."""
    if module.features is None:
        raise InputError("the learned placer needs features; run the features pass first")
    if not problem.has_costs:
        raise InputError("the learned placer needs costs; run the profile pass first")
    st = problem.structure
    k, nd = problem.n_groups, problem.n_devices
    feats = module.features.matrix.numpy().astype(np.float64)
    width = feats.shape[1]
    first_op = st.m_ops[st.m_ptr[:-1]].astype(np.int64)
    if module.coarse is not None:
        _, node_of_group = np.unique(module.coarse.group_of.numpy()[first_op], return_inverse=True)
        node_of_group = node_of_group.reshape(-1).astype(np.int64)
    else:
        node_of_group = np.arange(k, dtype=np.int64)
    n = int(node_of_group.max()) + 1 if k else 0
    placed = st.group_of >= 0
    node_of_op = node_of_group[st.group_of[placed]]
    x = np.zeros((n, width))
    np.add.at(x, node_of_op, feats[placed])
    size = np.bincount(node_of_op, minlength=n).astype(np.float64)
    x /= np.maximum(size, 1)[:, None]
    allowed = np.ones((n, nd), bool)
    np.logical_and.at(allowed, node_of_group, problem.allowed)
    allowed[~allowed.any(axis=1)] = True
    cost = np.zeros((n, nd))
    np.add.at(cost, node_of_group, np.where(problem.allowed, problem.time_with_copies(), 0.0))
    cost = np.where(allowed, cost, 0.0)

    # node edges from the tensors (producer group -> consumer group), with their copy seconds
    per_cons = np.repeat(np.arange(st.n_tensors), np.diff(st.t_ptr))
    nu, nv = node_of_group[st.t_prod[per_cons]], node_of_group[st.t_cons]
    copy = np.asarray(problem.t_cost)[per_cons]
    cross = nu != nv
    lo, hi = np.minimum(nu, nv)[cross], np.maximum(nu, nv)[cross]
    if lo.size:
        edges, inv = np.unique(np.stack([lo, hi]), axis=1, return_inverse=True)
        edge_copy = np.bincount(inv.reshape(-1), weights=copy[cross], minlength=edges.shape[1])
    else:
        edges, edge_copy = np.zeros((2, 0), np.int64), np.zeros(0)

    x = _squash_standardise(x)
    if cost_aware:
        x = np.concatenate([x, _cost_features(cost, allowed, nu, nv, cross, copy)], axis=1)
    digest = hashlib.blake2b(digest_size=12)
    for a in (x.astype(np.float32), edges, cost, allowed, node_of_group):
        digest.update(np.ascontiguousarray(a).tobytes())
    digest.update("|".join(problem.devices).encode())
    return LearnGraph(x=x.astype(np.float32), edges=edges.astype(np.int64), edge_copy=edge_copy,
                      cost=cost, allowed=allowed, size=size, node_of_group=node_of_group,
                      devices=tuple(problem.devices), feature_width=width, cost_aware=cost_aware,
                      digest=digest.hexdigest())


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

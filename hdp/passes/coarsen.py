"""``coarsen``: group ops so the partitioner places groups instead of single ops.

Three steps, each keeping the group graph acyclic (kernels in :mod:`hdp.passes._kernels`):

(a) ``fold_constants``: Constants and constant-only chains (e.g. Constant -> Convert -> Multiply
    weight decompression) join their consumer. A constant-only op with several consumers joins the
    consumer group that comes first in topological order. Following the literal *first consumer
    op* instead can create a cycle: with ``c -> a (Convert) -> x``, ``c -> v -> x`` and ``a``
    before ``v``, ``c`` would follow ``a`` into ``x``'s group, which then feeds ``v``, which feeds
    ``x``.
(b) ``rule``, in topological order on the groups of (a), with distinct group neighbours:
    ``paper``: v joins u when v is u's only child and u is v's only parent (HSDAG paper, chains);
    ``loose``: v joins u when u is v's only parent, whatever u's other children (what the
    published HSDAG code's ``merge_operations`` does); ``child``: u joins v when v is u's only
    child, whatever v's other parents; ``none``: skip. Contracting chains, out-trees or in-trees
    of such edges never creates a cycle, so no check is needed.
(c) ``groups`` > 0: multilevel coarsening down to exactly ``groups`` groups (when there are more).
    (The option is not called ``target``: the CLI and the pipeline hand a field of that name the
    device Target.)
    Each level merges pairs of groups that are consecutive in a depth-first topological order —
    intervals of a topological order always have an acyclic quotient — preferring pairs joined by
    an edge, heavy edges (bytes) first, and merged groups of at most ``2 * n_ops / groups`` ops
    (relaxed only when nothing else can merge).

The result numbers groups in topological order (every group edge goes forward). Group edge bytes
count each tensor once per consumer group (a tensor feeding three ops of one group crosses the
boundary once). With ``module.features`` present, group features are the members' mean; with
``module.costs``, group costs are the members' sums (inf stays inf). No randomness is involved.
"""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import MAX_COUNT
from hdp.ir.types import Array, Coarse, Graph, Module
from hdp.passes import _kernels as K
from hdp.passes.base import Pass
from hdp.placement.structure import CONE, roles

RULES = {"paper": K.RULE_PAPER, "loose": K.RULE_LOOSE, "child": K.RULE_CHILD, "none": -1}


class CoarsenPass(Pass, tag="coarsen"):
    """Group ops: constants into consumers, HSDAG co-location, optional multilevel to `groups`."""

    rule: str = "paper"  # paper | loose | child | none
    fold_constants: bool = True
    groups: Annotated[int, Meta(le=MAX_COUNT)] = 0  # target number of groups; 0: no multilevel step
    requires = ("graph",)
    provides = ("coarse",)

    def check(self) -> None:
        if self.rule not in RULES:
            raise InputError(f"unknown rule '{self.rule}' (known: {', '.join(RULES)})")
        if self.groups < 0:
            raise InputError(f"groups={self.groups} must be >= 0 (0 turns it off)")

    def run(self, module: Module) -> Module:
        self.check()
        arrays = graph_arrays(module.graph)
        group_of, k = group_arrays(*arrays, rule=self.rule, fold_constants=self.fold_constants,
                                   groups=self.groups)
        return module.replace(coarse=build_coarse(module, arrays, group_of, k))


def graph_arrays(g: Graph):
    """(indptr, indices, edge_bytes, src_port, is_constant): the arrays the kernels take.
    ``is_constant`` marks constant data (:mod:`hdp.placement.structure`: Constants, ShapeOfs and
    what is computed only from them)."""

    return g.indptr.numpy(), g.indices.numpy(), g.edge_bytes.numpy(), g.src_port.numpy(), roles(g) == CONE


def group_ops(g: Graph, rule: str = "paper", fold_constants: bool = True,
              groups: int = 0) -> tuple[np.ndarray, int]:
    """Group of every op (int32, groups in topological order) and the number of groups."""
    return group_arrays(*graph_arrays(g), rule=rule, fold_constants=fold_constants, groups=groups)


def group_arrays(indptr, indices, edge_bytes, src_port, is_constant, *, rule: str = "paper",
                 fold_constants: bool = True, groups: int = 0) -> tuple[np.ndarray, int]:
    """:func:`group_ops` on plain arrays (what benchmarks time)."""
    n = indptr.shape[0] - 1
    if fold_constants:
        anchor, _ = K.constant_anchors(indptr, indices, is_constant)
        group_of, k = K.renumber_by_root(anchor)
    else:
        group_of, k = np.arange(n, dtype=np.int32), n
    if RULES[rule] >= 0 and k > 1:
        gptr, gidx, _ = K.quotient_csr(indptr, indices, edge_bytes, src_port, group_of, k, False)
        second, k = K.renumber_by_root(K.colocate_roots(gptr, gidx, RULES[rule]))
        group_of = K.compose(group_of, second)
    if 0 < groups < k:
        group_of, k = multilevel(indptr, indices, edge_bytes, src_port, group_of, k, groups)
    return group_of, k


def multilevel(indptr, indices, edge_bytes, src_port, group_of, k, target):
    """Step (c): merge consecutive groups level by level until exactly ``target`` remain."""
    n = group_of.shape[0]
    gptr, gidx, gbytes = K.quotient_csr(indptr, indices, edge_bytes, src_port, group_of, k, True)
    weight = np.bincount(group_of, minlength=k).astype(np.int64)
    cap = max(2, math.ceil(2 * n / target))
    while k > target:
        new_id, k2 = K.interval_matching(gptr, gidx, gbytes, weight, cap, k - target)
        if k2 == k:
            cap *= 2  # nothing fits under the cap: relax it
            continue
        no_ports = np.zeros(gidx.shape[0], np.int32)
        gptr, gidx, gbytes = K.quotient_csr(gptr, gidx, gbytes, no_ports, new_id, k2, False)
        weight = np.bincount(new_id, weights=weight, minlength=k2).astype(np.int64)
        group_of = K.compose(group_of, new_id)
        k = k2
    return group_of, k


def build_coarse(module: Module, arrays, group_of: np.ndarray, k: int) -> Coarse:
    """The Coarse stage for a grouping: group CSR from the op graph (``arrays`` as from
    :func:`graph_arrays`), mean features, member counts, summed costs."""
    indptr, indices, eb, sp, _ = arrays
    gptr, gidx, gbytes = K.quotient_csr(indptr, indices, eb, sp, group_of, k, True)
    members = np.bincount(group_of, minlength=k).astype(np.int32)
    features = cost = None
    if module.features is not None:
        f = module.features.matrix.numpy()
        features = Array.of((K.group_sums(f, group_of, k) / np.maximum(members, 1)[:, None]).astype(np.float32))
    if module.costs is not None:
        cost = Array.of(K.group_sums(module.costs.op_time.numpy(), group_of, k))
    return Coarse(group_of=Array.of(group_of, np.int32), n_groups=int(k), indptr=Array.of(gptr),
                  indices=Array.of(gidx, np.int32), edge_bytes=Array.of(gbytes, np.int64),
                  features=features, member_count=Array.of(members),
                  cost=cost)

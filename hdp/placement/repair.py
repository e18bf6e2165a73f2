"""Repairing a placement that failed its check: find the boundary that breaks, tie it, place again.

When a placed model does not run (or does not match the original), :func:`failing_groups` moves
subsets of the placement's groups onto a placement known to run (every group on one device) and
narrows them down, by delta debugging, to a 1-minimal set whose moves alone make it fail.
:func:`neighbour_ties` then ties each of those groups to its neighbours in the group graph, so the
next placement cannot cut there. The caller re-places with those ties, checks again, and falls
back to the single device when a few rounds do not converge.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from hdp.ir.build import disjoint_set
from hdp.placement.problem import PlacementProblem
from hdp.placement.simulate import Simulator


class Deadline(Exception):
    """The repair's time budget ran out."""


def ddmin(items: list[int], fails: Callable[[list[int]], bool], deadline: float | None = None) -> list[int]:
    """A 1-minimal subset of ``items`` for which ``fails`` holds (Zeller's delta debugging;
    ``fails(items)`` must hold). Raises :class:`Deadline` past ``deadline`` (``time.monotonic()``)."""
    cur = list(items)
    n = 2

    def test(subset) -> bool:
        if deadline is not None and time.monotonic() > deadline:
            raise Deadline()
        return fails(subset)

    while len(cur) >= 2:
        size = -(-len(cur) // n)
        chunks = [cur[i:i + size] for i in range(0, len(cur), size)]
        hit = next((c for c in chunks if test(c)), None)
        if hit is not None:
            cur, n = hit, 2
            continue
        if n > 2:
            hit = next((c for c in ([x for x in cur if x not in set(ch)] for ch in chunks) if test(c)), None)
            if hit is not None:
                cur, n = hit, max(n - 1, 2)
                continue
        if n >= len(cur):
            break
        n = min(len(cur), 2 * n)
    return cur


def islands(problem: PlacementProblem, groups: list[int]) -> list[list[int]]:
    """``groups`` split into the connected pieces they form in the group graph."""
    st = problem.structure
    inside = set(groups)
    uf = disjoint_set(groups)
    for u in groups:
        for v in st.g_idx[st.g_ptr[u]:st.g_ptr[u + 1]]:
            if int(v) in inside:
                uf.merge(u, int(v))
    out: dict[int, list[int]] = {}
    for g in groups:
        out.setdefault(uf[g], []).append(g)
    return list(out.values())


def failing_groups(problem: PlacementProblem, group_device: np.ndarray, base: np.ndarray,
                   fails: Callable[[np.ndarray], bool], deadline: float | None = None) -> list[int]:
    """The groups of ``group_device`` whose moves off ``base`` (a placement that runs) make
    ``fails`` hold, minimal in the sense of :func:`ddmin`: first over the connected islands the
    moved groups form (few, so few checks), then over the groups of the islands that remain."""
    gd = np.asarray(group_device, np.int64)
    base = np.asarray(base, np.int64)
    delta = [int(g) for g in np.nonzero(gd != base)[0]]

    def with_moves(subset: list[int]) -> bool:
        trial = base.copy()
        trial[subset] = gd[subset]
        return fails(trial)

    pieces = islands(problem, delta)
    keep = ddmin(list(range(len(pieces))), lambda ix: with_moves([g for i in ix for g in pieces[i]]), deadline)
    return ddmin([g for i in keep for g in pieces[i]], with_moves, deadline)


def neighbour_ties(problem: PlacementProblem, groups: list[int]) -> list[tuple[int, int]]:
    """Op pairs tying each group of ``groups`` to every group next to it in the group graph."""
    st = problem.structure
    first = st.m_ops[st.m_ptr[:-1]]
    preds: dict[int, list[int]] = {}
    for u in range(st.n_groups):
        for v in st.g_idx[st.g_ptr[u]:st.g_ptr[u + 1]]:
            preds.setdefault(int(v), []).append(u)
    ties = []
    for g in groups:
        for h in list(st.g_idx[st.g_ptr[g]:st.g_ptr[g + 1]]) + preds.get(g, []):
            ties.append((int(first[g]), int(first[int(h)])))
    return sorted(set(ties))


def single_devices(problem: PlacementProblem) -> list[int]:
    """The devices allowed for every group, lowest simulated latency first (in device order
    without costs)."""
    whole = [d for d in range(problem.n_devices) if problem.allowed[:, d].all()]
    if len(whole) < 2 or not problem.has_costs or not problem.n_groups:
        return whole

    singles = Simulator(problem).singles()
    return sorted(whole, key=lambda d: (singles.get(d, float("inf")), d))


def best_single_device(problem: PlacementProblem) -> int:
    """The device allowed for every group with the lowest simulated latency (the first such
    device without costs); -1 when no device runs everything."""
    ranked = single_devices(problem)
    return ranked[0] if ranked else -1

"""The best of several candidates measured head to head (:func:`select_best`), and which of many
to measure at all (:func:`shortlist`): by the verdicts of :mod:`hdp.runtime.measure.stats`, never
by the minimum of noisy samples."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from hdp.base.glossary import NO_CLAIM
from hdp.runtime.measure.load import HostLoad
from hdp.runtime.measure.stats import LEVEL, MARGIN, Comparison, compare, leader_of

__all__ = ["Selection", "select_best", "shortlist"]


def shortlist(estimates: Sequence[float], top: int = 3, preference: Sequence[int] = ()) -> list[int]:
    """Indices of the ``top`` candidates with the lowest finite ``estimates`` (a robust figure such
    as a median), plus the first of ``preference`` if it is not among them (so that the preferred
    candidate, e.g. the best single device, always goes to the head-to-head). Ordered by estimate."""
    est = np.asarray(estimates, np.float64)
    ok = [i for i in np.argsort(est, kind="stable") if np.isfinite(est[i])]
    keep = [int(i) for i in ok[:max(1, top)]]
    if preference and preference[0] not in keep and np.isfinite(est[preference[0]]):
        keep.append(int(preference[0]))
    return sorted(keep, key=lambda i: (est[i], i))


class Selection(msgspec.Struct, frozen=True, kw_only=True):
    """The choice among candidates measured head to head."""

    winner: int
    fastest: int
    #: candidates not slower than the winner beyond noise (the winner included), in index order
    tied: tuple[int, ...]
    #: every other candidate against the winner, at the family level of ``k - 1`` comparisons
    comparisons: tuple[Comparison, ...]
    reason: str


def select_best(times, names: Sequence[str] | None = None, preference: Sequence[int] = (), *,
                level: float = LEVEL, margin: float = MARGIN,
                same_graph: Callable[[int, int], bool] | None = None, blocks=None,
                load: HostLoad | None = None) -> Selection:
    """The best of ``k`` candidates from interleaved ``times`` (rounds x k).

    Every pair is compared at the family level of ``k - 1`` comparisons
    (``1 - (1 - level) / (k - 1)``, see :func:`family_level`). A candidate that another beats
    beyond noise is out. The winner is the first candidate in ``preference`` (indices, most
    preferred first, e.g. the best single device) that no other beats; when none of those is left,
    the fastest (lowest Hodges–Lehmann estimate) of the others. So a candidate is kept over the
    preferred one only when it beats it beyond noise, and the report never shows a candidate
    beating the one kept. ``comparisons``: every other candidate against the winner.
    ``same_graph(i, j)``: whether candidates ``i`` and ``j`` run the same graph (a placement with
    every op on one device and that device's plain compile); such a pair never beats each other,
    whatever the data says, so the preference order decides between them. ``blocks`` and
    ``load``: as for :func:`compare` (every comparison covers each block; a loaded host claims
    nothing, so the first preferred candidate is kept).
    """
    times = np.asarray(times, np.float64)
    if times.ndim != 2 or times.shape[1] < 1:
        raise ValueError("times must be rounds x candidates")
    k = times.shape[1]
    names = list(names) if names is not None else [f"#{i}" for i in range(k)]
    for p in preference:
        if not 0 <= p < k:
            raise ValueError(f"preference index {p} out of range (k = {k})")
    if k == 1:
        return Selection(winner=0, fastest=0, tied=(0,), comparisons=(), reason="only one candidate")
    fastest = leader_of(times)

    def cmp(i: int, j: int) -> Comparison:  # j against i
        sg = bool(same_graph and same_graph(i, j))
        c = compare(times[:, i], times[:, j], level=level, margin=margin, names=(names[i], names[j]),
                    same_graph=sg, family=k - 1, blocks=blocks, load=load)
        if sg and c.verdict == "slower":  # the same graph is never faster than itself: no difference
            c = msgspec.structs.replace(c, verdict="equal",
                                        overruled=f"measured {c.describe()}, but it is the same graph: noise")
        return c

    beaten = [False] * k
    for i in range(k):
        for j in range(i + 1, k):
            v = cmp(i, j).verdict
            if v == "faster":
                beaten[i] = True
            elif v == "slower":
                beaten[j] = True
    left = [c for c in range(k) if not beaten[c]] or list(range(k))
    pref = [p for p in preference if p in left]
    if pref and load is not None and load.loaded:
        winner = pref[0]
        reason = f"{names[winner]}: the first in the preference order ({NO_CLAIM}: {load.describe()})"
    elif pref:
        winner = pref[0]
        reason = (f"{names[winner]}: no other candidate beats it beyond noise and the threshold"
                  + (", and it comes first in the preference order" if len(left) > 1 else ""))
    else:  # the fastest is never beaten (its estimate is the lowest), unless by a same-graph rule
        winner = fastest if fastest in left else left[0]
        reason = (f"{names[winner]} beats every other candidate beyond noise and the threshold" if len(left) == 1 else
                  f"{names[winner]}: no other candidate beats it beyond noise and the threshold, and it has the "
                  f"lowest estimate "
                  f"(none preferred among {', '.join(names[c] for c in left)})")
    others = [c for c in range(k) if c != winner]
    comps = tuple(cmp(winner, c) for c in others)
    tied = tuple(sorted([winner] + [c for c, x in zip(others, comps) if x.verdict != "slower"]))
    return Selection(winner=winner, fastest=fastest, tied=tied, comparisons=comps, reason=reason)

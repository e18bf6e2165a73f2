"""Statistics for timing comparisons: the one place in hdp that turns run times into verdicts.

Candidates are measured **interleaved**, one run of each per round in a balanced rotating order
(:func:`round_order`), so that a slow drift or a burst of load on a shared machine hits every
candidate alike. Two candidates are compared on their **paired log-ratios** ``d_r = log(b_r / a_r)``
(one per round):

- estimate: the Hodges–Lehmann shift, the median of the Walsh averages ``(d_i + d_j) / 2``
  (``i <= j``); ``exp(shift)`` is B's time as a multiple of A's;
- interval: the matching Wilcoxon signed-rank confidence interval (order statistics of the Walsh
  averages; exact distribution up to :data:`EXACT_N` rounds, normal approximation beyond).

Why this statistic: pairing by round cancels drift; ranks make it robust to the outliers a busy
machine produces (the estimate tolerates up to 29 % corrupted rounds); the interval is exact
(distribution-free) for two identical candidates, whose paired log-ratios are symmetric about zero
when the run order is balanced; it needs no resampling, so it is deterministic and fast.

A difference is called only when the whole confidence interval lies beyond a margin on one side:
:data:`MARGIN` (0.5 %) for :func:`compare` alone, the practical :data:`THRESHOLD` (3 %) for every
verdict a head-to-head gives a user (:class:`SequentialPlan`'s ``margin``): a difference smaller than
that is below what one compile against another can promise on another day, in another process
(two processes running one graph differ by several percent). Verdicts, always with the time ratio
and its interval, in the words of :mod:`hdp.base.glossary`::

    0.79× the time, faster (95 % CI 0.76–0.82×)
    1.27× slower (95 % CI 1.20–1.33×)
    equal within noise: 1.01× the time (95 % CI 0.98–1.04×)

**Blocks.** An interval from the rounds of one stretch of time covers the noise between rounds,
not the drift between stretches (another compile of the same graph, another load on the host):
a head-to-head runs in :attr:`SequentialPlan.blocks` separated blocks (each compiles its candidates
afresh), every block gets its own interval, and a comparison's interval is the one that **covers
every block's** (:func:`compare` with ``blocks``). A difference claimed must lie beyond the
threshold in all of them.

**Load.** A measurement assumes that nothing else runs on the host's cores. The worker measures
what other processes did meanwhile (:class:`HostLoad`: the host's busy CPU time less its own, per
wall second); beyond :data:`hdp.runtime.measure.load.LOAD_LIMIT` of the cores the comparison
makes no claim at all (``loaded``), and says so.

Several candidates measured together are compared at one **family level**
(:func:`family_level`): with ``k`` candidates, each of the ``k - 1`` comparisons that a decision
rests on gets a ``1 - (1 - level) / (k - 1)`` interval (Bonferroni), so that all of them hold
together with probability ``level``; a report states that level once for the block.

:class:`SequentialPlan` decides when enough rounds have run (every comparison with the current
leader resolved to a set relative difference, or a round/time cap) and :func:`run_sequential`
drives it over any round-runner; :func:`hdp.runtime.measure.selection.select_best` picks the best
of several candidates measured head to head (the fastest only when it beats the others beyond
noise; otherwise the first in a preference order among those equal within noise).
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec
import numpy as np

from hdp.base.glossary import NO_CLAIM, interval, ratio, time_change
from hdp.runtime.measure.load import HostLoad

#: Default confidence level of intervals and verdicts.
LEVEL = 0.95
#: Relative differences smaller than this are never called a difference by :func:`compare` (0.5 %).
MARGIN = 0.005
#: The practical threshold of every verdict a user reads: a time ratio is claimed faster (slower)
#: only when its whole interval, covering every block, lies below 1 - THRESHOLD (above 1 + THRESHOLD).
THRESHOLD = 0.03
#: Separated blocks of a head-to-head, each with its own compiles and rounds (see the module docstring).
BLOCKS = 2
#: Up to this many rounds the signed-rank interval uses the exact null distribution.
EXACT_N = 100

Verdict = Literal["faster", "slower", "equal"]
_NORMAL = statistics.NormalDist()

__all__ = ["BLOCKS", "LEVEL", "MARGIN", "THRESHOLD", "Comparison", "SequentialPlan", "PlanStatus", "compare",
           "family_level", "hl_estimate", "hodges_lehmann", "leader_of", "round_order", "run_sequential"]


def family_level(level: float, k: int) -> float:
    """The level of each of the ``k - 1`` comparisons among ``k`` candidates (each against one of
    them) so that all hold together at ``level`` (Bonferroni)."""
    return 1 - (1 - level) / max(k - 1, 1)


def pct(level: float) -> str:
    """``0.975`` -> ``97.5 %``, ``0.98333`` -> ``98.3 %`` (one decimal at most)."""
    return f"{round(level * 100, 1):g} %"


# --------------------------------------------------------------------------- the interval


@functools.lru_cache(maxsize=512)
def _signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= s) for s = 0 .. n(n+1)/2 under the null (exact, by dynamic programming)."""
    m = n * (n + 1) // 2
    p = np.zeros(m + 1)
    p[0] = 1.0
    top = 0
    for i in range(1, n + 1):
        nxt = p.copy()
        nxt[i:top + i + 1] += p[:top + 1]
        top += i
        p = nxt * 0.5
    return np.cumsum(p)


@functools.lru_cache(maxsize=4096)
def _rank_k(n: int, level: float) -> int:
    """The 1-based order statistic of the Walsh averages that bounds a two-sided ``level`` interval
    from below (the upper bound is the ``M + 1 - k``-th): the largest k with P(T+ <= k-1) <= alpha/2.
    0 when ``n`` rounds cannot reach ``level``."""
    alpha = 1.0 - level
    if n <= EXACT_N:
        return int(np.count_nonzero(_signed_rank_cdf(n) <= alpha / 2 + 1e-12))
    mu = n * (n + 1) / 4
    sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
    return max(0, int(math.floor(mu + 0.5 - _NORMAL.inv_cdf(1 - alpha / 2) * sd)))


#: Above this many values, Walsh-average order statistics are found by bisection, not by
#: materialising all n(n+1)/2 of them.
_WALSH_DIRECT = 400
_BISECT_TOL = 1e-7


@functools.lru_cache(maxsize=1)
def _all_pairs() -> tuple[np.ndarray, np.ndarray]:
    """Pairs i <= j < _WALSH_DIRECT ordered by j, so that those of n values are a prefix."""
    big, small = np.tril_indices(_WALSH_DIRECT)  # row-major: by the larger index
    return small, big


def _pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    i, j = _all_pairs()
    m = n * (n + 1) // 2
    return i[:m], j[:m]


def _walsh_order(d: np.ndarray, ks: list[int]) -> list[float]:
    """The ``ks``-th smallest (1-based) Walsh averages ``(d_i + d_j) / 2``, ``i <= j``."""
    n = d.size
    m = n * (n + 1) // 2
    if n <= _WALSH_DIRECT:
        i, j = _pairs(n)
        w = (d[i] + d[j]) * 0.5
        idx = sorted({k - 1 for k in ks})
        part = np.partition(w, idx)
        return [float(part[k - 1]) for k in ks]
    ds = np.sort(d)
    pos = np.arange(n)
    kk = np.clip(np.asarray(ks, np.int64), 1, m)

    def counts_le(x: np.ndarray) -> np.ndarray:  # per x: pairs i <= j with ds[i] + ds[j] <= 2x
        hi = np.searchsorted(ds, (2.0 * x[:, None] - ds[None, :]).ravel(), side="right").reshape(x.size, n)
        return np.maximum(hi - pos, 0).sum(axis=1)

    # bisection for every k at once: count(lo) < k <= count(hi), until the bracket is tol wide
    lo = np.full(kk.size, float(ds[0]))
    hi = np.full(kk.size, float(ds[-1]))
    first = counts_le(lo) >= kk  # the k-th is the smallest value itself
    while True:
        open_ = ~first & (hi - lo > _BISECT_TOL)
        if not open_.any():
            break
        mid = 0.5 * (lo + hi)
        c = counts_le(mid)
        up = open_ & (c >= kk)
        down = open_ & ~(c >= kk)
        hi = np.where(up, mid, hi)
        lo = np.where(down, mid, lo)
    out = []
    for q in range(kk.size):
        if first[q]:
            out.append(float(ds[0]))
            continue
        # snap to the smallest Walsh average above lo (the k-th itself unless two lie within tol)
        jj = np.maximum(np.searchsorted(ds, 2.0 * lo[q] - ds, side="right"), pos)
        ok = jj < n
        out.append(float(np.min((ds[ok] + ds[jj[ok]]) * 0.5)) if ok.any() else float(hi[q]))
    return out


def lag1_autocorrelation(d) -> float:
    """Lag-1 autocorrelation of the ranks of ``d`` (robust to outliers), clipped to [0, 0.9]: how
    far consecutive rounds are from independent (slow load changes that interleaving did not
    cancel). 0 for fewer than 10 values."""
    d = np.asarray(d, np.float64)
    if d.size < 10:
        return 0.0
    r = np.argsort(np.argsort(d, kind="stable"), kind="stable").astype(np.float64)
    r -= r.mean()
    den = float((r * r).sum())
    rho = float((r[:-1] * r[1:]).sum()) / den if den > 0 else 0.0
    return min(max(rho, 0.0), 0.9)


def _inflated_level(level: float, rho: float) -> float:
    """The level whose interval is as wide as a ``level`` interval on ``n (1 - rho) / (1 + rho)``
    independent values (AR(1) variance inflation)."""
    if rho <= 0:
        return level
    z = _NORMAL.inv_cdf(0.5 + level / 2) * math.sqrt((1 + rho) / (1 - rho))
    return min(round(2 * _NORMAL.cdf(z) - 1, 6), 1 - 1e-9)


def hl_estimate(d) -> float:
    """The Hodges–Lehmann estimate alone: the median of the Walsh averages of ``d``."""
    d = np.asarray(d, np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan")
    m = d.size * (d.size + 1) // 2
    a, b = _walsh_order(d, [(m + 1) // 2, m // 2 + 1])
    return 0.5 * (a + b)


def _intervals(d: np.ndarray, levels: Sequence[float], serial: bool) -> list[tuple[float, float]]:
    """Signed-rank intervals of finite ``d`` at each level, from one pass over the Walsh averages."""
    n = d.size
    m = n * (n + 1) // 2
    rho = lag1_autocorrelation(d) if serial else 0.0
    ks = [_rank_k(n, _inflated_level(float(lv), rho)) for lv in levels]
    want = [x for k in ks if k >= 1 for x in (k, m + 1 - k)]
    vals = iter(_walsh_order(d, want)) if want else iter(())
    out = []
    for k in ks:
        out.append((next(vals), next(vals)) if k >= 1 else (-math.inf, math.inf))
    return out


def hodges_lehmann(d, level: float = LEVEL, *, serial: bool = True) -> tuple[float, float, float]:
    """(estimate, low, high) of the centre of the paired differences ``d`` (in round order): the
    Hodges–Lehmann estimate and its Wilcoxon signed-rank confidence interval at ``level``, widened
    for positive serial correlation between rounds when ``serial`` (see :func:`lag1_autocorrelation`).
    The interval is (-inf, inf) when there are too few values to reach ``level`` (fewer than 6 at 95 %)."""
    d = np.asarray(d, np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan"), -math.inf, math.inf
    (lo, hi), = _intervals(d, [level], serial)
    return hl_estimate(d), lo, hi


# --------------------------------------------------------------------------- two candidates


class Comparison(msgspec.Struct, frozen=True, kw_only=True):
    """B against A from paired rounds: ``ratio`` = B's time / A's time (estimate), ``low``/``high``
    its confidence interval at ``level`` (covering each of ``blocks`` blocks' own); ``verdict`` is
    B's: faster, slower or equal (within noise or the threshold ``margin``). ``load``: what other
    processes did meanwhile; when it made the host ``loaded``, the verdict is "equal" and the
    words say that nothing is claimed."""

    a: str
    b: str
    rounds: int
    ratio: float
    low: float
    high: float
    level: float = LEVEL
    margin: float = MARGIN
    verdict: Verdict = "equal"
    same_graph: bool = False
    #: what the data said when ``same_graph`` overruled a "faster" (else empty)
    overruled: str = ""
    #: the level is one of a family: ``level`` holds for ``family`` comparisons together
    #: (:func:`family_level`); 1: this comparison alone
    family: int = 1
    family_of: float = LEVEL  # the level of the family
    blocks: int = 1  #: separated blocks the interval covers
    load: HostLoad | None = None
    #: the statistics alone would have said (before the host's load withheld it; else empty)
    withheld: str = ""

    @property
    def loaded(self) -> bool:
        return self.load is not None and self.load.loaded

    @property
    def claimed(self) -> bool:
        """Whether this comparison claims a difference (faster or slower)."""
        return self.verdict != "equal"

    @property
    def resolution(self) -> float:
        """The largest relative difference the interval leaves open (the ``±y`` of "equal")."""
        return max(self.high - 1.0, 1.0 - self.low)

    def describe(self, level: bool = True) -> str:
        """The verdict with its time ratio and interval (:func:`hdp.base.glossary.time_change`):
        ``0.79× the time, faster (95 % CI 0.76–0.82×)``, ``1.27× slower (...)``, ``equal within
        noise: 1.01× the time (...)``, or ``no claim: the host was loaded (...)`` (``level=False``:
        ``CI`` without the level, for a block that states it once)."""
        lvl = (f"{pct(self.level)} " if self.family <= 1 else f"{pct(self.family_of)} simultaneous ") \
            if level else ""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return f"not resolved (too few rounds for a {pct(self.level)} interval)"
        over = f", {self.blocks} blocks" if self.blocks > 1 else ""
        ci = f"{lvl}CI {interval(self.low, self.high)}{over}"
        if self.loaded:
            return f"{NO_CLAIM}: {self.load.describe()}; measured {ratio(self.ratio)} the time ({ci})"
        if self.overruled:
            return f"no difference: {self.overruled}"
        small = self.verdict == "equal" and (self.high < 1.0 or self.low > 1.0)
        return f"{time_change(self.ratio, self.verdict, below_threshold=small, margin=self.margin)} ({ci})"

    def text(self) -> str:
        """One sentence with the names: ``B vs A: 0.79× the time, faster (...) (N rounds)``."""
        return f"{self.b} vs {self.a}: {self.describe()} ({self.rounds} rounds)"

    def to_dict(self) -> dict:
        d = msgspec.to_builtins(self)
        d.update(resolution=self.resolution, text=self.text(), loaded=self.loaded, claimed=self.claimed)
        return d


def _verdict(low: float, high: float, margin: float) -> Verdict:
    if high < 1.0 - margin:
        return "faster"
    if low > 1.0 + margin:
        return "slower"
    return "equal"


def compare(a, b, *, level: float = LEVEL, margin: float = MARGIN, names: tuple[str, str] = ("A", "B"),
            same_graph: bool = False, family: int = 1, blocks=None, load: HostLoad | None = None) -> Comparison:
    """B against A from interleaved times: ``a[r]`` and ``b[r]`` were measured in the same round ``r``.

    ``same_graph``: B runs the same graph as A (a placement with every op on one device against
    that device's plain compile), so B is never called faster: a "faster" the data shows is
    reported as equal, with the measured figure in ``overruled``. ``family``: this is one of that
    many comparisons that hold together at ``level`` (its own interval is at
    ``1 - (1 - level) / family``). ``blocks``: the block of each round (separated blocks, see the
    module docstring); the interval is the one covering each block's own interval at ``level``
    (and the pooled one). ``load``: a :class:`HostLoad` that made the host loaded withholds
    the verdict (what it would have been goes to ``withheld``).
    """
    family_of = level
    level = 1 - (1 - level) / max(family, 1)
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired times need two equal-length 1-D arrays (got {a.shape} and {b.shape})")
    ok = (a > 0) & (b > 0) & np.isfinite(a) & np.isfinite(b)
    d = np.log(b[ok]) - np.log(a[ok])
    est, lo, hi = hodges_lehmann(d, level)
    nblocks = 1
    if blocks is not None:
        blk = np.asarray(blocks)
        if blk.shape != a.shape:
            raise ValueError(f"one block per round (got {blk.shape} for {a.shape})")
        blk = blk[ok]
        ids = np.unique(blk)
        nblocks = int(ids.size)
        if nblocks > 1:
            for k in ids:
                _, blo, bhi = hodges_lehmann(d[blk == k], level)
                lo, hi = min(lo, blo), max(hi, bhi)
    c = Comparison(a=names[0], b=names[1], rounds=int(ok.sum()), ratio=math.exp(est) if d.size else math.nan,
                   low=math.exp(lo), high=math.exp(hi), level=level, margin=margin,
                   verdict=_verdict(math.exp(lo), math.exp(hi), margin), same_graph=same_graph,
                   family=max(family, 1), family_of=family_of, blocks=max(nblocks, 1), load=load)
    if same_graph and c.verdict == "faster":
        said = c.describe()
        c = msgspec.structs.replace(c, verdict="equal", overruled=f"measured {said}, but it is the same graph: noise")
    if c.loaded and c.verdict != "equal":
        c = msgspec.structs.replace(c, verdict="equal", withheld=c.verdict)
    return c


# --------------------------------------------------------------------------- run order


@functools.lru_cache(maxsize=64)
def _williams(k: int) -> tuple[tuple[int, ...], ...]:
    first = [0]
    lo, hi = 1, k - 1
    while len(first) < k:
        first.append(lo)
        lo += 1
        if len(first) < k:
            first.append(hi)
            hi -= 1
    rows = [tuple((x + i) % k for x in first) for i in range(k)]
    if k % 2:
        rows += [r[::-1] for r in rows]
    return tuple(rows)


def round_order(r: int, k: int) -> list[int]:
    """The order of ``k`` candidates in round ``r``, from a Williams design (``k`` rounds for even
    ``k``, ``2k`` for odd, repeated): every candidate takes every position equally often and
    follows every other candidate equally often, so neither the position in a round nor the
    candidate run just before biases a comparison."""
    rows = _williams(k)
    return list(rows[r % len(rows)])


# --------------------------------------------------------------------------- how many rounds


class PlanStatus(msgspec.Struct, frozen=True):
    done: bool
    reason: str
    leader: int = 0


class SequentialPlan(msgspec.Struct, frozen=True, kw_only=True):
    """When to stop measuring interleaved rounds.

    After ``min_rounds`` kept rounds (``discard`` first rounds are dropped as warm-up of the
    interleaving), at every look: the leader is the candidate with the lowest estimate; a
    comparison with the leader is *resolved* when its ``level`` interval is narrow enough to tell a
    ``resolution`` difference apart (half-width <= ``resolution / 2``), or when even the stricter
    ``interim_level`` interval already lies beyond the margin (a clear difference: stop early, and
    the strict level keeps repeated looks from inflating false positives). Stops when every
    comparison with the leader (``all_pairs``: every comparison) is resolved, or at
    ``max_rounds`` / ``max_seconds`` (of running, compiles excluded).
    """

    resolution: float = 0.03
    level: float = LEVEL
    margin: float = THRESHOLD
    interim_level: float = 0.999
    min_rounds: int = 10
    max_rounds: int = 1000
    max_seconds: float = 30.0
    discard: int = 1
    #: run about this many seconds of rounds between looks (at least ``min_rounds``-sized steps
    #: early on, then growing with the rounds so far so that the number of looks stays small)
    look_seconds: float = 0.5
    #: a candidate to keep unless another beats it (the preferred one of a best-of), or -1. With an
    #: anchor the question is one-sided, and the plan also stops as soon as no candidate can beat
    #: the anchor by ``resolution`` or more (every interval of another against it, at the family
    #: level of the ``k - 1`` comparisons with the anchor, lies above ``1 - resolution``); until
    #: then the leader rule above applies as without an anchor.
    anchor: int = -1
    #: resolve every pair of candidates, not only each against the leader (``hdp evaluate a b c``
    #: gives a verdict per pair)
    all_pairs: bool = False
    #: separated blocks (:data:`BLOCKS`): the candidates compiled afresh and measured again, each
    #: block under this plan with ``max_seconds`` and ``max_rounds`` shared out; every verdict's
    #: interval covers each block's
    blocks: int = BLOCKS

    def __post_init__(self):
        if not 0 < self.resolution < 1:
            raise ValueError(f"resolution must be in (0, 1) (got {self.resolution})")
        if not 0.5 < self.level < self.interim_level < 1:
            raise ValueError(f"need 0.5 < level < interim_level < 1 (got {self.level}, {self.interim_level})")
        if self.min_rounds < 6 or self.max_rounds < self.min_rounds:
            raise ValueError(f"need 6 <= min_rounds <= max_rounds (got {self.min_rounds}, {self.max_rounds})")
        if not self.max_seconds > 0 or self.discard < 0:
            raise ValueError("max_seconds must be > 0 and discard >= 0")
        if self.blocks < 1:
            raise ValueError(f"blocks must be at least 1 (got {self.blocks})")

    def block(self) -> "SequentialPlan":
        """The plan of one of :attr:`blocks` blocks: the time and round caps shared out (at least
        ``min_rounds`` rounds each)."""
        if self.blocks <= 1:
            return self
        return msgspec.structs.replace(self, blocks=1, max_seconds=self.max_seconds / self.blocks,
                                       max_rounds=max(self.min_rounds, self.max_rounds // self.blocks))

    def _paired(self, a, b, level: float | None = None) -> tuple[Verdict, float, float]:
        """B against A from paired times: the verdict of the ``interim_level`` interval and the
        ``level`` interval (ratios B/A; default: the plan's level)."""
        d = np.log(np.asarray(b, np.float64)) - np.log(np.asarray(a, np.float64))
        d = d[np.isfinite(d)]
        (ilo, ihi), (lo, hi) = _intervals(d, [self.interim_level, level or self.level], serial=True)
        return _verdict(math.exp(ilo), math.exp(ihi), self.margin), math.exp(lo), math.exp(hi)

    def resolved(self, a, b) -> bool:
        """Whether the comparison of paired times ``a``, ``b`` is resolved (see the class)."""
        clear, lo, hi = self._paired(a, b)
        return clear != "equal" or (hi - lo) / 2 <= self.resolution / 2

    def _against_anchor(self, a, b, k: int = 2) -> str:
        """``b`` against the anchor's times ``a``: "beats" (clearly faster, at the interim level),
        "cannot" (cannot be faster by ``resolution``, at the family level of ``k`` candidates) or
        "open"."""
        clear, lo, _ = self._paired(a, b, family_level(self.level, k))
        if clear == "faster":
            return "beats"
        return "cannot" if lo >= 1.0 - self.resolution else "open"

    def status(self, times: np.ndarray, elapsed: float) -> PlanStatus:
        """Decide on kept rounds ``times`` (rounds x candidates) after ``elapsed`` seconds."""
        times = np.asarray(times, np.float64)
        n, k = times.shape
        leader = leader_of(times) if n else 0
        if n >= self.max_rounds:
            return PlanStatus(True, f"round cap ({self.max_rounds} rounds)", leader)
        if elapsed >= self.max_seconds:
            return PlanStatus(True, f"time cap ({self.max_seconds:g} s, {n} rounds)", leader)
        if n < self.min_rounds:
            return PlanStatus(False, "", leader)
        if 0 <= self.anchor < k:
            states = {self._against_anchor(times[:, self.anchor], times[:, c], k) for c in range(k)
                      if c != self.anchor}
            if states <= {"cannot"}:
                return PlanStatus(True, f"none can beat the preferred candidate by {self.resolution * 100:g} % "
                                        f"or more ({n} rounds; one-sided, {pct(self.level)} for all together)",
                                  leader)
        pairs = [(a, b) for a in range(k) for b in range(a + 1, k)] if self.all_pairs else \
            [(leader, c) for c in range(k) if c != leader]
        if all(self.resolved(times[:, a], times[:, b]) for a, b in pairs):
            return PlanStatus(True, f"resolved to {self.resolution * 100:g} % ({n} rounds)", leader)
        return PlanStatus(False, "", leader)


def leader_of(times: np.ndarray) -> int:
    """The candidate with the lowest robust estimate: Hodges–Lehmann shifts of log times against
    candidate 0, paired by round (ties: the lower index)."""
    lt = np.log(np.asarray(times, np.float64))
    shifts = [0.0] + [hl_estimate(lt[:, c] - lt[:, 0]) for c in range(1, lt.shape[1])]
    return int(np.argmin(shifts))


def run_sequential(plan: SequentialPlan, k: int, run_rounds: Callable[[list[list[int]]], np.ndarray],
                   clock: Callable[[], float] = time.monotonic) -> tuple[np.ndarray, str]:
    """Measure ``k`` candidates in interleaved rounds until ``plan`` says stop.

    ``run_rounds(orders)`` runs one round per order (a permutation of ``range(k)``, from
    :func:`round_order`) and returns their times as an array (rounds x k) in candidate order.
    Returns the kept times (``plan.discard`` first rounds dropped) and the reason for stopping.
    """
    if k < 1:
        raise ValueError("nothing to measure")
    rows: list[np.ndarray] = []
    t0 = clock()
    step = plan.min_rounds + plan.discard
    while True:
        done = len(rows)
        left_rounds = plan.max_rounds + plan.discard - done
        orders = [round_order(done + i, k) for i in range(max(1, min(step, left_rounds)))]
        rows.extend(np.asarray(run_rounds(orders), np.float64).reshape(len(orders), k))
        kept = np.array(rows[plan.discard:]).reshape(-1, k)
        elapsed = clock() - t0
        st = plan.status(kept, elapsed)
        if st.done:
            return kept, st.reason
        per_round = elapsed / len(rows)
        left = plan.max_seconds - elapsed
        by_time = int(min(plan.look_seconds, left) / per_round) if per_round > 0 else step
        # looks at most every look_seconds, and no more often than every quarter of the rounds so far
        step = max(1, by_time, len(rows) // 4)
        if per_round > 0:
            step = min(step, max(1, int(left / per_round) + 1))

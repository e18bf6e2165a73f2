"""Synthetic run times with the noise of a shared machine, to test and calibrate
:mod:`hdp.runtime.measure.stats` quickly and deterministically (tests/test_stats.py, and the rates of
bench/stats_rates.py, which puts tests/ on its path: this is test equipment, not part of hdp).

A :class:`NoisyMachine` runs candidates with fixed true times in the order it is given, one sample
after another on a simulated clock, and multiplies each true time by:

- a log-normal body (``body``: sigma of log time; about 3 % on a quiet core);
- a slow drift: an AR(1) process on log time with stationary sigma ``drift`` and correlation
  ``drift_phi`` from one sample to the next (thermal and frequency changes, a neighbour's job
  ramping up);
- bursts: a two-state Markov chain (enter with ``burst_rate`` per sample, stay with
  ``burst_stay``), each burst slowing every sample it covers by one factor drawn from
  ``burst_factor`` (another process taking one of two cores for a while);
- outliers: with ``outlier_rate``, a single sample slowed by a factor from ``outlier_factor``
  (preemption, page faults);
- a drift of each candidate's own (``own_drift``: stationary sigma of an AR(1) on log time with
  correlation ``own_phi`` from one of its runs to the next): what interleaving cannot cancel, such
  as one compiled model's memory being evicted for a while. Not in the presets: the measured
  paired log-ratios on this VM show no such long-range dependence (rank autocorrelation within
  ±0.1 at every lag up to 30 rounds), and no interval built on independent rounds survives it.

:data:`PRESETS` holds two calibrations: ``quiet`` (a few per cent of noise, a dedicated core) and
``shared``, fitted to 600 interleaved rounds of three plain compiles of MobileNet-V2 on this
project's 2-core VM while four other jobs ran (per-candidate robust sigma of log time about 0.3,
lag-1 autocorrelation 0.5; paired log-ratio robust sigma 0.22, 5 % beyond 3 sigma, lag-1
autocorrelation 0.1): see ``bench/topics/statistics.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

#: Noise settings by name (keyword arguments of :class:`NoisyMachine`).
PRESETS: dict[str, dict] = {
    "quiet": dict(body=0.03, drift=0.03, drift_phi=0.995, burst_rate=0.002, burst_stay=0.9,
                  burst_factor=(1.1, 1.5), outlier_rate=0.01, outlier_factor=(1.2, 2.0)),
    "shared": dict(body=0.12, drift=0.24, drift_phi=0.97, burst_rate=0.02, burst_stay=0.8,
                   burst_factor=(1.3, 2.0), outlier_rate=0.04, outlier_factor=(1.5, 3.0)),
}


class NoisyMachine:
    """Candidates with true times ``true`` (seconds), run on a simulated, noisy, shared machine."""

    def __init__(self, true: Sequence[float], seed: int = 0, *, body: float = 0.03, drift: float = 0.08,
                 drift_phi: float = 0.995, burst_rate: float = 0.01, burst_stay: float = 0.95,
                 burst_factor: tuple[float, float] = (1.2, 1.8), outlier_rate: float = 0.02,
                 outlier_factor: tuple[float, float] = (1.5, 4.0), own_drift: float = 0.0,
                 own_phi: float = 0.9, overhead: float = 1e-4):
        self.true = np.asarray(true, np.float64)
        if self.true.ndim != 1 or (self.true <= 0).any():
            raise ValueError("true times must be a 1-D array of positive seconds")
        self.rng = np.random.default_rng(seed)
        self.body, self.drift, self.phi = body, drift, drift_phi
        self.burst_rate, self.burst_stay, self.burst_factor = burst_rate, burst_stay, burst_factor
        self.outlier_rate, self.outlier_factor = outlier_rate, outlier_factor
        self.own_drift, self.own_phi = own_drift, own_phi
        self._own = self.rng.normal(0.0, own_drift, self.true.size) if own_drift > 0 else np.zeros(self.true.size)
        self.overhead = overhead
        self.now = 0.0
        self._x = self.rng.normal(0.0, drift)  # log drift, starts in its stationary distribution
        self._burst = 1.0
        self.samples = 0

    @classmethod
    def preset(cls, name: str, true: Sequence[float], seed: int = 0) -> "NoisyMachine":
        """A machine with the noise of :data:`PRESETS` ``[name]``."""
        if name not in PRESETS:
            raise ValueError(f"no noise preset '{name}' (have: {', '.join(PRESETS)})")
        return cls(true, seed, **PRESETS[name])

    def clock(self) -> float:
        """Simulated seconds so far (run times plus ``overhead`` per sample)."""
        return self.now

    def _draws(self):
        """Random numbers drawn in blocks (a Python-level call per number is the slow part)."""
        n = 4096
        while True:
            z = self.rng.standard_normal((n, 3))
            u = self.rng.random((n, 4))
            yield from zip(z.tolist(), u.tolist())

    def sample(self, c: int) -> float:
        """One run of candidate ``c`` now."""
        if not hasattr(self, "_it"):
            self._it = self._draws()
        z, u = next(self._it)
        self._x = self.phi * self._x + z[0] * self.drift * math.sqrt(1 - self.phi ** 2)
        if self._burst > 1.0:
            if u[0] > self.burst_stay:
                self._burst = 1.0
        elif u[0] < self.burst_rate:
            lo, hi = self.burst_factor
            self._burst = lo + (hi - lo) * u[1]
        if self.own_drift > 0:
            self._own[c] = self.own_phi * self._own[c] + z[2] * self.own_drift * math.sqrt(1 - self.own_phi ** 2)
        t = self.true[c] * math.exp(self._x + self._own[c] + z[1] * self.body) * self._burst
        if u[2] < self.outlier_rate:
            lo, hi = self.outlier_factor
            t *= lo + (hi - lo) * u[3]
        self.now += t + self.overhead
        self.samples += 1
        return t

    def run_rounds(self, orders: Sequence[Sequence[int]]) -> np.ndarray:
        """One round per order; times (rounds x candidates) in candidate order (the protocol of
        :func:`hdp.runtime.measure.stats.run_sequential`)."""
        out = np.empty((len(orders), self.true.size))
        for r, order in enumerate(orders):
            for c in order:
                out[r, c] = self.sample(c)
        return out

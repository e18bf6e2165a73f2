"""The noise of a profile: per-op estimates from per-run times, devices of one kind pooled, and
per-op differences between devices shrunk toward the device-level ratio.

A profile (:mod:`hdp.runtime.costs.profile`) times every device in interleaved rounds and reads each
runtime node's counter after every run, so every op has one time per run and device. On a shared
2-core host those times are very noisy: another process taking a core for a moment makes one op of
one run several times slower. A placer that trusts every per-op difference between two devices
harvests that noise as a gain that never materialises (``make demo``'s Inception-V3 on two CPU
plugin instances that compute alike: ``optimal`` predicted 25 % below the best single device and
measured 16 % above it). Three steps, each measured on Inception-V3 profiles taken at load 5-7 on
the 2-core bench VM (``bench/topics/steps.md``, "Profile noise"):

1. **Per-op estimate**: the median over the runs (three or more; with fewer, the minimum, since
   interference only ever adds time), not the mean: a burst in one run no longer moves an op's
   figure. The spread of each op is the variance of the log of its per-run times, moderated toward
   the time-weighted mean over all ops of the device (:data:`PRIOR_DF` runs' worth), divided by
   the runs (times π/2 for a median). Time-weighted mean ``|log ratio|`` error of the per-op
   device ratio against a reference of 49 runs: 0.26-0.63 with means, 0.03-0.11 with medians.
2. **Devices of one kind share one profile** (:func:`device_kind`): devices whose compiled models
   report the same properties (precision actually used, threads, streams, hints ... and the
   hardware's ``FULL_DEVICE_NAME``) compute alike, so their per-run times are pooled and they get
   one column: no placer can find a difference between them. ``virtual-f32`` is such a pair on
   any host; ``virtual`` too on a CPU without bf16, where ``CPU_B``'s bf16 hint runs in f32.
3. **Empirical-Bayes shrinkage** (:func:`shrink`) between devices of different kinds: per op, the
   log-ratio of a device's time to the op's mean over the devices is given a normal prior centred
   at the device-level ratio (from the whole-model wall times), whose variance ``τ²`` is estimated
   from the profile itself (the time-weighted dispersion of the per-op ratios beyond what their
   noise explains); each op's ratio is pulled toward the device ratio by ``v / (v + τ²)``, its
   noise share. A difference well above the noise survives; one within it is mostly removed.

The result carries each op's posterior standard error (``Costs.op_se``), from which ``optimal``
takes its margin (:func:`gain_noise`): a mixed placement is kept only if its predicted gain over the
best single device exceeds what the profile's noise could produce.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

#: Prior degrees of freedom of the moderated per-op variance: how many runs' worth the dispersion
#: of the device's other ops counts beside an op's own runs.
PRIOR_DF = 8.0
#: Per-run times below this are read as this (half the counters' resolution) before taking logs.
FLOOR = 0.5e-6
#: Runs from which an op's estimate is the median (below: the minimum).
MEDIAN_RUNS = 3
#: One-sided 95 % normal quantile: ``optimal``'s margin is this many standard errors of its
#: predicted gain.
Z_ONE_SIDED = 1.645


def run_estimates(op_runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-op estimate in seconds, variance of its log) from per-run times (runs x ops); see the
    module docstring. An op that never took time has variance 0; with one run, nan."""
    x = np.asarray(op_runs, np.float64)
    r, n = x.shape
    if not r:
        return np.zeros(n), np.full(n, np.nan)
    est = np.median(x, axis=0) if r >= MEDIAN_RUNS else x.min(axis=0)
    var = np.zeros(n)
    live = est > 0
    if r < 2:
        var[live] = np.nan
        return est, var
    if not live.any():
        return est, var
    y = np.log(np.maximum(x[:, live], FLOOR))
    s2 = y.var(axis=0, ddof=1)
    w = est[live] / est[live].sum()
    s0 = float((w * s2).sum())
    mod = ((r - 1) * s2 + PRIOR_DF * s0) / (r - 1 + PRIOR_DF)
    var[live] = mod * (math.pi / 2 if r >= MEDIAN_RUNS else 1.0) / r
    return est, var


# --------------------------------------------------------------------------- device kinds


#: Properties that say nothing about how a compiled model computes.
_IGNORED = frozenset({"SUPPORTED_PROPERTIES", "NETWORK_NAME", "EXECUTION_DEVICES", "PERF_COUNT", "LOG_LEVEL",
                      "OPTIMAL_NUMBER_OF_INFER_REQUESTS", "DEVICE_ID"})


def device_kind(plugin: str, properties: dict[str, str]) -> str:
    """A label naming what a profiled device is: plugin, precision it runs, threads, and a digest of
    every other property of its compiled model (two devices with equal labels compute alike)."""
    props = {k: str(v) for k, v in properties.items() if k not in _IGNORED}
    digest = hashlib.blake2b(json.dumps([plugin, sorted(props.items())]).encode(), digest_size=4).hexdigest()
    prec = props.get("INFERENCE_PRECISION_HINT", "?").replace("<Type: '", "").replace("'>", "")
    prec = {"float32": "f32", "bfloat16": "bf16", "float16": "f16"}.get(prec, prec)
    threads = props.get("INFERENCE_NUM_THREADS", "?")
    return f"{plugin} plugin, {prec}, {threads} threads [{digest}]"


# --------------------------------------------------------------------------- shrinkage


def shrink(t: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
    """Per-op times (ops x devices, one column per device kind) with their log variances ``v``,
    per-op differences between devices shrunk toward the device-level ratio (module docstring).

    Returns (times, posterior log variances, info with ``tau`` per device and the device-level
    ``ratio`` to the geometric mean of the devices). Ops that are not finite and positive on every
    device (unsupported somewhere, removed by a plugin) or whose variance is unknown are left as
    they are, and so are the columns when there are fewer than two devices or three such ops."""
    t = np.asarray(t, np.float64)
    v = np.asarray(v, np.float64)
    n, nd = t.shape
    out, post = t.copy(), v.copy()
    with np.errstate(invalid="ignore", divide="ignore"):
        ok = np.isfinite(t).all(axis=1) & (t > 0).all(axis=1) & np.isfinite(v).all(axis=1)
    if nd < 2 or ok.sum() < 3:
        return out, post, {}
    x = np.log(t[ok])
    vv = v[ok]
    m = x.mean(axis=1, keepdims=True)
    e = x - m  # each device's log-ratio to the op's mean over the devices
    ve = vv * (1 - 2 / nd) + vv.sum(axis=1, keepdims=True) / nd ** 2  # its noise variance
    tot = np.log(t[ok].sum(axis=0))
    mu = tot - tot.mean()  # the device-level ratio, as a log-ratio to the mean over the devices
    w = t[ok].mean(axis=1)
    w = w / w.sum()
    tau2 = np.maximum(0.0, (w[:, None] * ((e - mu) ** 2 - ve)).sum(axis=0))
    with np.errstate(invalid="ignore", divide="ignore"):
        keep = np.where(ve + tau2 > 0, tau2 / (ve + tau2), 1.0)  # the share of a difference kept
    out[ok] = np.exp(m + mu + keep * (e - mu))
    post[ok] = keep * ve
    return out, post, {"tau": tuple(float(x) for x in np.sqrt(tau2)), "ratio": tuple(float(x) for x in np.exp(mu)),
                       "kept": float((w[:, None] * keep).sum() / nd)}


# --------------------------------------------------------------------------- optimal's margin


def gain_noise(problem, op_se: np.ndarray, group_device: np.ndarray, single: int) -> float:
    """Standard error (seconds) of the predicted difference between a placement and every group on
    device ``single``: the ops placed elsewhere contribute the noise of their time on both devices
    (``op_se``: seconds per op and device, in the problem's device order)."""
    st = problem.structure
    gd = np.asarray(group_device, np.int64)
    se2 = np.where(np.isfinite(op_se), op_se, 0.0) ** 2
    var = 0.0
    pl = np.flatnonzero(st.group_of >= 0)
    d_op = gd[st.group_of[pl]]
    moved = d_op != single
    if moved.any():
        ops = pl[moved]
        var += float(se2[ops, d_op[moved]].sum() + se2[ops, single].sum())
    if problem.r_time.shape[0]:  # replicated ops, where some group they feed moved
        for u in range(problem.r_time.shape[0]):
            devs = set(gd[problem.r_groups[problem.r_ptr[u]:problem.r_ptr[u + 1]]].tolist())
            if devs != {single}:
                members = _unit_ops(problem, u)
                for d in devs - {single}:
                    var += float(se2[members, d].sum())
                if single not in devs:
                    var += float(se2[members, single].sum())
    return math.sqrt(var)


def _unit_ops(problem, u: int) -> np.ndarray:
    """The replicated ops of unit ``u`` (those feeding exactly its groups)."""
    st = problem.structure
    want = set(problem.r_groups[problem.r_ptr[u]:problem.r_ptr[u + 1]].tolist())
    rg = np.repeat(np.arange(st.n_groups), np.diff(st.r_ptr))
    groups_of: dict[int, set] = {}
    for g, r in zip(rg.tolist(), st.r_ops.tolist()):
        groups_of.setdefault(r, set()).add(g)
    return np.array([r for r, gs in groups_of.items() if gs == want], np.int64)

"""The boundary model: what a cut between two devices really costs under HETERO, fitted per host.

The simulator (:mod:`hdp.placement.simulate`) prices a placement as compute + copies + a per-subgraph
overhead. Out of the box the copy and overhead terms come from the target's ``[link]`` table, a
guess; on real devices a cut costs far more than that guess (on the ``virtual`` target, ResNet-50
split into 16 subgraphs runs about 20 % slower than on one device, where the guess says 1 %): every
HETERO subgraph is one more infer request, every tensor handed over is converted out of and back
into the plugin's blocked layout, and ops the plugin would have fused across the cut run alone.
This module fits those costs from measured placements:

    latency(P) = α · Σ_d δ_d · Σ_(op on d) (m_op + λ · (t_op,d - m_op))    (profiled op times)
               + s · subgraphs(P) + l · copies(P) + β · copy_bytes(P)      (the boundary model)

where ``t_op,d`` is the profiled time of an op on device ``d`` and ``m_op`` its mean over the devices
that can run it.

- ``s``, ``l``, ``β`` (:class:`BoundaryModel`): seconds per HETERO subgraph, per tensor copied to
  another device and per byte copied. One set per host, OpenVINO version and target.
- ``α``, ``δ_d``, ``λ`` (:class:`ModelScale`), per profiled model (per cost table): ``α`` converts
  the profile's seconds into the boundary model's (a profile taken while the machine was loaded
  reads slow; on a quiet dedicated host α ≈ 1), ``δ_d`` corrects each device's profile relative to
  the first device (two profiles taken at different moments of a shared machine disagree by up to
  40 % here), and ``λ`` in [0, 1] is the share of the per-op differences between devices that is
  real (the *contrast*): per-op times are noisy, and a placer that puts every op on the device whose
  profile reads lower (heft, ``optimal``) harvests that noise as a predicted gain that never
  materialises (ResNet-50 on ``virtual``: ``optimal`` predicted 3 % faster than one device, measured
  32 % slower). Two devices that really differ have λ near 1; the two identical CPU plugins of
  ``virtual`` near 0. The geometric mean of the ``α`` of a calibration is 1, so ``s``, ``l`` and
  ``β`` are in the seconds of the calibration's typical profile; a profile the calibration has not
  seen gets α = δ = 1 and the calibration's median λ.

**Measurements are ratios.** Each placement is measured head to head with a reference placement
(every op on the first device that can run the whole model), interleaved run by run
(:meth:`hdp.runtime.measure.measurer.Measurer.head_to_head`); what is fitted and reported is the placement's
time as a multiple of the reference's (Hodges–Lehmann estimate and 95 % interval of the paired
rounds, :mod:`hdp.runtime.measure.stats`). On a shared machine, load from other processes changes absolute
latencies by a factor of 2–3 within minutes; pairing by round cancels it. The simulator's error on a
placement is ``predicted ratio / measured ratio - 1``.

**Fit.** Robust least squares (``scipy.optimize.least_squares``, Huber loss) on log ratios, each
residual divided by its measurement's standard error; ``s, l, β >= 0``. The experiment — which
placements are measured and how — sits above the placers it uses, in :mod:`hdp.pipeline.calibrate`:
the design (:func:`hdp.pipeline.calibrate.design`) varies the number of subgraphs and cut tensors: every single device, contiguous
blocks alternating devices (2 to 33 blocks), random placements per coarse group, random placements
per tie group, and ``optimal`` with several boundary penalties. **Held-out** placements (random per
coarse group with other seeds, and ``heft``) are measured too but never fitted; the errors reported
are theirs.

The result (:class:`Calibration`) is stored in the hdp cache (namespace ``calibrate``) under the
host fingerprint (CPU, flags, OpenVINO version) and the target's full definition, with every
observation, so that calibrating another model refits on all of them. ``hdp compile`` applies it
through the ``boundary`` pass (:mod:`hdp.passes.boundary`) after ``profile``; ``optimal`` reads its
held-out error as the margin a mixed placement must beat the best single device by.

Nothing here assumes one device is faster than another: on the ``virtual`` target on a host
without AVX-512 BF16 (the AMD EPYC of our runs) CPU_B runs its bf16 hint in f32 and the two devices
are equally fast, so a mixed placement only adds HETERO's costs — a clean bench for them.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
import numpy as np

from hdp.base.cache import Store
from hdp.base.errors import InputError
from hdp.ir import serde
from hdp.placement.problem import replicated_units
from hdp.runtime.costs.executor import ExecutorCosts
from hdp.runtime.costs.grid_fit import (
    CONVERT_GRID,
    HANDOFF_GRID,
    ExecutorObservation,
    PipelineObservation,
    fit_convert,
    fit_grid,
    grid_error_lines,
    grid_errors,
    standard_error,
)
from hdp.runtime.costs.stream_fit import StreamObservation, streams_report
from hdp.target.host import host_facts, host_fingerprint

#: Bump when the meaning of a stored calibration changes.
CALIBRATION_VERSION = 1
#: Huber threshold, in standard errors.
HUBER = 2.0


class BoundaryModel(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a cut costs on real devices (seconds; see the module docstring)."""

    subgraph_overhead: float  # per HETERO subgraph (infer request)
    copy_latency: float  # per tensor copied to another device (per destination device)
    copy_per_byte: float  # per byte copied (1 / bandwidth; 0: free)

    @property
    def bandwidth(self) -> float:
        return 1.0 / self.copy_per_byte if self.copy_per_byte > 0 else math.inf

    def describe(self) -> str:
        bw = self.bandwidth
        bws = f"{bw / 1e9:.3g} GB/s" if math.isfinite(bw) else "free"
        return (f"{self.subgraph_overhead * 1e6:.1f} us per subgraph, {self.copy_latency * 1e6:.1f} us per "
                f"copied tensor, {self.copy_per_byte * 1e9 * 1e3:.3g} ms per GB copied ({bws})")


class ModelScale(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Corrections of one cost table (one profile of one model)."""

    costs: str  # digest of the Costs they apply to (:func:`costs_digest`)
    model: str  # a label (the model file's name)
    compute_scale: float  # α: boundary-model seconds per profiled second
    device_scale: tuple[float, ...]  # δ per device (target order), the first device 1
    contrast: float = 1.0  # λ: the real share of per-op differences between devices


class PlacementFeatures(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """What the model needs of one placement: profiled compute per device (``compute``: Σ t_op,d
    over the ops placed on d; ``common``: Σ m_op over the same ops), HETERO subgraphs (as the
    simulator counts them), tensor copies and their bytes."""

    compute: tuple[float, ...]
    common: tuple[float, ...]
    subgraphs: int
    copies: int
    copy_bytes: float


class Observation(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One placement measured head to head with the reference placement."""

    model: str
    costs: str
    name: str  # e.g. "blocks:9", "random:coarse:3", "heft"
    heldout: bool  # never used in a fit
    mixed: bool  # uses more than one device
    features: PlacementFeatures
    reference: PlacementFeatures
    hetero_subgraphs: int  # HETERO_NUMBER_OF_SUBMODELS of the compiled placement (0: unknown)
    ratio: float  # measured: placement time / reference time (Hodges-Lehmann)
    low: float  # its 95 % interval (0, 0: too few rounds for one)
    high: float
    rounds: int
    median: float  # seconds, the placement's median over the rounds
    ref_median: float
    load: float  # 1-minute load average when measured
    placement: tuple[int, ...] = ()  # the device of every tie group (for analysis)


class Calibration(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A fitted boundary model with the observations it came from (see the module docstring)."""

    version: int
    target: str
    devices: tuple[str, ...]
    host: str  # host fingerprint (CPU, flags, OpenVINO version)
    host_facts: dict[str, str]
    created: str
    link: tuple[float, float, float]  # the target's own (latency, bandwidth, subgraph_overhead)
    boundary: BoundaryModel
    models: tuple[ModelScale, ...]
    observations: tuple[Observation, ...]
    #: λ for a profile the calibration has not seen (the median over its models)
    contrast: float = 1.0
    #: 90th percentile of the absolute held-out errors on mixed placements (None: none held out)
    error: float | None = None
    #: what hdp's concurrent executor costs on this host (:func:`hdp.runtime.costs.executor.fit_executor_costs`;
    #: its ``convert`` fitted on ``executor_observations`` when there are some)
    executor: ExecutorCosts | None = None
    executor_observations: tuple[ExecutorObservation, ...] = ()
    #: the probe's ``convert`` when executor observations were fitted (whether or not the fit replaced
    #: it: ``executor.convert_fitted`` says)
    convert_probe: float | None = None
    #: the throughput objective's ``handoff`` (seconds per served HETERO subgraph) fitted on
    #: ``pipeline_observations`` (None: not fitted, or the fit was not kept)
    handoff: float | None = None
    pipeline_observations: tuple[PipelineObservation, ...] = ()
    #: each real device's stream efficiency (two streams serve ``2 E`` times one, clipped to
    #: [0.5, 1]) fitted by serving its plain compile with one and two streams, windows alternating
    #: (:func:`hdp.pipeline.calibrate.calibrate_streams`; the serving plans' model, :mod:`hdp.placement.plan`)
    streams: dict[str, float] = {}
    stream_observations: tuple[StreamObservation, ...] = ()

    def scale_for(self, costs: str) -> ModelScale | None:
        return next((m for m in self.models if m.costs == costs), None)


# --------------------------------------------------------------------------- features


def costs_digest(costs) -> str:
    """Identity of a cost table (a profile), for :class:`ModelScale`."""

    return serde.digest_bytes(serde.encode_any(costs))


def op_common(op_time: np.ndarray) -> np.ndarray:
    """``m_op``: each op's mean time over the devices with a finite time (0 where none)."""
    t = np.asarray(op_time, np.float64)
    fin = np.isfinite(t)
    return np.where(fin, t, 0.0).sum(axis=1) / np.maximum(fin.sum(axis=1), 1)


def group_common(problem) -> tuple[np.ndarray, np.ndarray]:
    """(Σ m_op per tie group, Σ m_op per unit of replicated ops), accumulated as
    :func:`hdp.placement.problem.build_problem` accumulates ``time`` and ``r_time``."""
    st = problem.structure
    m = op_common(problem.op_time)
    m = np.where(np.isfinite(m), m, 0.0)
    g = np.zeros(st.n_groups)
    pl = st.group_of >= 0
    np.add.at(g, st.group_of[pl], m[pl])
    nd = max(problem.n_devices, 1)
    # a unit's common time: its r_time recomputed from m (every column of op_common is m)

    _, _, r = replicated_units(st, np.repeat(m[:, None], nd, axis=1))
    return g, r[:, 0] if r.size else np.zeros(r.shape[0])


def placement_features(problem, sim, group_device, common: tuple | None = None) -> PlacementFeatures:
    """The :class:`PlacementFeatures` of a device per tie group of ``problem`` (``sim``: its Simulator;
    ``common``: :func:`group_common` of the problem, computed if not given)."""
    gd = np.asarray(group_device, np.int64)
    st = problem.structure
    nd = problem.n_devices
    k = gd.shape[0]
    if common is None:
        common = group_common(problem)
    g_common, r_common = common
    compute = np.bincount(gd, weights=problem.time[np.arange(k), gd], minlength=nd) if k else np.zeros(nd)
    shared = np.bincount(gd, weights=g_common, minlength=nd) if k else np.zeros(nd)
    if r_common.size and k:  # replicated units: once on every device running one of their groups
        ru = np.repeat(np.arange(r_common.size), np.diff(problem.r_ptr))
        ud = np.unique(ru * nd + gd[problem.r_groups])
        compute = compute + np.bincount(ud % nd, weights=problem.r_time[ud // nd, ud % nd], minlength=nd)
        shared = shared + np.bincount(ud % nd, weights=r_common[ud // nd], minlength=nd)
    _, _, nsub = sim.terms(gd) if k else (0.0, 0.0, 0)
    pair_t = np.repeat(np.arange(st.n_tensors, dtype=np.int64), np.diff(st.t_ptr))
    d = gd[st.t_cons.astype(np.int64)] if pair_t.size else np.zeros(0, np.int64)
    home = gd[st.t_prod.astype(np.int64)[pair_t]] if pair_t.size else np.zeros(0, np.int64)
    cross = d != home
    td = np.unique(pair_t[cross] * nd + d[cross])
    nbytes = float(st.t_bytes[td // nd].astype(np.float64).sum()) if td.size else 0.0
    return PlacementFeatures(compute=tuple(float(x) for x in compute), common=tuple(float(x) for x in shared),
                    subgraphs=int(nsub), copies=int(td.size), copy_bytes=nbytes)


def _arrays(obs: Sequence[Observation], nd: int):
    """((compute, common, boundary) of the placements, the same of their references) as arrays."""
    def pad(x):
        return list(x) + [0.0] * (nd - len(x))

    def block(f: Callable[[Observation], PlacementFeatures]):
        c = np.array([pad(f(o).compute) for o in obs], np.float64).reshape(-1, nd)
        m = np.array([pad(f(o).common) for o in obs], np.float64).reshape(-1, nd)
        b = np.array([[f(o).subgraphs, f(o).copies, f(o).copy_bytes] for o in obs], np.float64).reshape(-1, 3)
        return c, m, b

    return block(lambda o: o.features), block(lambda o: o.reference)


def _compute(c, m, alpha, delta, lam):
    """α Σ_d δ_d (m_d + λ (c_d - m_d)) per row."""
    return alpha * ((m + lam[:, None] * (c - m)) * delta).sum(axis=1)


def predict(boundary: BoundaryModel, scales: dict[str, ModelScale], obs: Sequence[Observation],
            n_devices: int, contrast: float = 1.0) -> np.ndarray:
    """Predicted ratio (placement / reference) of each observation; a profile without a scale in
    ``scales`` gets α = 1, δ = 1 and λ = ``contrast``."""
    (c, m, b), (rc, rm, rb) = _arrays(obs, n_devices)
    alpha = np.array([scales[o.costs].compute_scale if o.costs in scales else 1.0 for o in obs])
    delta = np.array([list(scales[o.costs].device_scale) if o.costs in scales else [1.0] * n_devices
                      for o in obs]).reshape(-1, n_devices)
    lam = np.array([scales[o.costs].contrast if o.costs in scales else contrast for o in obs])
    theta = np.array([boundary.subgraph_overhead, boundary.copy_latency, boundary.copy_per_byte])
    return (_compute(c, m, alpha, delta, lam) + b @ theta) / (_compute(rc, rm, alpha, delta, lam) + rb @ theta)


def uncalibrated(link: tuple[float, float, float]) -> BoundaryModel:
    """The target's own link model as a BoundaryModel (what the simulator uses without calibration)."""
    lat, bw, ovh = link
    return BoundaryModel(subgraph_overhead=ovh, copy_latency=lat, copy_per_byte=1.0 / bw if bw > 0 else 0.0)


# --------------------------------------------------------------------------- fitting


def fit(observations: Sequence[Observation], n_devices: int, start: BoundaryModel) -> tuple[BoundaryModel, tuple[ModelScale, ...]]:
    """Fit ``s, l, β`` (shared) and ``α, δ, λ`` (per cost table) to the observations that are not
    held out and have a finite interval. Huber loss on ``(log predicted - log measured) / se``;
    ``start`` is the initial boundary model (the target's link). A table without mixed placements
    gets α = 1 (not identified); a device on which no placement of the table differs from the
    reference keeps δ = 1; a table whose placements never differ from their reference in per-op
    device contrast keeps λ = 1."""
    from scipy.optimize import least_squares

    obs = [o for o in observations if not o.heldout and math.isfinite(standard_error(o)) and o.ratio > 0]
    if not obs:
        raise InputError("nothing to fit: no measured placement with a finite interval")
    tables = list(dict.fromkeys(o.costs for o in obs))
    tix = {t: i for i, t in enumerate(tables)}
    nt, nd = len(tables), n_devices
    (c, m, b), (rc, rm, rb) = _arrays(obs, nd)
    y = np.log([o.ratio for o in obs])
    se = np.array([standard_error(o) for o in obs])
    ti = np.array([tix[o.costs] for o in obs])
    # what the data identifies: α of a table (relative to the others) through its mixed placements,
    # which carry the boundary terms; δ of a device through a placement whose compute there differs
    # from the reference's; λ through placements whose per-op contrast (c - m) differs from it
    has_alpha = np.array([any(o.mixed for o in obs if o.costs == t) for t in tables])
    ident = np.zeros((nt, nd), bool)
    has_lam = np.zeros(nt, bool)
    for t in range(nt):
        rows = ti == t
        ident[t] = (np.abs(c[rows] - rc[rows]) > 0).any(axis=0)
        has_lam[t] = (np.abs((c - m)[rows] - (rc - rm)[rows]).sum(axis=1) > 1e-12 * np.abs(rc[rows]).sum(axis=1)).any()
    ident[:, 0] = False
    n_alpha, n_delta, n_lam = int(has_alpha.sum()), int(ident.sum()), int(has_lam.sum())
    unit = np.array([1e-4, 1e-5, 1e-9])  # theta in units of 100 us, 10 us and 1 ns per byte (1 s per GB)
    theta0 = np.array([start.subgraph_overhead, start.copy_latency, start.copy_per_byte]) / unit

    def unpack(x):
        theta = x[:3] * unit
        a = np.zeros(nt)
        if n_alpha:
            a[has_alpha] = x[3:3 + n_alpha] - x[3:3 + n_alpha].mean()
        delta = np.ones((nt, nd))
        delta[ident] = np.exp(x[3 + n_alpha:3 + n_alpha + n_delta])
        lam = np.ones(nt)
        lam[has_lam] = x[3 + n_alpha + n_delta:]
        return theta, np.exp(a), delta, lam

    def resid(x):
        theta, alpha, delta, lam = unpack(x)
        al, de, la = alpha[ti], delta[ti], lam[ti]
        num = _compute(c, m, al, de, la) + b @ theta
        den = _compute(rc, rm, al, de, la) + rb @ theta
        return (np.log(num / den) - y) / se

    lo = np.r_[np.zeros(3), np.full(n_alpha, -5.0), np.full(n_delta, -3.0), np.zeros(n_lam)]
    hi = np.r_[np.full(3, np.inf), np.full(n_alpha, 5.0), np.full(n_delta, 3.0), np.ones(n_lam)]
    best = None
    for mult in (1.0, 10.0, 100.0):  # a few starts: the cut costs may be far above the target's guess
        for lam0 in (0.5, 1.0):
            x0 = np.clip(np.r_[theta0 * mult, np.zeros(n_alpha + n_delta), np.full(n_lam, lam0)], lo, hi)
            r = least_squares(resid, x0, bounds=(lo, hi), loss="huber", f_scale=HUBER, x_scale="jac",
                              max_nfev=3000)
            if best is None or r.cost < best.cost:
                best = r
    theta, alpha, delta, lam = unpack(best.x)
    models = []
    for t, name in enumerate(tables):
        label = next(o.model for o in obs if o.costs == name)
        models.append(ModelScale(costs=name, model=label, compute_scale=float(alpha[t]),
                                 device_scale=tuple(float(x) for x in delta[t]), contrast=float(lam[t])))
    bm = BoundaryModel(subgraph_overhead=float(theta[0]), copy_latency=float(theta[1]), copy_per_byte=float(theta[2]))
    return bm, tuple(models)


def errors(boundary: BoundaryModel, scales: dict[str, ModelScale], obs: Sequence[Observation], n_devices: int,
           contrast: float = 1.0) -> np.ndarray:
    """Relative errors ``predicted / measured - 1`` of the observations."""
    if not obs:
        return np.zeros(0)
    return predict(boundary, scales, obs, n_devices, contrast) / np.array([o.ratio for o in obs]) - 1.0


def summary(err: np.ndarray) -> dict:
    """``n``, median absolute error and the worst (signed) of relative errors."""
    if err.size == 0:
        return {"n": 0, "median_abs": math.nan, "worst": math.nan, "p90_abs": math.nan}
    a = np.abs(err)
    return {"n": int(err.size), "median_abs": float(np.median(a)), "worst": float(err[np.argmax(a)]),
            "p90_abs": float(np.quantile(a, 0.9))}


# --------------------------------------------------------------------------- the store


class CalibrationStore:
    """Calibrations in the hdp cache: ``<root>/calibrate/<kk>/<key>.json``, one per host
    fingerprint (which includes the OpenVINO version) and target definition."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        self.store = Store(self.root / "calibrate", ".json")

    @staticmethod
    def key(target, host: str | None = None) -> str:
        return serde.digest_bytes(serde.encode_any(["calibrate", CALIBRATION_VERSION, host or host_fingerprint(),
                                                    msgspec.json.encode(target).decode()]))

    def get(self, target, host: str | None = None) -> Calibration | None:
        key = self.key(target, host)
        data = self.store.get(key)
        if data is None:
            return None
        try:
            cal = msgspec.json.decode(data, type=Calibration)
        except (msgspec.DecodeError, msgspec.ValidationError):
            self.store.discard(self.store.path(key), "undecodable calibration")
            return None
        if cal.version != CALIBRATION_VERSION:
            return None
        return cal

    def put(self, cal: Calibration, target) -> Path:
        key = self.key(target, cal.host)
        self.store.put(key, msgspec.json.encode(cal))
        return self.store.path(key)


def calibration_for(target, cache_root: str | os.PathLike | None) -> Calibration | None:
    """The stored calibration of ``target`` on this host, if any (None without a cache)."""
    if cache_root is None or not any(d.kind == "real" for d in target.devices):
        return None
    return CalibrationStore(cache_root).get(target)


def build(target, observations: Sequence[Observation], executor: ExecutorCosts | None = None,
          executor_observations: Sequence[ExecutorObservation] = ()) -> Calibration:
    """Fit a :class:`Calibration` of ``target`` from observations (old and new); ``executor``: the
    concurrent executor's costs measured with them (its ``convert`` refitted on the executor
    observations that are not held out, when there are some)."""

    link = (float(target.link.latency), float(target.link.bandwidth), float(target.link.subgraph_overhead))
    nd = len(target.devices)
    bm, models = fit(observations, nd, uncalibrated(link))
    scales = {m.costs: m for m in models}
    held = [o for o in observations if o.heldout and o.mixed]
    err = summary(errors(bm, scales, held, nd))["p90_abs"] if held else None
    contrast = float(np.median([m.contrast for m in models])) if models else 1.0
    cal = Calibration(version=CALIBRATION_VERSION, target=target.name, devices=target.device_names,
                      host=host_fingerprint(), host_facts=dict(host_facts()),
                      created=_dt.datetime.now().isoformat(timespec="seconds"), link=link, boundary=bm,
                      models=models, observations=tuple(observations), error=err, contrast=contrast)
    return cal if executor is None else with_executor(cal, executor, executor_observations)


def with_executor(cal: Calibration, executor: ExecutorCosts,
                  executor_observations: Sequence[ExecutorObservation] = ()) -> Calibration:
    """``cal`` with the concurrent executor's costs ``executor`` (probed), its ``convert`` refitted
    on the executor observations that are not held out: the refit replaces the probe's value
    unless it sits at an end of its range (the conversions alone do not explain the measurements)
    or predicts the held-out placements worse."""
    probe = None
    fitted = fit_convert([o for o in executor_observations if not o.heldout])
    if fitted is not None:
        probe = executor.convert
        held_x = [o for o in executor_observations if o.heldout]
        inside = CONVERT_GRID[0] < fitted < CONVERT_GRID[-1]
        if inside and (not held_x or (np.median(np.abs(grid_errors(held_x, fitted)))
                                      <= np.median(np.abs(grid_errors(held_x, probe))))):
            executor = msgspec.structs.replace(executor, convert=fitted, convert_ci=(0.0, 0.0), convert_fitted=True)
    return msgspec.structs.replace(cal, executor=executor, executor_observations=tuple(executor_observations),
                                   convert_probe=probe)


def with_pipeline(cal: Calibration, observations: Sequence[PipelineObservation]) -> Calibration:
    """``cal`` with the throughput objective's ``handoff`` fitted on the served placements that are
    not held out (:func:`fit_grid`); kept when it lies below the grid's upper end and predicts the
    held-out ones no worse than no hand-off at all."""
    got = fit_grid([o for o in observations if not o.heldout])
    keep = None
    if got is not None and got < HANDOFF_GRID[-1]:
        held = [o for o in observations if o.heldout]
        if not held or np.median(np.abs(grid_errors(held, got))) <= np.median(np.abs(grid_errors(held, 0.0))):
            keep = got
    return msgspec.structs.replace(cal, handoff=keep, pipeline_observations=tuple(observations))


def pipeline_report(cal: Calibration) -> list[str]:
    """Lines for ``hdp calibrate``: the served placements' fit and the errors without and with it."""
    po = cal.pipeline_observations
    if not po:
        return []
    got = fit_grid([o for o in po if not o.heldout])
    if got is None:
        return ["served pipelines: no placement measured with an interval: hand-off not fitted"]
    if cal.handoff is not None:
        used = "used by --objective throughput"
    elif got >= HANDOFF_GRID[-1]:
        used = "not used: the fit is at the end of its range (hand-offs alone do not explain the rates)"
    else:
        used = "not used: it predicts the held-out placements worse than none"
    n_fit = sum(not o.heldout and math.isfinite(standard_error(o)) for o in po)
    lines = [f"served pipelines ({po[0].requests} requests in flight): hand-off per HETERO subgraph "
             f"{got * 1e6:.0f} µs, fitted on {n_fit} placements; {used}",
             "throughput simulator error (predicted / measured period ratio to the plain first device - 1), "
             "no hand-off -> fitted:"]
    return lines + grid_error_lines(po, 0.0, got, "subgraphs")


#: The range of a plausible device correction δ: a fit outside it explains the measurements by
#: something the simulator does not model (measured on virtual-2x1 before
#: :func:`hdp.target.devices.hetero_config`: HETERO ran a two-device split of ResNet-50 with both host
#: cores busy, 17.0 ms against 31.4 ms on one device, so the fit gave CPU_B x0.59 and α 98.5, and
#: every throughput estimate from it was 2-4x off).
PLAUSIBLE = (1 / 3, 3.0)

#: The range of a plausible profile scale α. Wider than δ's: α is identified only relative to the
#: calibration's other models (their geometric mean is 1) and sets how large the shared boundary
#: costs are against this model's profiled compute (the boundary pass divides them by α; compute
#: keeps the profile's seconds). On virtual-2x1 (2026-12-02, quiet host) a 0.1 ms MobileNet-tiny
#: came out at α 4.13 and ResNet-50 at 0.30, with held-out errors of 1.1-2.3 % (median) after the
#: fit; the bad fit above had α 98.5 against 0.01.
PLAUSIBLE_PROFILE = (1 / 10, 10.0)


def implausible(models: Sequence[ModelScale], devices: Sequence[str]) -> list[str]:
    """One reason per fitted correction outside :data:`PLAUSIBLE_PROFILE` (α) or :data:`PLAUSIBLE`
    (δ), naming the model and the value."""
    out = []
    for m in models:
        if not PLAUSIBLE_PROFILE[0] <= m.compute_scale <= PLAUSIBLE_PROFILE[1]:
            out.append(f"{m.model}: profile scale α {m.compute_scale:.3g} (plausible x0.1…x10)")
        out += [f"{m.model}: device scale {d} x{x:.3g} (plausible x0.33…x3)"
                for d, x in zip(devices, m.device_scale) if not PLAUSIBLE[0] <= x <= PLAUSIBLE[1]]
    return out


def report(cal: Calibration) -> list[str]:
    """Lines for ``hdp calibrate``: the parameters, and the errors before and after per model."""
    nd = len(cal.devices)
    lines = [f"boundary model of target '{cal.target}' on this host ({cal.host_facts.get('cpu', '?')}, "
             f"OpenVINO {cal.host_facts.get('openvino', '?')}):",
             f"  {cal.boundary.describe()}",
             f"  target's guess: {uncalibrated(cal.link).describe()}"]
    scales = {m.costs: m for m in cal.models}
    for m in cal.models:
        ds = ", ".join(f"{d} x{s:.3f}" for d, s in zip(cal.devices, m.device_scale))
        lines.append(f"  {m.model}: profile scale α {m.compute_scale:.3f}; device scales {ds}; real share of "
                     f"per-op device differences λ {m.contrast:.2f}")
    lines.append("simulator error on held-out mixed placements (predicted / measured ratio to the reference - 1):")
    before = uncalibrated(cal.link)
    for name in dict.fromkeys(o.model for o in cal.observations):
        held = [o for o in cal.observations if o.model == name and o.heldout and o.mixed]
        fitted = [o for o in cal.observations if o.model == name and not o.heldout]
        if not held:
            lines.append(f"  {name}: no held-out placement measured")
            continue
        b = summary(errors(before, {}, held, nd))
        a = summary(errors(cal.boundary, scales, held, nd))
        fa = summary(errors(cal.boundary, scales, fitted, nd))
        lines.append(f"  {name}: {a['n']} placements; median |error| {b['median_abs'] * 100:.1f} % -> "
                     f"{a['median_abs'] * 100:.1f} %, worst {b['worst'] * 100:+.1f} % -> {a['worst'] * 100:+.1f} % "
                     f"(fitted placements: median {fa['median_abs'] * 100:.1f} %)")
    if cal.error is not None:
        lines.append(f"optimal's margin (90th percentile of the held-out |error|): {cal.error * 100:.1f} %")
    if cal.executor is not None:
        lines.append(cal.executor.describe())
    xo = cal.executor_observations
    if xo and cal.executor is not None and cal.convert_probe is not None:
        c0 = cal.convert_probe
        c = fit_convert([o for o in xo if not o.heldout])
        if cal.executor.convert_fitted:
            used = "the refit is used"
        elif not CONVERT_GRID[0] < c < CONVERT_GRID[-1]:
            used = "the probe's is kept: the refit is at an end of its range, conversions alone do not explain the runs"
        else:
            used = "the probe's is kept: it predicts the held-out placements better"
        lines.append(f"  conversion cost refitted on {sum(not o.heldout for o in xo)} placements the executor ran: "
                     f"{c * 1e9:.3g} ms per MB (the probe measured {c0 * 1e9:.3g}); {used}")
        lines.append("executor's simulator error (predicted / measured ratio to the reference - 1), probe -> fitted:")
        lines += grid_error_lines(xo, c0, c, "sub-models")
    return lines + pipeline_report(cal) + streams_report(cal)

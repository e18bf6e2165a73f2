"""The boundary model: features of a placement, the fit, the store, the boundary pass, optimal's
margin, and the simulator's subgraph count against HETERO's own on small real placements."""

from __future__ import annotations

import math

import msgspec
import numpy as np
import pytest
from placement_helpers import make_module, per_group, problem, random_module

from hdp.base.errors import InputError
from hdp.pipeline.calibrate import design
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.classical import auto_margin
from hdp.placers.options import UNCALIBRATED_MARGIN, method_from
from hdp.runtime.costs import calibrate as C
from hdp.target.target import load_target


def _obs(f: C.PlacementFeatures, ref: C.PlacementFeatures, ratio: float, *, costs="t0", heldout=False, se=0.02, name="x") -> C.Observation:
    half = 1.96 * se
    return C.Observation(model=costs, costs=costs, name=name, heldout=heldout,
                         mixed=sum(x > 0 for x in f.compute) > 1, features=f, reference=ref, hetero_subgraphs=0,
                         ratio=ratio, low=ratio * math.exp(-half), high=ratio * math.exp(half), rounds=50,
                         median=ratio, ref_median=1.0, load=0.0)


def test_features_count_copies_per_destination_device_and_their_bytes():
    # a -> {b, c}: one tensor (100 B) with two consumers; b -> d (7 B)
    m = make_module(["X"] * 4, [(0, 1), (0, 2), (1, 3)], np.ones((4, 3)) * [1.0, 2.0, 4.0],
                    edge_bytes=[100, 100, 7])
    p = problem(m)
    sim = Simulator(p)
    # one copy of a's tensor to D1; subgraphs {a}, {b, d} and {c} (nothing joins c to b on D1)
    f = C.placement_features(p, sim, per_group(p, [0, 1, 1, 1]))
    assert (f.copies, f.copy_bytes, f.subgraphs) == (1, 100.0, 3)
    assert f.compute == (1.0, 6.0, 0.0)
    f = C.placement_features(p, sim, per_group(p, [0, 1, 2, 0]))  # to D1 and to D2; b -> d back to D0
    assert (f.copies, f.copy_bytes) == (3, 207.0)
    assert f.compute == (2.0, 2.0, 4.0)
    f = C.placement_features(p, sim, p.single(2))
    assert (f.copies, f.copy_bytes, f.subgraphs, f.compute) == (0, 0.0, 1, (0.0, 0.0, 16.0))


def _synthetic(rng, truth: C.BoundaryModel, scales: dict, n_per_table=30, noise=0.01):
    """Observations of random placements of several cost tables (``scales``: name -> (α, δ of the
    second device, λ)), their ratios from the model with known parameters and log-normal noise.
    Each placement's profiled compute differs from its common part by a per-placement "profile
    noise" of up to ±8 %, of which the share λ is real."""
    obs = []
    for name, (alpha, delta, lam) in scales.items():
        c_ref = rng.uniform(0.05, 0.2)

        def feats(common, nsub=1, ncopy=0, nbytes=0.0):
            compute = tuple(x * (1 + rng.uniform(-0.08, 0.08)) if x else 0.0 for x in common)
            return C.PlacementFeatures(compute=compute, common=tuple(common), subgraphs=nsub, copies=ncopy, copy_bytes=nbytes)

        ref = feats((c_ref, 0.0))
        rows = [feats((0.0, c_ref))]
        for _ in range(n_per_table):
            share = rng.uniform(0.1, 0.9)
            nsub = int(rng.integers(2, 80))
            ncopy = int(nsub + rng.integers(0, 40))
            rows.append(feats((c_ref * (1 - share), c_ref * share), nsub, ncopy, float(ncopy * rng.uniform(1e4, 3e6))))
        sc = {name: C.ModelScale(costs=name, model=name, compute_scale=alpha, device_scale=(1.0, delta), contrast=lam)}
        for f in rows:
            o = _obs(f, ref, 1.0, costs=name)
            r = float(C.predict(truth, sc, [o], 2)[0]) * math.exp(rng.normal(0, noise))
            obs.append(msgspec.structs.replace(o, ratio=r, low=r * math.exp(-0.04), high=r * math.exp(0.04)))
    return obs


def test_fit_recovers_known_parameters():
    rng = np.random.default_rng(0)
    truth = C.BoundaryModel(subgraph_overhead=150e-6, copy_latency=40e-6, copy_per_byte=1.0 / 2e9)
    # geometric mean of the α is 1 (the fit's normalisation)
    scales = {"a": (2.0, 0.8, 0.0), "b": (0.5, 1.25, 1.0), "c": (1.0, 1.0, 0.5)}
    obs = _synthetic(rng, truth, scales, n_per_table=40, noise=0.003)
    bm, models = C.fit(obs, 2, C.uncalibrated((5e-6, 10e9, 40e-6)))
    assert bm.subgraph_overhead == pytest.approx(truth.subgraph_overhead, rel=0.15)
    assert bm.copy_latency == pytest.approx(truth.copy_latency, rel=0.3, abs=10e-6)
    assert bm.copy_per_byte == pytest.approx(truth.copy_per_byte, rel=0.1)
    got = {m.costs: m for m in models}
    for name, (alpha, delta, lam) in scales.items():
        assert got[name].compute_scale == pytest.approx(alpha, rel=0.1)
        assert got[name].device_scale == pytest.approx((1.0, delta), rel=0.05)
        assert got[name].contrast == pytest.approx(lam, abs=0.15)
    # and the fitted model predicts what it was fitted on
    err = C.errors(bm, got, obs, 2)
    assert np.median(np.abs(err)) < 0.01


def test_a_fit_outside_the_plausible_range_is_named_per_model_and_device():
    ok = C.ModelScale(costs="a", model="resnet50", compute_scale=0.3, device_scale=(1.0, 0.8))
    tiny = C.ModelScale(costs="c", model="tiny", compute_scale=4.1, device_scale=(1.0, 1.0))
    odd = C.ModelScale(costs="b", model="mobilenet", compute_scale=0.01, device_scale=(1.0, 0.2))
    assert C.implausible([ok, tiny], ["CPU", "CPU_B"]) == []
    assert C.implausible([ok, odd], ["CPU", "CPU_B"]) == ["mobilenet: profile scale α 0.01 (plausible x0.1…x10)",
                                                          "mobilenet: device scale CPU_B x0.2 (plausible x0.33…x3)"]


def test_fit_is_robust_to_a_few_outliers_and_ignores_held_out_placements():
    rng = np.random.default_rng(1)
    truth = C.BoundaryModel(subgraph_overhead=300e-6, copy_latency=0.0, copy_per_byte=1.0 / 1e9)
    obs = _synthetic(rng, truth, {"a": (1.0, 1.0, 0.0)}, n_per_table=40, noise=0.005)
    bad = [msgspec.structs.replace(o, ratio=o.ratio * 1.8) for o in obs[1:5]]  # 4 of 41 rounds gone wrong
    held = [msgspec.structs.replace(o, heldout=True, ratio=o.ratio * 5) for o in obs[5:15]]  # never fitted
    bm, _ = C.fit(obs[:1] + bad + obs[5:] + held, 2, C.uncalibrated((5e-6, 10e9, 40e-6)))
    assert bm.subgraph_overhead == pytest.approx(truth.subgraph_overhead, rel=0.25)
    assert bm.copy_per_byte == pytest.approx(truth.copy_per_byte, rel=0.25)


def test_fit_needs_measurements():
    with pytest.raises(InputError, match="nothing to fit"):
        C.fit([], 2, C.uncalibrated((5e-6, 10e9, 40e-6)))


def _calibration(host="h", boundary=None, models=(), error=0.05) -> C.Calibration:
    return C.Calibration(version=C.CALIBRATION_VERSION, target="virtual", devices=("CPU", "CPU_B"), host=host,
                         host_facts={"cpu": "x", "openvino": "y"}, created="now", link=(5e-6, 10e9, 40e-6),
                         boundary=boundary or C.BoundaryModel(subgraph_overhead=1e-4, copy_latency=2e-5,
                                                              copy_per_byte=1e-9),
                         models=tuple(models), observations=(), error=error)


def test_store_is_keyed_by_host_fingerprint_and_target(tmp_path):
    from hdp.target.host import host_fingerprint

    virtual = load_target("virtual")
    other = msgspec.structs.replace(virtual, devices=[msgspec.structs.replace(virtual.devices[0],
                                                                              config={"INFERENCE_NUM_THREADS": "1"}),
                                                      virtual.devices[1]])
    store = C.CalibrationStore(tmp_path)
    cal = _calibration(host=host_fingerprint())
    path = store.put(cal, virtual)
    assert path.is_relative_to(tmp_path / "calibrate")
    assert store.get(virtual) == cal
    assert C.calibration_for(virtual, tmp_path) == cal
    assert store.get(other) is None  # another device configuration is another target
    assert store.get(virtual, host="another-host") is None
    assert C.calibration_for(virtual, None) is None
    assert C.calibration_for(load_target("i9-flex170"), tmp_path) is None  # modeled: never calibrated
    # the host fingerprint includes the OpenVINO version: another version is another key
    assert C.CalibrationStore.key(virtual, "fp-ov-2026.4") != C.CalibrationStore.key(virtual, "fp-ov-2026.5")
    path.write_bytes(path.read_bytes()[:-3])  # damaged: discarded, not used
    with pytest.warns(UserWarning, match="corrupt"):
        assert store.get(virtual) is None


def test_a_calibration_survives_its_json_with_nothing_held_out_and_an_unresolved_ratio(tmp_path):
    from hdp.target.host import host_fingerprint

    virtual = load_target("virtual")
    rng = np.random.default_rng(4)
    obs = _synthetic(rng, C.BoundaryModel(subgraph_overhead=1e-4, copy_latency=0.0, copy_per_byte=1e-9),
                     {"a": (1.0, 1.0, 0.5)}, n_per_table=8)
    obs.append(msgspec.structs.replace(obs[-1], low=0.0, high=0.0, ratio=9.0))  # too few rounds: not fitted
    cal = C.build(virtual, obs)
    assert cal.error is None and cal.host == host_fingerprint()
    store = C.CalibrationStore(tmp_path)
    store.put(cal, virtual)
    assert store.get(virtual) == cal
    bm, _ = C.fit(obs[:-1], 2, C.uncalibrated(cal.link))
    assert bm == cal.boundary  # the unresolved ratio took no part


def test_host_fingerprint_changes_with_the_openvino_version(monkeypatch):
    from hdp.target import host

    facts = dict(host.host_facts())
    host.host_fingerprint.cache_clear()
    try:
        a = host.host_fingerprint()
        monkeypatch.setattr(host, "host_facts", lambda: {**facts, "openvino": facts["openvino"] + ".1"})
        host.host_fingerprint.cache_clear()
        assert host.host_fingerprint() != a
    finally:
        monkeypatch.undo()
        host.host_fingerprint.cache_clear()


def test_boundary_pass_makes_the_simulator_predict_the_fitted_ratio():
    from hdp.passes.boundary import BoundaryPass

    rng = np.random.default_rng(3)
    m = random_module(rng, 40, 2)
    m = m.replace(costs=msgspec.structs.replace(m.costs, kind=("measured", "measured")))
    p0 = problem(m)
    sim0 = Simulator(p0)
    bm = C.BoundaryModel(subgraph_overhead=0.3, copy_latency=0.02, copy_per_byte=2e-4)
    scale = C.ModelScale(costs=C.costs_digest(m.costs), model="m", compute_scale=0.5, device_scale=(1.0, 1.3),
                         contrast=0.3)
    out = BoundaryPass(boundary=bm, models=(scale,), error=0.04).run(m)
    assert out.meta["boundary_error"] == "0.04" and "profile scale 0.500" in out.meta["boundary"]
    assert auto_margin(out) == pytest.approx(0.04)
    sim = Simulator(problem(out))
    ref = p0.single(0)
    for _ in range(5):
        gd = rng.integers(0, 2, p0.n_groups)
        o = _obs(C.placement_features(p0, sim0, gd), C.placement_features(p0, sim0, ref), 1.0, costs=scale.costs)
        want = C.predict(bm, {scale.costs: scale}, [o], 2)[0]
        assert sim.latency(gd) / sim.latency(ref) == pytest.approx(want, rel=1e-9)
    # a profile the calibration has not seen: op times untouched, the host-level terms as they are
    other = BoundaryPass(boundary=bm, models=()).run(m)
    assert np.array_equal(other.costs.op_time.numpy(), m.costs.op_time.numpy())
    assert (other.costs.subgraph_overhead, other.costs.link_latency) == (0.3, 0.02)
    assert "not calibrated" in other.meta["boundary"] and "boundary_error" not in other.meta
    # ... with the calibration's contrast: λ = 0 makes every device as fast as the op's mean
    flat = BoundaryPass(boundary=bm, models=(), contrast=0.0).run(m).costs.op_time.numpy()
    assert np.allclose(flat, m.costs.op_time.numpy().mean(axis=1, keepdims=True))


def test_with_calibration_inserts_the_pass_after_profile_only_when_stored(tmp_path):
    from hdp.passes.boundary import BoundaryPass, with_calibration
    from hdp.passes.cache import PassCache
    from hdp.pipeline.schedule import compile_schedule
    from hdp.target.host import host_fingerprint

    virtual = load_target("virtual")
    cache = PassCache(tmp_path)
    sched = compile_schedule(virtual, "optimal")
    assert with_calibration(sched, virtual, cache) == sched
    assert with_calibration(sched, virtual, None) == sched
    C.CalibrationStore(tmp_path).put(_calibration(host=host_fingerprint()), virtual)
    got = with_calibration(sched, virtual, cache)
    names = [p.pass_name() for p in got]
    assert names[names.index("profile") + 1] == "boundary" and len(got) == len(sched) + 1
    assert isinstance(got[names.index("boundary")], BoundaryPass)
    assert with_calibration(sched, virtual, None) == sched  # --no-cache: no calibration either
    single = compile_schedule(virtual, "single:CPU")  # no profile, nothing to calibrate
    assert with_calibration(single, virtual, cache) == single


def _two_device_chain(gain):
    """A chain of 4 where op 1 is faster on D0 and op 2 on D1 by the same amount: op 2 alone on D1
    is ``gain`` faster than either single device (copies and subgraphs free)."""
    x = 4 * gain / (1 + gain)  # singles take 4 - x, the split 4 - 2x
    t = np.array([[1.0, 1.0], [1.0 - x, 1.0], [1.0, 1.0 - x], [1.0, 1.0]])
    return make_module(["X"] * 4, [(0, 1), (1, 2), (2, 3)], t, lat=0.0, bw=1e12, ovh=0.0)


def test_optimal_keeps_the_best_single_device_unless_the_gain_beats_the_margin():
    def run(m, **kw):
        o = method_from("optimal", {"boundary_penalty": 0.0, **kw})
        return place(o, PlaceContext(module=m, problem=problem(m)))

    def mixed(r):
        return len(set(r.group_device.tolist())) > 1

    m = _two_device_chain(0.03)  # optimum 3 % faster than one device
    assert mixed(run(m, margin=0.0))
    kept = run(m, margin=0.05)
    assert not mixed(kept) and "less than the margin of 5.0 %" in kept.info["kept_single"]
    assert kept.info["predicted_gain"] == pytest.approx(0.03)
    assert mixed(run(m, margin=0.02))
    with pytest.raises(InputError, match="margin"):
        run(m, margin=1.5)
    # the default: modeled costs 0; measured costs without a calibration 15 %; a calibration's error
    assert auto_margin(m) == 0.0 and mixed(run(m))
    measured = m.replace(costs=msgspec.structs.replace(m.costs, kind=("measured", "measured")))
    assert auto_margin(measured) == UNCALIBRATED_MARGIN
    assert not mixed(run(measured))
    calibrated = measured.replace(meta={"boundary_error": "0.01"})
    assert mixed(run(calibrated))


def test_design_is_seeded_starts_with_the_reference_and_holds_out_mixed_placements():
    rng = np.random.default_rng(5)
    m = random_module(rng, 60, 2, p_edge=0.08)
    p = problem(m)
    a = design(m, p, seed=3, heldout=6)
    b = design(m, p, seed=3, heldout=6)
    assert [d.name for d in a] == [d.name for d in b]
    assert all(np.array_equal(x.group_device, y.group_device) for x, y in zip(a, b))
    assert a[0].name == "reference" and a[0].group_device.tolist() == p.single(0).tolist()
    held = [d for d in a if d.heldout]
    assert len(held) == 6 and held[0].name == "heft" or all(d.name.startswith("heldout") for d in held)
    assert all(np.unique(d.group_device).size > 1 for d in held)
    keys = {d.group_device.astype(np.int16).tobytes() for d in a}
    assert len(keys) == len(a)  # no placement twice
    # the fitted part does not change with the number held out
    c = design(m, p, seed=3, heldout=2)
    assert [d.name for d in c if not d.heldout] == [d.name for d in a if not d.heldout]


def test_report_states_errors_before_and_after_per_model():
    rng = np.random.default_rng(2)
    truth = C.BoundaryModel(subgraph_overhead=200e-6, copy_latency=0.0, copy_per_byte=1e-9)
    obs = _synthetic(rng, truth, {"a": (1.0, 1.0, 0.2)}, n_per_table=20, noise=0.002)
    obs = [msgspec.structs.replace(o, heldout=i % 3 == 0 and o.mixed) for i, o in enumerate(obs)]
    cal = C.build(load_target("virtual"), obs)
    text = "\n".join(C.report(cal))
    assert "per subgraph" in text and "a: 6 placements" in text and "->" in text
    assert 0 <= cal.error < 0.02


# --------------------------------------------------------------------------- real HETERO


def _residual_net():
    """x -> conv1 -> relu1 -> conv2 -> add(relu1) -> relu2 -> conv3 -> add(relu2) -> Result: two
    residual blocks, the structure HETERO splits into extra subgraphs when a branch moves."""
    import openvino as ov
    import openvino.opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 8, 8, 8], np.float32, name="x")

    def conv(v, name):
        w = ops.constant(rng.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.1, name=f"{name}_w")
        return ops.convolution(v, w, [1, 1], [1, 1], [1, 1], [1, 1], name=name)

    r1 = ops.relu(conv(x, "conv1"), name="relu1")
    a1 = ops.add(conv(r1, "conv2"), r1, name="add1")
    r2 = ops.relu(a1, name="relu2")
    a2 = ops.add(conv(r2, "conv3"), r2, name="add2")
    m = ops.multiply(a2, ops.sigmoid(a2, name="gate"), name="swish")
    return ov.Model([ops.result(m, name="out")], [x], "residual")


def test_simulator_counts_the_subgraphs_hetero_makes(tmp_path):
    """Every placement of the tie groups of a small residual net over CPU and CPU_B, compiled with
    HETERO: the simulator's subgraph count equals HETERO_NUMBER_OF_SUBMODELS."""
    import itertools

    import openvino as ov

    from hdp.ir.openvino_frontend import lower
    from hdp.placement.problem import build_problem
    from hdp.runtime.measure.measurer import Measurer

    xml = tmp_path / "res.xml"
    ov.save_model(_residual_net(), str(xml), compress_to_fp16=False)
    module = lower(xml)
    virtual = load_target("virtual")
    p = build_problem(module, virtual.device_names)
    sim = Simulator(p)
    placements = [np.array(g, np.int64) for g in itertools.product((0, 1), repeat=p.n_groups)]
    assert 64 <= len(placements) <= 512
    rng = np.random.default_rng(0)
    chosen = [placements[i] for i in rng.choice(len(placements), 24, replace=False)]
    got, want = [], []
    with Measurer(module, virtual, runs=1, warmup=0, cache=False) as m:
        for gd in chosen:
            r = m.measure(p.op_devices(gd))
            assert r.ok, r.error
            got.append(sim.terms(gd)[2])
            want.append(r.submodels)
    assert got == want


def test_compile_applies_a_stored_calibration(branchy_xml, tmp_path):
    """hdp compile on a real target inserts the boundary pass when the cache holds a calibration
    of that target for this host, and not with --no-cache."""
    import json

    from click.testing import CliRunner

    from hdp.cli.main import main
    from hdp.ir.serde import load
    from hdp.target.host import host_fingerprint

    virtual = load_target("virtual")
    cache = tmp_path / "cache"
    C.CalibrationStore(cache).put(_calibration(host=host_fingerprint(), error=0.07), virtual)
    out, timings, ir = tmp_path / "p.xml", tmp_path / "t.json", tmp_path / "m.hdp"
    r = CliRunner().invoke(main, ["compile", str(branchy_xml), "-o", str(out), "--target", "virtual", "--method",
                                  "optimal", "--no-compare", "--quiet", "--timings", str(timings), "--emit-ir", str(ir),
                                  "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    passes = [row["pass"] for row in json.loads(timings.read_text())]
    assert passes.index("boundary") == passes.index("profile") + 1
    m = load(ir)
    assert m.meta["boundary_error"] == "0.07" and "calibrated boundary model" in m.meta["boundary"]
    assert m.costs.subgraph_overhead == pytest.approx(1e-4)
    r = CliRunner().invoke(main, ["compile", str(branchy_xml), "-o", str(out), "--target", "virtual", "--method",
                                  "optimal", "--no-compare", "--quiet", "--timings", str(timings), "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "boundary" not in [row["pass"] for row in json.loads(timings.read_text())]


# --------------------------------------------------------------------------- the executor's conversions


def _executor_obs(rng, truth: float, n: int, heldout: bool = False, noise: float = 0.01):
    """Executor observations whose simulated ratio grows with ``convert`` (per placement, a base ratio
    and a conversion volume); measured at ``truth`` with log-normal noise."""
    out = []
    for i in range(n):
        base, vol = rng.uniform(0.7, 1.2), rng.uniform(1e7, 6e7) / 0.035  # bytes over a 35 ms reference
        pred = tuple(base + vol * c / 1.0 for c in C.CONVERT_GRID)
        r = (base + vol * truth) * float(np.exp(rng.normal(0, noise)))
        out.append(C.ExecutorObservation(model="m", costs="x", name=f"p{i}", heldout=heldout, ratio=r,
                                         low=r * 0.98, high=r * 1.02, rounds=30, subgraphs=5 + i,
                                         grid=C.CONVERT_GRID, predicted=pred))
    return out


def test_fit_convert_recovers_the_conversion_cost_and_build_keeps_the_probe():
    """The conversion cost per byte is refitted on the executor's measured placements (not the held-out
    ones); the calibration keeps the probe's value beside it and reports both errors."""
    from hdp.runtime.costs.executor import ExecutorCosts

    rng = np.random.default_rng(4)
    truth = 3.1e-10
    fit = _executor_obs(rng, truth, 8)
    held = _executor_obs(rng, 9e-10, 3, heldout=True)  # would pull the fit far off if used
    assert C.fit_convert(fit + held) != pytest.approx(truth, rel=0.05)
    got = C.fit_convert(fit)
    assert got == pytest.approx(truth, rel=0.05)
    assert C.fit_convert([]) is None
    assert C.fit_convert([msgspec.structs.replace(o, low=0.0, high=0.0) for o in fit]) is None  # no interval
    probe = ExecutorCosts(request=2e-5, launch=7e-6, handover=3e-5, convert=1.3e-10, convert_ci=(1e-10, 1.6e-10))
    rng2 = np.random.default_rng(2)
    truth_b = C.BoundaryModel(subgraph_overhead=200e-6, copy_latency=0.0, copy_per_byte=1e-9)
    obs = _synthetic(rng2, truth_b, {"a": (1.0, 1.0, 0.2)}, n_per_table=12, noise=0.002)
    cal = C.build(load_target("virtual"), obs, executor=probe, executor_observations=fit + held)
    assert cal.executor.convert == pytest.approx(truth, rel=0.05) and cal.convert_probe == 1.3e-10
    assert cal.executor.launch == probe.launch  # the rest stays the probe's
    text = "\n".join(C.report(cal))
    assert "conversion cost refitted on 8 placements" in text and "the refit is used" in text
    assert "held out, 3 placements" in text
    # stored and read back
    back = msgspec.json.decode(msgspec.json.encode(cal), type=C.Calibration)
    assert back.executor_observations[0].at(truth) == pytest.approx(fit[0].at(truth))
    # no executor observations: the probe's value stands
    assert C.build(load_target("virtual"), obs, executor=probe).executor.convert == 1.3e-10


@pytest.mark.slow
def test_hdp_calibrate_measures_placements_run_by_the_executor(tmp_path):
    """`hdp calibrate` on the two-core bed: besides HETERO's placements, some run by the concurrent
    executor (fitted and held out), whose conversion cost is refitted and stored with the probe's,
    and some served with requests in flight, for the throughput objective's hand-off."""
    import openvino as ov
    from click.testing import CliRunner

    from hdp.cli.main import main

    xml = tmp_path / "residual.xml"
    ov.save_model(_residual_net(), str(xml))
    cache = tmp_path / "cache"
    r = CliRunner().invoke(main, ["calibrate", str(xml), "--target", "virtual-2x1", "--heldout", "2", "--random", "2",
                                  "--max-seconds", "3", "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    cal = C.CalibrationStore(cache).get(load_target("virtual-2x1"))
    xo = cal.executor_observations
    assert xo and any(o.heldout for o in xo) and any(not o.heldout for o in xo)
    assert all(o.ratio > 0 and len(o.predicted) == len(C.CONVERT_GRID) and o.subgraphs >= 2 for o in xo)
    assert cal.convert_probe is not None and cal.executor.convert >= 0
    assert "conversion cost refitted on" in r.output and "executor blocks:" in r.output
    # and placements served with two requests in flight beside the plain first device (the hand-off)
    po = cal.pipeline_observations
    assert po and any(o.heldout for o in po) and any(not o.heldout for o in po)
    assert all(o.ratio > 0 and o.requests == 2 and o.hetero_subgraphs >= 2 for o in po)
    assert all(o.predicted[-1] > o.predicted[0] for o in po)
    assert "served pipelines (2 requests in flight)" in r.output and "served pipeline:CPU>CPU_B" in r.output


def test_a_conversion_refit_at_an_end_of_its_range_keeps_the_probe():
    """Measurements the conversions cannot explain (the simulator too slow already at 0) drive the
    refit to 0; the probe's value is kept and the report says why."""
    from hdp.runtime.costs.executor import ExecutorCosts

    rng = np.random.default_rng(7)
    obs = [msgspec.structs.replace(o, ratio=o.predicted[0] * 0.6, low=o.predicted[0] * 0.59,
                                   high=o.predicted[0] * 0.61) for o in _executor_obs(rng, 3e-10, 6)]
    assert C.fit_convert(obs) == pytest.approx(0.0, abs=1e-12)
    probe = ExecutorCosts(request=2e-5, launch=7e-6, handover=3e-5, convert=1.3e-10)
    b = _synthetic(np.random.default_rng(2), C.BoundaryModel(subgraph_overhead=200e-6, copy_latency=0.0,
                                                             copy_per_byte=1e-9), {"a": (1.0, 1.0, 0.2)}, n_per_table=12)
    cal = C.build(load_target("virtual"), b, executor=probe, executor_observations=obs)
    assert cal.executor.convert == 1.3e-10 and not cal.executor.convert_fitted
    assert "conversions alone do not explain the runs" in "\n".join(C.report(cal))


# --------------------------------------------------------------------------- served pipelines


def _pipeline_obs(rng, truth: float, n: int, heldout: bool = False, noise: float = 0.01):
    """Pipeline observations whose simulated period ratio grows with the hand-off (per placement, a
    base ratio and a number of subgraphs over a 35 ms reference); measured at ``truth``."""
    out = []
    for i in range(n):
        base, nsub = rng.uniform(0.5, 0.7), int(rng.integers(2, 10))
        pred = tuple(base + nsub * h / 0.035 for h in C.HANDOFF_GRID)
        r = (base + nsub * truth / 0.035) * float(np.exp(rng.normal(0, noise)))
        out.append(C.PipelineObservation(model="m", costs="x", name=f"p{i}", heldout=heldout, requests=2, ratio=r,
                                         low=r * 0.98, high=r * 1.02, rounds=12, subgraphs=nsub, hetero_subgraphs=nsub,
                                         grid=C.HANDOFF_GRID, predicted=pred))
    return out


def test_the_served_hand_off_is_fitted_on_the_fitted_placements_and_kept_when_it_helps():
    rng = np.random.default_rng(11)
    truth = 4e-4
    fit = _pipeline_obs(rng, truth, 6)
    held = _pipeline_obs(rng, truth, 3, heldout=True)
    cal = C.with_pipeline(_calibration(), fit + held)
    assert cal.handoff == pytest.approx(truth, rel=0.05)
    text = "\n".join(C.report(cal))
    assert "fitted on 6 placements; used by --objective throughput" in text and "m (held out, 3 placements" in text
    back = msgspec.json.decode(msgspec.json.encode(cal), type=C.Calibration)
    assert back.handoff == cal.handoff and back.pipeline_observations[0].at(truth) == pytest.approx(fit[0].at(truth))
    # held-out placements it predicts worse than no hand-off: not used
    wrong = [msgspec.structs.replace(o, ratio=o.predicted[0], low=o.predicted[0] * 0.98,
                                     high=o.predicted[0] * 1.02) for o in held]
    assert C.with_pipeline(_calibration(), fit + wrong).handoff is None
    # rates the hand-off cannot explain (slower than any grid value): at the end of its range, not used
    slow = [msgspec.structs.replace(o, ratio=o.predicted[-1] * 2, low=o.predicted[-1] * 1.9,
                                    high=o.predicted[-1] * 2.1) for o in fit]
    cal = C.with_pipeline(_calibration(), slow)
    assert cal.handoff is None and "at the end of its range" in "\n".join(C.report(cal))
    assert C.with_pipeline(_calibration(), ()).handoff is None


def test_compile_for_throughput_uses_the_stored_hand_off(branchy_xml, tmp_path):
    """hdp compile --objective throughput on a calibrated target places with the calibration's
    hand-off and records it with the placement; the latency objective does not take it."""
    from click.testing import CliRunner

    from hdp.cli.main import main
    from hdp.ir.serde import load
    from hdp.target.host import host_fingerprint

    virtual = load_target("virtual")
    cache = tmp_path / "cache"
    cal = msgspec.structs.replace(_calibration(host=host_fingerprint()), handoff=3e-4)
    C.CalibrationStore(cache).put(cal, virtual)
    out, ir = tmp_path / "p.xml", tmp_path / "m.hdp"
    for objective, want in (("throughput", "0.0003"), ("latency", None)):
        r = CliRunner().invoke(main, ["compile", str(branchy_xml), "-o", str(out), "--target", "virtual", "--method",
                                      "optimal", "--objective", objective, "--no-compare", "--emit-ir", str(ir),
                                      "--cache-dir", str(cache), "-v"])
        assert r.exit_code == 0, r.output
        assert load(ir).partition.info.get("handoff") == want
        assert ("300 us per served subgraph" in r.output) == (want is not None), r.output
    # a hand-off the user sets stands over the calibration's, and a bad one is refused
    base = ["compile", str(branchy_xml), "-o", str(out), "--target", "virtual", "--method", "optimal", "--objective",
            "throughput", "--no-compare", "--emit-ir", str(ir), "--cache-dir", str(cache)]
    r = CliRunner().invoke(main, base + ["--set", "handoff=5e-4"])
    assert r.exit_code == 0 and load(ir).partition.info.get("handoff") == "0.0005", r.output
    r = CliRunner().invoke(main, base + ["--set", "handoff=abc"])
    assert r.exit_code == 2 and "option 'handoff' must be a number, got 'abc'" in r.output, r.output


def test_compile_says_when_optimal_kept_one_device_for_its_margin():
    """optimal's margin fallback is printed by compile (it was only in the placement's info)."""
    from hdp.ir.types import Array, Placement
    from hdp.pipeline.report import method_lines

    m = _two_device_chain(0.03)
    kept = place(method_from("optimal", {"boundary_penalty": 0.0, "margin": 0.05}), PlaceContext(module=m, problem=problem(m)))
    def info(placed):  # without the simulated figures (their line needs a target)
        return {k: str(v) for k, v in placed.info.items() if k not in ("simulated", "lower_bound")}

    pl = Placement(method="optimal", devices=("D0", "D1"), info=info(kept),
                   device_of=Array.of(np.zeros(len(m.graph.ops), np.int16)))
    lines = method_lines(m.replace(placement=pl), None)
    said = [x for x in lines if "less than the margin of 5.0 %" in x]
    assert len(said) == 1 and said[0].startswith("optimal: kept every op on D") and "margin=0" in said[0]
    mixed = place(method_from("optimal", {"boundary_penalty": 0.0, "margin": 0.0}), PlaceContext(module=m, problem=problem(m)))
    pl = msgspec.structs.replace(pl, info=info(mixed))
    assert not any("margin" in x for x in method_lines(m.replace(placement=pl), None))

"""The profile knows its noise (hdp/runtime/costs/denoise.py, issue 21): per-op medians, devices of one
kind pooled, per-op differences shrunk toward the device ratio, and optimal's margin from the noise."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from placement_helpers import make_module, problem

from hdp.ir.types import Array, Costs
from hdp.placers import PlaceContext, place
from hdp.placers.options import method_from
from hdp.runtime.costs import denoise as dn


def test_per_op_median_resists_a_burst_and_the_variance_is_moderated():
    rng = np.random.default_rng(0)
    true = rng.uniform(1e-4, 1e-3, 50)
    runs = true * np.exp(rng.normal(0, 0.05, (5, 50)))
    runs[2, 7] *= 30  # another process took the core during one run of op 7
    est, var = dn.run_estimates(runs)
    assert est[7] == pytest.approx(true[7], rel=0.2) and runs[:, 7].mean() > 5 * true[7]
    assert np.all(var > 0) and var[7] > np.median(var)  # op 7's runs disagree: it is less certain
    # the moderated variance: an op whose runs agree perfectly still borrows the others' noise
    runs[:, 3] = true[3]
    assert dn.run_estimates(runs)[1][3] > 0
    # two runs: the minimum (interference only adds time); one run: variance unknown
    est2, _ = dn.run_estimates(runs[:2])
    assert np.array_equal(est2, runs[:2].min(axis=0))
    assert np.isnan(dn.run_estimates(runs[:1])[1]).all()
    # an op that never ran costs 0 with no noise
    runs[:, 9] = 0.0
    e, v = dn.run_estimates(runs)
    assert e[9] == 0 and v[9] == 0


def test_device_kind_from_the_compiled_models_properties():
    f32 = {"INFERENCE_PRECISION_HINT": "<Type: 'float32'>", "INFERENCE_NUM_THREADS": "2", "NUM_STREAMS": "1",
           "FULL_DEVICE_NAME": "AMD EPYC", "EXECUTION_DEVICES": "['CPU']", "NETWORK_NAME": "Model0"}
    same = dict(f32, EXECUTION_DEVICES="['CPU_B']", NETWORK_NAME="Model1")  # names say nothing
    bf16 = dict(f32, INFERENCE_PRECISION_HINT="<Type: 'bfloat16'>")
    one = dict(f32, INFERENCE_NUM_THREADS="1")
    labels = [dn.device_kind("CPU", p) for p in (f32, same, bf16, one)]
    assert labels[0] == labels[1] and len(set(labels)) == 3
    assert labels[0].startswith("CPU plugin, f32, 2 threads") and "bf16" in labels[2] and "1 threads" in labels[3]


def _noisy_profile(rng, n, real_sd, noise_sd, ratio=0.5):
    """Two devices: B takes ``ratio`` of A's time, times a real per-op factor (log sd ``real_sd``),
    both measured with log noise ``noise_sd``."""
    t = rng.uniform(1e-4, 2e-3, n)
    real = rng.normal(0, real_sd, n)
    a = t * np.exp(rng.normal(0, noise_sd, n))
    b = t * ratio * np.exp(real + rng.normal(0, noise_sd, n))
    v = np.full((n, 2), noise_sd ** 2)
    return np.stack([a, b], 1), v, real


def test_shrinkage_removes_noise_and_keeps_real_differences():
    rng = np.random.default_rng(1)
    t, v, _ = _noisy_profile(rng, 400, 0.0, 0.3)  # no real per-op difference: all noise
    out, post, info = dn.shrink(t, v)
    e = np.log(out[:, 1] / out[:, 0])
    w = t.mean(axis=1) / t.mean(axis=1).sum()
    raw = np.log(t[:, 1] / t[:, 0])
    mu = np.log(t[:, 1].sum() / t[:, 0].sum())
    assert (w * np.abs(raw - mu)).sum() > 0.2 and (w * np.abs(e - mu)).sum() < 0.05
    assert info["tau"][0] < 0.1 and np.all(post <= v + 1e-15)
    t, v, real = _noisy_profile(rng, 400, 0.5, 0.1)  # real differences five times the noise
    out, _, info = dn.shrink(t, v)
    e = np.log(out[:, 1] / out[:, 0])
    assert info["tau"][0] == pytest.approx(0.5 / 2, rel=0.25)  # each device's half of the log-ratio
    assert np.corrcoef(e, real)[0, 1] > 0.95 and info["kept"] > 0.8
    # ops that are not finite and positive everywhere are left alone
    t[0, 1], t[1, 0] = np.inf, 0.0
    out, _, _ = dn.shrink(t, v)
    assert out[0, 1] == np.inf and out[1, 0] == 0.0


def _chain(t, se):
    """A chain of ops with times ``t`` (ops x 2) and standard errors ``se``, measured costs."""
    n = t.shape[0]
    m = make_module(["Parameter"] + ["X"] * n + ["Result"], [(i, i + 1) for i in range(n + 1)],
                    np.vstack([[0, 0], t, [0, 0]]), lat=1e-6, bw=1e12, ovh=1e-5)
    c = m.costs
    return m.replace(costs=Costs(devices=c.devices, op_time=c.op_time, kind=("measured", "measured"),
                                 link_latency=c.link_latency, link_bandwidth=c.link_bandwidth,
                                 subgraph_overhead=c.subgraph_overhead,
                                 op_se=Array.of(np.vstack([[0, 0], se, [0, 0]]), np.float64)))


def test_optimal_exploits_a_real_difference_and_not_the_noise():
    # the first half of the chain is twice as fast on D1, the second half twice as fast on D0
    half = np.array([[2e-3, 1e-3]] * 10 + [[1e-3, 2e-3]] * 10)
    gd = lambda m: place(method_from("optimal", {}), PlaceContext(module=m, problem=problem(m)))  # noqa: E731
    sure = gd(_chain(half, half * 0.02))  # known to 2 %: a 33 % gain is real
    assert len(set(sure.group_device.tolist())) == 2 and sure.info["margin_noise"] < 0.05
    vague = gd(_chain(half * np.array([1.0, 1.05]), half * 2.0))  # known to ±200 %: could be anything
    assert len(set(vague.group_device.tolist())) == 1 and "profile's noise" in vague.info["kept_single"]
    # equal columns (one kind, pooled): one device, the first
    pooled = gd(_chain(np.repeat(half[:, :1], 2, axis=1), half[:, :1].repeat(2, axis=1) * 0.1))
    assert pooled.group_device.tolist() == [0] * len(pooled.group_device)


def test_gain_noise_counts_the_ops_a_placement_moves():
    t = np.array([[1e-3, 1e-3]] * 4)
    m = _chain(t, np.full((4, 2), 1e-4))
    p = problem(m)
    se = m.costs.op_se.numpy()
    assert dn.gain_noise(p, se, p.single(0), 0) == 0.0
    moved = p.single(0).astype(np.int64)
    moved[p.structure.group_of[2]] = 1  # one op to D1: its noise on both devices
    assert dn.gain_noise(p, se, moved, 0) == pytest.approx(np.sqrt(2) * 1e-4)


def test_identical_devices_share_one_profile_and_optimal_keeps_one(zoo_export, tmp_path):
    """virtual-f32: two CPU plugin instances in f32 compute alike on any host."""
    from hdp.cli.main import main
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.runtime.costs.profile import profile_costs
    from hdp.target.target import load_target

    xml = zoo_export("mobilenet_v2-tiny")
    t = load_target("virtual-f32")
    m = PassManager([make_pass("support", {"target": t})]).run(lower(xml))
    samples: dict = {}
    costs, info = profile_costs(m, t, samples=samples)
    assert costs.device_class[0] == costs.device_class[1] and info["CPU"]["pooled"] == "CPU,CPU_B"
    tt = costs.op_time.numpy()
    assert np.array_equal(tt[:, 0], tt[:, 1]) and costs.measured_total[0] == costs.measured_total[1]
    assert samples["CPU"]["op_runs"].shape[0] >= 3 and "INFERENCE_PRECISION_HINT" in samples["CPU"]["properties"]
    out = tmp_path / "placed.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "--target", "virtual-f32", "--method", "optimal", "-o", str(out),
                                  "--no-check", "--no-compare", "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert ", CPU_B 0) on virtual-f32" in r.output, r.output

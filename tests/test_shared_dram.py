"""Devices of one SoC on one DRAM: the simulator's contention term when they run at once (issue 32 item 2)."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from hdp.ir.openvino_frontend import lower
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import make_pass
from hdp.placement.objective import Concurrent, Throughput
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.runtime.costs.profile import dram_bytes
from hdp.target.target import load_target, parse_target


def _chain(path, n=8, size=4 * 1024 * 1024):
    """A chain of element-wise ops on a large tensor: memory bound on every modeled device."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, size], np.float32, name="x")
    h = x
    for i in range(n):
        h = ops.relu(ops.add(h, ops.constant(np.float32(i)), name=f"add{i}"), name=f"relu{i}")
    ov.save_model(ov.Model([ops.result(h, name="out")], [x], "chain"), str(path), compress_to_fp16=False)
    return lower(path)


@pytest.fixture(scope="module")
def soc(tmp_path_factory):
    m0 = _chain(tmp_path_factory.mktemp("dram") / "chain.xml")
    tgt = load_target("core-ultra-155h")
    m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt})]).run(m0)
    return tgt, m


def test_the_profile_records_the_bytes_and_the_share(soc):
    tgt, m = soc
    c = m.costs
    assert c.dram_shares == ((("CPU", "GPU", "NPU"), 119.5e9),)
    for j, d in enumerate(tgt.devices):
        assert np.array_equal(c.op_dram.numpy()[:, j], dram_bytes(m.graph, d))
    # a target without a shared bandwidth records none (virtual's shares declare no bandwidth)
    plain = parse_target('name = "t"\n[[devices]]\nname = "A"\nkind = "modeled"\npeak_flops = { f32 = 1e12 }\n'
                         'memory_bandwidth = 1e11\n', "t")
    m2 = PassManager([make_pass("support", {"target": plain}), make_pass("profile", {"target": plain})]).run(
        m.replace(support=None, costs=None))
    assert m2.costs.op_dram is None and m2.costs.dram_shares == ()
    assert build_problem(m2, plain.device_names).dram_shares == ()


def test_the_dram_term_bounds_devices_running_at_once(soc):
    tgt, m = soc
    p = build_problem(m, tgt.device_names, objective=Throughput(requests=64))
    sim = Simulator(p)
    k = p.n_groups
    one = p.single(1)
    total = float(m.costs.op_dram.numpy()[:, 1].sum())
    assert sim.dram_seconds(one) == pytest.approx(total / 119.5e9, rel=1e-9)
    # every group on one device: its own roofline at the same bandwidth is already slower than the DRAM term
    assert sim.period(one) == pytest.approx(max(sim.loads(one).max(), sim.served_latency(one) / 64))
    # split over GPU and NPU: each device's load halves, the shared DRAM's does not; the period is the DRAM's
    half = np.where(np.arange(k) < k // 2, 1, 2).astype(np.int16)
    free = Simulator(msgspec.structs.replace(p, dram_shares=()))
    assert free.period(half) < 0.85 * sim.period(half)
    assert sim.period(half) == pytest.approx(sim.dram_seconds(half), rel=1e-9)
    assert sim.dram_seconds(half) > sim.loads(half).max()
    # the batch agrees with one at a time; HETERO's sequential latency has no such term
    mats = np.stack([one, half, p.single(0), p.single(2)])
    assert np.allclose(sim.costs(mats), [sim.cost(r) for r in mats])
    assert sim.latency(half) == pytest.approx(free.latency(half))
    # the concurrent executor and the parallel what-if are bounded by it too
    con = Simulator(p.with_objective(Concurrent(launch=0.0)))
    assert con.cost(half) >= con.dram_seconds(half) - 1e-15
    assert np.allclose(con.costs(mats), [con.cost(r) for r in mats])
    assert sim.latency_parallel(half) >= sim.dram_seconds(half) - 1e-15
    assert "dram" in sim.report(half)

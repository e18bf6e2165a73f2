"""Greedy boundary refinement (assign --set refine=true)."""

import numpy as np
import pytest

from hdp.errors import InputError
from hdp.ir.types import Array, Partition
from hdp.passes.assign import colocate
from hdp.pipeline import make_pass
from hdp.placers.refine import refine
from hdp.runtime.simulate import Simulator
from test_classical import op_devices, run, with_support
from test_simulate import make_module, random_module


def test_moves_a_stranded_op_back():
    # chain P -> a -> b -> c -> R; b alone on D1 costs two copies and two extra subgraphs
    m = make_module(["Parameter", "X", "X", "X", "Result"], [(0, 1), (1, 2), (2, 3), (3, 4)],
                    [[0, 0], [1, 2], [1, 0.9], [1, 2], [0, 0]], edge_bytes=np.full(4, 1000))
    d0 = np.array([0, 0, 1, 0, 0])
    d, before, after, moves = refine(m, d0)
    assert d.tolist() == [0, 0, 0, 0, 0] and moves == 1
    assert after < before == pytest.approx(Simulator(m).latency(d0))


@pytest.mark.parametrize("seed", range(8))
def test_never_worse_and_respects_support(seed):
    rng = np.random.default_rng(seed)
    m = with_support(random_module(rng, 40, 3), rng)
    start = op_devices(run("random", m, seed=seed))
    start = colocate(m, start.astype(np.int16)).astype(np.int64)
    d, before, after, _ = refine(m, start)
    sim = Simulator(m)
    assert after <= before
    assert sim.latency(d) == pytest.approx(after)
    mask = m.support.mask.numpy()
    assert mask[np.arange(len(d)), d].all()


def test_assign_refine_option(seed=3):
    rng = np.random.default_rng(seed)
    m = with_support(random_module(rng, 30, 2), rng)
    n = m.graph.n_ops
    dev = colocate(m, op_devices(run("random", m, seed=1)).astype(np.int16))
    part = Partition("random", m.costs.devices, Array.of(np.arange(n, dtype=np.int32)), Array.of(dev))
    m = m.replace(partition=part)
    plain = make_pass("assign", {}).run(m)
    refined = make_pass("assign", {"refine": "true"}).run(m)
    sim = Simulator(m)
    assert sim.latency(refined.placement.device_of.numpy()) <= sim.latency(plain.placement.device_of.numpy())
    assert float(refined.placement.info["refine_after_s"]) <= float(refined.placement.info["refine_before_s"])
    with pytest.raises(InputError, match="needs costs"):
        make_pass("assign", {"refine": True}).run(m.replace(costs=None))

"""Greedy boundary refinement (assign --set refine=true)."""

import numpy as np
import pytest
from placement_helpers import make_module, per_group, problem, random_module
from test_classical import run, with_support

from hdp.base.errors import InputError
from hdp.ir.types import Array, Partition
from hdp.pipeline.schedule import make_pass
from hdp.placement.simulate import Simulator
from hdp.placers.refine import refine


def test_moves_a_stranded_op_back():
    # chain P -> a -> b -> c -> R; b alone on D1 costs two copies and two extra subgraphs
    m = make_module(["Parameter", "X", "X", "X", "Result"], [(0, 1), (1, 2), (2, 3), (3, 4)],
                    [[0, 0], [1, 2], [1, 0.9], [1, 2], [0, 0]], edge_bytes=np.full(4, 1000))
    p = problem(m)
    d0 = per_group(p, [0, 0, 1, 0, 0])
    d, before, after, moves = refine(p, d0)
    assert p.op_devices(d).tolist() == [0, 0, 0, 0, 0] and moves == 1
    assert after < before == pytest.approx(Simulator(p).latency(d0))


@pytest.mark.parametrize("seed", range(8))
def test_never_worse_and_respects_support(seed):
    rng = np.random.default_rng(seed)
    m = with_support(random_module(rng, 40, 3, n_ties=seed % 3), rng)
    p = problem(m)
    start = run("random", m, seed=seed).group_device
    d, before, after, moves = refine(p, start)
    sim = Simulator(p)
    assert before == pytest.approx(sim.latency(start))
    assert after <= before
    assert sim.latency(d) == pytest.approx(after)
    assert moves > 0 or after == before
    assert p.allowed[np.arange(p.n_groups), d].all()


def test_refine_improves_random_placements():
    # on random starts the greedy moves find something most of the time
    gains = []
    for seed in range(6):
        rng = np.random.default_rng(50 + seed)
        m = with_support(random_module(rng, 40, 2), rng)
        _, before, after, _ = refine(problem(m), run("random", m, seed=seed).group_device)
        gains.append(after < before)
    assert sum(gains) >= 4


def test_assign_refine_option(seed=3):
    rng = np.random.default_rng(seed)
    m = with_support(random_module(rng, 30, 2), rng)
    p = problem(m)
    gd = run("random", m, seed=1).group_device
    part = Partition("random", m.costs.devices, Array.of(p.structure.anchor, np.int32), Array.of(gd))
    m = m.replace(partition=part)
    plain = make_pass("assign", {}).run(m)
    refined = make_pass("assign", {"refine": "true"}).run(m)
    sim = Simulator(p)
    lat = [sim.latency(per_group(p, x.placement.device_of.numpy())) for x in (plain, refined)]
    assert lat[1] <= lat[0]
    assert float(refined.placement.info["refine_after_s"]) <= float(refined.placement.info["refine_before_s"])
    assert float(refined.placement.info["simulated"]) == pytest.approx(lat[1])  # figures of the final placement
    with pytest.raises(InputError, match="needs costs"):
        make_pass("assign", {"refine": True}).run(m.replace(costs=None))

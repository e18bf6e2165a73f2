"""--objective energy (joules per request, issue 32 item 5): the simulator's energy, optimal exact for
it against brute force, the watts from a target, and the bad inputs."""

from __future__ import annotations

import itertools

import msgspec
import numpy as np
import pytest
from placement_helpers import make_module, problem, random_module, random_types_and_edges

from hdp.base.errors import InputError
from hdp.ir.types import Array, Support
from hdp.pipeline.schedule import make_pass
from hdp.placement.objective import Energy, Latency
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import method_from
from hdp.target.target import energy_of, load_target, parse_target


def watts(rng, nd) -> Energy:
    idle = rng.uniform(0.0, 5.0, nd)
    return Energy(active=tuple((idle + rng.uniform(1.0, 40.0, nd)).tolist()), idle=tuple(idle.tolist()))


def with_support(m, rng, p_drop=0.2):
    n, nd = m.graph.n_ops, len(m.costs.devices)
    mask = rng.random((n, nd)) > p_drop
    st = problem(m).structure
    for g in range(st.n_groups):
        mask[st.members(g), rng.integers(0, nd)] = True
    mask[st.group_of < 0] = True
    return m.replace(support=Support(m.costs.devices, Array.of(mask)))


def small(rng, nd, ovh=0.0, replicated=False):
    """A random DAG of few enough tie groups for brute force; ``ovh``: seconds per subgraph."""
    while True:
        if replicated:
            types, edges = random_types_and_edges(rng, int(rng.integers(8, 14)), 0.3, 0.1)
            fragile = (rng.random(len(types)) < 0.35) & (np.array(types) == "X")
            m = make_module(types, edges, rng.uniform(0.5, 2.0, size=(len(types), nd)),
                            edge_bytes=rng.integers(1, 2000, len(edges)), lat=0.05, bw=1e3, ovh=ovh, fragile=fragile)
        else:
            m = random_module(rng, int(rng.integers(4, 10)), nd, p_edge=0.3, const_frac=0.15, ovh=ovh)
        if 3 <= problem(m).n_groups <= (10 if nd == 2 else 7):
            return with_support(m, rng)


def brute(p) -> float:
    """The lowest energy over every allowed device per group, from :meth:`Simulator.energy`'s terms."""
    sim = Simulator(p)
    choices = [np.nonzero(p.allowed[g])[0] for g in range(p.n_groups)]
    return min(sim.energy(np.array(c, np.int64)) for c in itertools.product(*choices))


@pytest.mark.parametrize("nd,seed,replicated", [(2, s, False) for s in range(8)] + [(3, s, False) for s in range(4)]
                         + [(2, s, True) for s in range(3)] + [(3, 10, True)])
def test_optimal_equals_brute_force_on_energy(nd, seed, replicated):
    rng = np.random.default_rng(500 + 10 * nd + seed)
    m = small(rng, nd, replicated=replicated)
    p = problem(m).with_objective(watts(rng, nd))
    got = place(method_from("optimal", {"mip_gap": 0.0}), PlaceContext(module=m, problem=p))
    sim = Simulator(p)
    assert sim.energy(got.group_device) == pytest.approx(brute(p), rel=1e-6)
    assert float(got.info["energy_j"]) == pytest.approx(sim.energy(got.group_device), rel=1e-5)
    assert float(got.info["latency_s"]) == pytest.approx(sim.latency(got.group_device), rel=1e-5)


def test_energy_is_the_weighted_latency_and_not_the_latency():
    rng = np.random.default_rng(3)
    m = small(rng, 3, ovh=0.3, replicated=True)
    ob = watts(rng, 3)
    p = problem(m).with_objective(ob)
    sim, lat = Simulator(p), Simulator(p.with_objective(Latency()))
    mats = np.array([[rng.choice(np.nonzero(p.allowed[g])[0]) for g in range(p.n_groups)] for _ in range(40)])
    e = np.array([sim.energy(row) for row in mats])
    assert np.allclose(sim.costs(mats), e, rtol=1e-9)  # the batch and the terms agree
    assert np.allclose([sim.cost(row) for row in mats], e, rtol=1e-9)
    busy = lat.compute_by_device(mats[0])
    assert e[0] == pytest.approx(sum(ob.idle) * lat.latency(mats[0]) + (np.subtract(ob.active, ob.idle) @ busy))
    # one device alone: idle watts of all for the latency, the device's extra while it computes
    j = next(j for j in range(3) if p.allowed[:, j].all()) if any(p.allowed[:, j].all() for j in range(3)) else None
    if j is not None:
        one = p.single(j)
        want = sum(ob.idle) * lat.latency(one) + (ob.active[j] - ob.idle[j]) * lat.compute_by_device(one)[j]
        assert sim.energy(one) == pytest.approx(want)
    assert "energy" in sim.report(mats[0])


def test_energy_and_latency_pick_different_devices():
    """A fast hungry device and a slow frugal one: latency takes the first, energy the second."""
    m = make_module(["Parameter", "X", "X", "Result"], [(0, 1), (1, 2), (2, 3)],
                    [[0, 0], [1.0, 3.0], [1.0, 3.0], [0, 0]], lat=0.0, bw=1e12, ovh=0.0)
    p = problem(m)
    e = Energy(active=(100.0, 10.0), idle=(1.0, 1.0))
    fast = place(method_from("optimal", {}), PlaceContext(module=m, problem=p)).group_device
    frugal = place(method_from("optimal", {}), PlaceContext(module=m, problem=p.with_objective(e))).group_device
    assert set(p.op_devices(fast)[1:3].tolist()) == {0} and set(p.op_devices(frugal)[1:3].tolist()) == {1}


def test_the_watts_come_from_the_target():
    e = energy_of(load_target("core-ultra-155h"))
    assert e.active == (28.0, 25.0, 7.0) and e.idle == (2.0, 1.0, 0.5)
    ob = make_pass("partition", {"target": load_target("core-ultra-155h"), "objective": "energy"}).objective
    assert isinstance(ob, Energy) and ob.active == ()


def test_bad_inputs_are_one_line_naming_the_field():
    base = ('name = "t"\n[[devices]]\nname = "A"\nkind = "modeled"\npeak_flops = { f32 = 1e12 }\n'
            'memory_bandwidth = 1e11\n')
    with pytest.raises(InputError, match=r"^t\.toml: invalid target: devices\[0\]\.power_active: must be a number "
                                         r"in \[0, 100000\], got -5\.0$"):
        parse_target(base + "power_active = -5.0\n", "t.toml")
    with pytest.raises(InputError, match=r"^t\.toml: devices\[0\]\.power_idle: 9 W is more than power_active \(5 W\)$"):
        parse_target(base + "power_active = 5.0\npower_idle = 9.0\n", "t.toml")
    with pytest.raises(InputError, match=r"^target 't': devices\[0\]\.power_idle: --objective energy needs each "
                                         r"device's watts \(A has none\)$"):
        energy_of(parse_target(base + "power_active = 5.0\n", "t.toml"))
    with pytest.raises(InputError, match=r"devices\[0\] \(CPU\) is a real device: --objective energy is simulated"):
        energy_of(load_target("virtual"))
    with pytest.raises(InputError, match=r"^--objective joules: must be one of latency, throughput, concurrent, energy$"):
        make_pass("partition", {"target": load_target("core-ultra-155h"), "objective": "joules"})
    with pytest.raises(ValueError, match="idle"):
        msgspec.convert({"kind": "energy", "active": [1.0], "idle": [2.0]}, Energy)


def test_a_real_target_refuses_energy_at_placing():
    rng = np.random.default_rng(0)
    m = small(rng, 2)
    p = problem(m).with_objective(Energy(active=(10.0, 10.0), idle=(1.0, 1.0)))
    with pytest.raises(InputError, match="cannot place for the energy objective here"):
        place(method_from("optimal", {}), PlaceContext(module=m, problem=p, target=load_target("virtual")))

"""cp-sat: the CP-SAT model of the concurrent executor against the simulator's price, a brute force
over every placement, bad options, and a compile through the CLI whose output runs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.placement.objective import Concurrent
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import method_from
from tests.placement_helpers import make_module, random_module
from tests.placement_helpers import problem as problem_of


def _random_problem(seed: int, n: int = 9, n_dev: int = 2, launch=0.1, handover=0.05):
    rng = np.random.default_rng(seed)
    m = random_module(rng, n, n_dev, p_edge=0.3, lat=0.05, bw=2e3, ovh=0.2)
    return m, problem_of(m).with_objective(Concurrent(launch=launch, handover=handover, request=0.01))


def _all_placements(p) -> np.ndarray:
    choices = [np.flatnonzero(p.allowed[g]) for g in range(p.n_groups)]
    return np.array(list(itertools.product(*choices)), np.int64).reshape(-1, p.n_groups)


def _cp_sat(m, p, **opts):
    o = method_from("cp-sat", {k: str(v) for k, v in opts.items()})
    return place(o, PlaceContext(module=m, problem=p))


def test_the_executor_run_of_any_placement_is_a_solution_of_the_model():
    """The model never charges more than the simulator: the executor's run of a placement (the hint),
    with every variable fixed to it, is feasible, and its makespan is the simulator's price."""
    from ortools.sat.python import cp_model

    from hdp.placers.cpsat import ConcurrentModel

    for seed in range(6):
        _, p = _random_problem(seed, n=12, n_dev=3 if seed % 2 else 2)
        sim = Simulator(p)
        rng = np.random.default_rng(seed)
        for _ in range(4):
            gd = np.array([rng.choice(np.flatnonzero(p.allowed[g])) for g in range(p.n_groups)])
            model = ConcurrentModel(p, sim.cost(gd))
            ticks = model.hint(gd)
            solver = cp_model.CpSolver()
            solver.parameters.fix_variables_to_their_hinted_value = True
            solver.parameters.num_workers = 1
            status = solver.solve(model.m)
            assert status == cp_model.OPTIMAL, (seed, gd, solver.status_name(status))
            price = sim.cost(gd) - p.objective.request
            # ticks are rounded down: within one tick per term of a path (groups, launches, edges)
            assert ticks * model.unit == pytest.approx(price, rel=1e-5)


def test_the_model_fixed_to_a_placement_schedules_its_subgraphs_no_slower_than_the_executor():
    """With the devices fixed, CP-SAT's best schedule is at most the executor's (it may reorder a
    device's subgraphs, the executor runs them earliest first)."""
    from ortools.sat.python import cp_model

    from hdp.placers.cpsat import ConcurrentModel

    for seed in range(4):
        _, p = _random_problem(seed + 10, n=12)
        sim = Simulator(p)
        rng = np.random.default_rng(seed)
        gd = np.array([rng.choice(np.flatnonzero(p.allowed[g])) for g in range(p.n_groups)])
        model = ConcurrentModel(p, sim.cost(gd))
        for g in range(p.n_groups):
            for d, v in model.x[g].items():
                model.m.add(v == int(gd[g] == d))
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.max_time_in_seconds = 20
        assert solver.solve(model.m) == cp_model.OPTIMAL
        best = p.objective.request + solver.objective_value * model.unit
        assert best <= sim.cost(gd) * (1 + 1e-9)


@pytest.mark.parametrize("seed,n_dev", [(0, 2), (1, 2), (2, 2), (3, 3), (4, 2), (5, 3)])
def test_cp_sat_finds_the_brute_force_optimum_of_the_simulator(seed, n_dev):
    """Every placement priced by the simulator: CP-SAT's bound never exceeds the best, its placement
    costs the best, and it says it proved so."""
    m, p = _random_problem(seed, n=9 if n_dev == 2 else 7, n_dev=n_dev)
    sim = Simulator(p)
    allp = _all_placements(p)
    prices = sim.costs(allp)
    brute = float(prices.min())
    r = _cp_sat(m, p, time_limit=30)
    info = r.info
    assert float(info["cp_sat_bound"]) <= brute * (1 + 1e-9)
    assert sim.cost(r.group_device) == pytest.approx(brute, rel=1e-9), (info, allp[np.argmin(prices)])
    assert info["proven_optimal"] == "yes" and info["cp_sat_status"] == "OPTIMAL"
    assert float(info["gap"]) <= 1e-5 and info["concurrent"] == pytest.approx(brute)


def test_a_placement_the_executor_runs_slower_than_cp_sat_schedules_it_is_cut_and_solved_again():
    """a feeds c (short, a leaf) and b (before f, long, on the other device); c has the lower label.
    The executor starts c first when both are ready (7 ms), CP-SAT's free order b first (5 ms). The
    devices are forced, so no placement reaches 5 ms: CP-SAT's first answer is cut by its
    simulated price and the second round proves the executor's 7 ms."""
    types = ["Parameter", "MatMul", "MatMul", "MatMul", "MatMul", "MatMul", "Result", "Result", "Result"]
    edges = [(0, 1), (1, 2), (1, 3), (1, 4), (3, 5), (2, 6), (4, 7), (5, 8)]  # a=1, c=2, b=3, e=4, f=5
    t = np.array([[0, 0], [1, 1], [2, 2], [1, 1], [0.5, 0.5], [3, 3], [0, 0], [0, 0], [0, 0]], float) * 1e-3
    sup = np.array([[1, 1], [1, 1], [1, 0], [1, 0], [0, 1], [0, 1], [1, 1], [1, 1], [1, 1]], bool)
    m = make_module(types, edges, t, lat=1e-6, bw=1e12, ovh=0.0, support=sup)
    p = problem_of(m).with_objective(Concurrent(launch=0.0, handover=0.0))
    sim = Simulator(p)
    brute = float(sim.costs(_all_placements(p)).min())
    assert brute == pytest.approx(7e-3, rel=1e-3)
    r = _cp_sat(m, p)
    assert int(r.info["rounds"]) >= 2 and int(r.info["cuts"]) >= 1
    assert sim.cost(r.group_device) == pytest.approx(brute, rel=1e-9)
    assert r.info["proven_optimal"] == "yes" and float(r.info["cp_sat_bound"]) == pytest.approx(brute, rel=1e-6)


def test_cp_sat_overlaps_two_towers_and_proves_it():
    types = ["Parameter", "MatMul", "MatMul", "MatMul", "MatMul", "MatMul", "Add", "Result"]
    edges = [(0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (3, 6), (5, 6), (6, 7)]
    t = np.array([[0, 0], [1, 1], [2, 2], [2, 2], [2, 2], [2, 2], [1, 1], [0, 0]], float) * 1e-3
    m = make_module(types, edges, t, lat=1e-6, bw=1e12, ovh=1e-5)
    p = problem_of(m).with_objective(Concurrent(launch=1e-5, handover=1e-5))
    r = _cp_sat(m, p)
    sim = Simulator(p)
    one = min(sim.cost(p.single(j)) for j in range(2))
    assert sim.cost(r.group_device) < 0.8 * one
    assert r.info["proven_optimal"] == "yes"
    assert len(set(r.group_device.tolist())) == 2


def test_memory_caps_bind_the_model():
    """With a cap that holds only half the weights on each device, the placement fits and is optimal
    among the placements that fit."""
    rng = np.random.default_rng(3)
    m = random_module(rng, 8, 2, p_edge=0.3, weights=True)
    p = problem_of(m).with_objective(Concurrent(launch=0.1, handover=0.05))
    sim = Simulator(p)
    allp = _all_placements(p)
    mem = np.array([sim.memory(g) for g in allp])
    cap = np.full(2, np.sort(mem.max(axis=1))[len(allp) // 4])
    pc = p.with_capacity(cap)
    csim = Simulator(pc)
    fits = (mem <= cap).all(axis=1)
    assert fits.any() and not fits.all()
    brute = float(csim.costs(allp[fits]).min())
    r = _cp_sat(m, pc, time_limit=30)
    assert csim.feasible(r.group_device)
    assert csim.cost(r.group_device) == pytest.approx(brute, rel=1e-9)
    assert float(r.info["cp_sat_bound"]) <= brute * (1 + 1e-9)


def test_bad_options_and_objectives_are_one_line_errors():
    for opts, what in (({"workers": "0"}, "workers"), ({"time_limit": "-1"}, "time_limit"),
                       ({"warm_start": "hsdag"}, "warm_start"), ({"speed": "1"}, "no option 'speed'")):
        with pytest.raises(InputError, match=what) as e:
            method_from("cp-sat", opts)
        assert "\n" not in str(e.value)
    m, p = _random_problem(0)
    with pytest.raises(InputError, match="method 'cp-sat' cannot place for the latency objective") as e:
        place(method_from("cp-sat"), PlaceContext(module=m, problem=p.with_objective(
            __import__("hdp.placement.objective", fromlist=["Latency"]).Latency())))
    assert "\n" not in str(e.value)


def test_hdp_compile_execution_concurrent_cp_sat_writes_a_model_that_runs(tmp_path):
    """`hdp compile --execution concurrent --method cp-sat` on virtual-2x1: the report gives CP-SAT's
    verdict, a bad --set is one line with exit 2, and the written model runs under the executor with
    the original's outputs."""
    import openvino as ov
    from click.testing import CliRunner

    from hdp.cli.main import main
    from hdp.runtime.placed.model import compile_placed
    from tests.test_concurrent import EXACT, reference, two_towers

    model = two_towers(n=32, depth=2)
    xml = tmp_path / "towers.xml"
    ov.save_model(model, str(xml), compress_to_fp16=False)
    out = tmp_path / "p.xml"
    args = ["compile", str(xml), "-o", str(out), "--target", "virtual-2x1", "--no-compare",
            "--execution", "concurrent", "--method", "cp-sat", "--cache-dir", str(tmp_path / "c")]
    r = CliRunner().invoke(main, args + ["--set", "time_limit=0"])
    assert r.exit_code == 2 and "time_limit" in r.output and not out.exists()
    assert len([x for x in r.output.splitlines() if x.strip()]) == 1, r.output
    r = CliRunner().invoke(main, args + ["--set", "time_limit=20", "--set", "workers=2", "-v"])
    assert r.exit_code == 0, r.output
    assert "cp-sat (simulated, concurrent executor):" in r.output
    assert "checked: runs concurrently (hdp's executor)" in r.output
    x = np.random.default_rng(1).standard_normal((1, 32)).astype(np.float32)
    cm = compile_placed(str(out), execution="concurrent")
    np.testing.assert_allclose(cm({0: x})[0], reference(model, {0: x})[0], **EXACT)

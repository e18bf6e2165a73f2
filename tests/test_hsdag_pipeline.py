"""hsdag inside the real pipeline: profile -> features -> coarsen -> partition -> assign, with the
Numba simulator as the reward (the learn tests use a reference evaluator)."""

import numpy as np
from click.testing import CliRunner
from placement_helpers import per_group

from hdp.cli.main import main
from hdp.ir import serde
from hdp.ir.openvino_frontend import lower
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import compile_schedule
from hdp.placement.problem import build_problem
from hdp.placement.simulate import Simulator
from hdp.target.target import load_target

SMALL = {"episodes": 3, "samples": 4, "hidden": 32, "reward": "simulate", "warm_start": "none"}


def run(xml, seed, **opts):
    t = load_target("i9-flex170")
    return PassManager(compile_schedule(t, "hsdag", seed, {**SMALL, **opts})).run(lower(xml))


def test_reproducible_for_a_seed(branchy_xml):
    a, b = run(branchy_xml, 3), run(branchy_xml, 3)
    assert np.array_equal(a.placement.device_of.numpy(), b.placement.device_of.numpy())
    assert a.placement.info["best_latency_s"] == b.placement.info["best_latency_s"]
    # same input, same bytes: no wall time in what is hashed
    assert serde.digest(a) == serde.digest(b) and "seconds" not in a.placement.info


def test_never_worse_than_single_devices_in_simulation(branchy_xml):
    m = run(branchy_xml, 0)
    sim = Simulator(build_problem(m, m.placement.devices))
    best = float(m.placement.info["best_latency_s"])
    singles = [sim.latency(sim.problem.single(j)) for j in range(len(m.placement.devices))]
    assert best <= min(singles) * (1 + 1e-5)  # info holds 6 significant digits
    assert abs(sim.latency(per_group(sim.problem, m.placement.device_of.numpy())) - best) <= 1e-5 * best


def test_warm_start_from_optimal_matches_it(branchy_xml):
    t = load_target("i9-flex170")
    opt = PassManager(compile_schedule(t, "optimal")).run(lower(branchy_xml))
    m = run(branchy_xml, 0, warm_start="optimal")
    sim = Simulator(build_problem(m, m.placement.devices))
    lat = [sim.latency(per_group(sim.problem, x.placement.device_of.numpy())) for x in (m, opt)]
    assert lat[0] <= lat[1] * 1.02


def test_one_device_target_places_everything_there(branchy_xml, tmp_path):
    r = CliRunner().invoke(main, ["compile", str(branchy_xml), "-o", str(tmp_path / "p.xml"), "--devices", "CPU",
                                  "--method", "hsdag", "--no-cache", "--no-compare", "-v"])
    assert r.exit_code == 0, r.output
    assert "one device (CPU): every op on it" in r.output


def test_compile_cli_with_hsdag_on_modeled_target(branchy_xml, tmp_path):
    args = ["compile", str(branchy_xml), "-o", str(tmp_path / "p.xml"), "--target", "i9-flex170",
            "--method", "hsdag", "--no-cache", "--budget", "30", "-v"] + [f"--set={k}={v}" for k, v in SMALL.items()]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "hsdag (simulate reward): kept" in r.output
    assert "simulated: this placement" in r.output and "best single device" in r.output and "lower bound" in r.output
    assert "budget" in next(x for x in r.output.splitlines() if x.startswith("time: ") and "placement" in x)

"""Objectives and device memory: the simulator's throughput and memory against hand-computed
figures, ``optimal`` against brute force under caps and for throughput, and the refusals."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from placement_helpers import make_module, problem, random_module

from hdp.base.errors import InputError
from hdp.placement.objective import Latency, Throughput
from hdp.placement.simulate import Simulator
from hdp.placers import PlaceContext, place
from hdp.placers.options import Heft, HeteroAuto, Hsdag, Optimal, Random, Single


def two_op_module(**kw):
    # P -> a -> b -> R; constant C1 read by a only, C2 by a and b
    types = ["Parameter", "Constant", "Constant", "X", "X", "Result"]
    edges = [(0, 3), (1, 3), (2, 3), (2, 4), (3, 4), (4, 5)]
    t = [[0, 0], [0, 0], [0, 0], [1, 2], [3, 1], [0, 0]]
    return make_module(types, edges, t, edge_bytes=[10, 100, 200, 200, 20, 30], weights={1: 100, 2: 200},
                       lat=0.01, bw=1e3, ovh=0.0, **kw)


def test_memory_counts_shared_constants_once_per_device_and_the_largest_activation():
    p = problem(two_op_module())
    sim = Simulator(p)
    # group 0 = {P, a}: a reads P (10) and writes 20: 30 live; group 1 = {b, R}: reads 20, writes 30
    assert p.needs.activation.tolist() == [30, 50]
    assert sim.memory([0, 0]).tolist() == [100 + 200 + 50, 0]
    # split: C2 is on both devices, C1 with a only
    assert sim.memory([0, 1]).tolist() == [100 + 200 + 30, 200 + 50]
    assert sim.memory([1, 0]).tolist() == [200 + 50, 100 + 200 + 30]


def test_throughput_period_is_the_busiest_device_or_the_latency_over_requests():
    p = problem(two_op_module()).with_objective(Throughput(requests=2))
    sim = Simulator(p)
    copy = 0.01 + 20 / 1e3  # the a -> b tensor
    lat = 1 + 1 + copy
    assert sim.latency([0, 1]) == pytest.approx(lat)
    # HETERO's rule: the receiving device pays the copy
    assert sim.loads([0, 1]).tolist() == pytest.approx([1, 1 + copy])
    assert sim.cost([0, 1]) == pytest.approx(max(lat / 2, 1 + copy))
    assert sim.cost([0, 0]) == pytest.approx(4)  # one device runs every stage of every request
    one = Simulator(problem(two_op_module()).with_objective(Throughput(requests=1)))
    assert one.cost([0, 1]) == pytest.approx(lat)  # one request in flight: nothing overlaps
    assert one.costs(np.array([[0, 1], [0, 0]])).tolist() == pytest.approx([lat, 4])


def test_the_peer_rule_is_a_parameter_sender_and_receiver_pay_a_free_device_pays_none():
    base = problem(two_op_module())
    copy = 0.01 + 20 / 1e3
    peer = Simulator(base.with_objective(Throughput(requests=4, send=1, receive=1)))
    assert peer.loads([0, 1]).tolist() == pytest.approx([1 + copy, 1 + copy])
    free = Simulator(base.with_objective(Throughput(requests=4, send=1, receive=1, free_comm=("D0",))))
    assert free.loads([0, 1]).tolist() == pytest.approx([1, 1 + copy])
    assert free.loads([1, 0]).tolist() == pytest.approx([3, 2 + copy])


def brute(p, sim):
    """The lowest objective over every allowed placement that fits (None when none does)."""
    best = None
    for gd in itertools.product(range(p.n_devices), repeat=p.n_groups):
        gd = np.array(gd)
        if not p.allowed[np.arange(p.n_groups), gd].all() or not sim.feasible(gd):
            continue
        c = sim.cost(gd)
        if best is None or c < best:
            best = c
    return best


def optimal_matches_brute(p, m):
    """``optimal`` on ``p`` equals the brute force, placing within the caps (or, when nothing fits,
    both refuse); its placement, or None."""
    sim = Simulator(p)
    want = brute(p, sim)
    if want is None:
        with pytest.raises(InputError, match="memory|fit"):
            place(Optimal(boundary_penalty=0.0, margin=0.0), ctx_of(p, m))
        return None
    got = place(Optimal(boundary_penalty=0.0, margin=0.0, mip_gap=1e-9), ctx_of(p, m)).group_device
    assert sim.feasible(got)
    assert sim.cost(got) == pytest.approx(want, rel=1e-7), p.objective
    return got


def ctx_of(p, module=None):
    return PlaceContext(module=module, problem=p)


@pytest.mark.parametrize("seed", range(12))
def test_optimal_equals_brute_force_under_caps_and_for_throughput(seed):
    rng = np.random.default_rng(seed)
    n_dev = 2 + seed % 2
    m = random_module(rng, 9, n_dev, n_ties=1, ovh=0.0, const_frac=0.25, weights=True)
    p0 = problem(m)
    total = Simulator(p0).memory(p0.single(0)).sum()
    caps = rng.uniform(0.35, 0.8, n_dev) * total  # no device holds everything
    thr = Throughput(requests=int(rng.integers(1, 5)), send=float(seed % 3 == 0), free_comm=("D1",) if seed % 4 == 1 else ())
    for obj in (Latency(), thr):
        optimal_matches_brute(p0.with_objective(obj).with_capacity(caps), m)


def test_optimal_leaves_a_tenth_of_its_time_limit_for_what_follows_the_program(monkeypatch):
    """``time_limit`` bounds the placement: the MILP (and the ILP) get 90 % of it, HETERO's state
    rule and the report the rest (on llama-32l they ran 1-7 s past a program given the whole limit)."""
    import hdp.placers.classical as classical

    rng = np.random.default_rng(3)
    m = random_module(rng, 9, 3, n_ties=1, ovh=0.0, const_frac=0.25, weights=True)
    p0 = problem(m)
    given = []
    real_milp, real_ilp = classical.solve_constrained, classical._ilp
    monkeypatch.setattr(classical, "solve_constrained", lambda p, pen, limit, gap: given.append(limit) or real_milp(p, pen, limit, gap))
    monkeypatch.setattr(classical, "_ilp", lambda mod, limit, gap: given.append(limit) or real_ilp(mod, limit, gap))
    place(Optimal(time_limit=20.0, margin=0.0), ctx_of(p0.with_objective(Throughput(requests=2)), m))
    place(Optimal(time_limit=20.0, margin=0.0, solver="ilp"), ctx_of(p0, m))
    assert given == [pytest.approx(18.0), pytest.approx(18.0)]


@pytest.mark.parametrize("seed", range(6))
def test_heft_and_random_respect_caps_or_refuse_naming_the_device(seed):
    rng = np.random.default_rng(100 + seed)
    m = random_module(rng, 12, 2, const_frac=0.3, weights=True)
    p0 = problem(m)
    total = Simulator(p0).memory(p0.single(0)).sum()
    p = p0.with_capacity([0.7 * total, 0.7 * total])
    sim = Simulator(p)
    for method in (Heft(), Random()):
        try:
            gd = place(method, PlaceContext(module=m, problem=p, seed=seed)).group_device
        except InputError as e:
            assert "D0" in str(e) and "D1" in str(e) or "needs" in str(e)
            assert "\n" not in str(e)
            continue
        assert sim.feasible(gd)


def test_single_device_over_its_memory_is_a_one_line_error_naming_device_and_bytes():
    m = two_op_module()
    p = problem(m).with_capacity([200, np.inf])
    with pytest.raises(InputError, match=r"single:D0: its placement needs 350 bytes on D0, over its memory of 200 bytes"):
        place(Single(device="D0"), PlaceContext(module=m, problem=p))
    with pytest.raises(InputError, match="on D0"):
        place(HeteroAuto(), PlaceContext(module=m, problem=p))
    # optimal finds the placement that fits
    gd = place(Optimal(margin=0.0), PlaceContext(module=m, problem=p)).group_device
    assert Simulator(p).feasible(gd)


def test_a_model_that_fits_no_device_names_every_cap_and_its_smallest_need():
    m = two_op_module()
    p = problem(m).with_capacity([100, 120])
    with pytest.raises(InputError) as e:
        place(Optimal(), PlaceContext(module=m, problem=p))
    msg = str(e.value)
    assert "D0 100 bytes" in msg and "D1 120 bytes" in msg and "\n" not in msg


def test_a_method_refuses_an_objective_it_does_not_serve():
    m = two_op_module()
    p = problem(m).with_objective(Throughput(requests=2))
    with pytest.raises(InputError, match="method 'hsdag:measure' cannot place for the throughput objective"):
        place(Hsdag(reward="measure"), PlaceContext(module=m, problem=p))


def test_throughput_optimum_splits_where_latency_keeps_one_device():
    # two equal halves: one device is latency-optimal (no copy); with requests in flight the
    # split halves the period
    types = ["Parameter", "X", "X", "Result"]
    m = make_module(types, [(0, 1), (1, 2), (2, 3)], [[0, 0], [1, 1], [1, 1], [0, 0]], lat=0.01, bw=1e6, ovh=0.0)
    p = problem(m)
    lat = place(Optimal(margin=0.0), PlaceContext(module=m, problem=p)).group_device
    assert np.unique(lat).size == 1
    pt = p.with_objective(Throughput(requests=2))
    thr = place(Optimal(margin=0.0), PlaceContext(module=m, problem=pt)).group_device
    assert np.unique(thr).size == 2
    assert Simulator(pt).cost(thr) == pytest.approx(1.01, rel=1e-3)


def test_target_memory_accepts_sizes_and_names_the_field_when_bad():
    from hdp.target.capacity import capacities, parse_overrides
    from hdp.target.target import load_target, parse_target

    t = load_target("dual-gpu")
    assert capacities(t).tolist() == [64 * 2**30, 16 * 2**30, 16 * 2**30]
    assert capacities(t, parse_overrides(["GPU.1=512MiB"])).tolist()[2] == 512 * 2**20
    assert capacities(load_target("i9-flex170")).tolist() == [32 * 2**30, 16 * 2**30]
    toml = 'name = "t"\n[[devices]]\nname = "A"\nkind = "real"\nmemory = {}\n'
    assert parse_target(toml.format(1024)).devices[0].memory_bytes == 1024
    for bad, field in (('"lots"', "devices[0].memory"), ("-5", "devices[0].memory"), ('"-1GiB"', "devices[0].memory")):
        with pytest.raises(InputError, match=field.replace("[", r"\[").replace("]", r"\]")) as e:
            parse_target(toml.format(bad))
        assert "\n" not in str(e.value)
    for spec in ("GPU", "GPU.0=big", "=1G"):
        with pytest.raises(InputError, match="--memory"):
            parse_overrides([spec])
    with pytest.raises(InputError, match="no device 'NPU'"):
        capacities(t, parse_overrides(["NPU=1G"]))
    # a real CPU holds what the host has available now
    assert 0 < capacities(load_target("virtual"))[0] < float("inf")


def test_partition_options_build_the_objective_and_refuse_bad_values():
    from hdp.passes.partition import PartitionPass
    from hdp.pipeline.schedule import make_pass
    from hdp.target.target import load_target

    t = load_target("i9-flex170")
    p = make_pass("partition", {"target": t, "method": "optimal", "objective": "throughput", "requests": "4",
                                "memory": "GPU=1GiB", "context": "2048"})
    assert isinstance(p, PartitionPass)
    assert p.objective == Throughput(requests=4) and p.memory == (("GPU", 2**30),) and p.context == 2048
    # a request count alone says throughput (issue 33); typed values from flags are taken as they are
    assert make_pass("partition", {"target": t, "requests": "3"}).objective == Throughput(requests=3)
    assert make_pass("partition", {"target": t, "requests": 3, "memory": (("GPU", 5),)}).memory == (("GPU", 5),)
    for opts, msg in (({"objective": "speed"}, "--objective speed"),
                      ({"objective": "throughput", "requests": "0"},
                       r"option 'requests' must be an integer in \[1, 4096\], got 0"),
                      ({"objective": "latency", "requests": "2"}, "--requests 2: .* not with --objective latency"),
                      ({"requests": str(10**20)}, r"option 'requests' must be an integer in \[1, 4096\]"),
                      ({"context": "-1"}, r"option 'context' must be an integer in \[0, 16777216\], got -1"),
                      ({"memory": "GPU=x"}, "--memory GPU=x"), ({"memory": "GPU=" + "9" * 400}, "over the largest size"),
                      ({"seed": str(2**70)}, r"option 'seed' must be an integer in \[0, 4294967295\]")):
        with pytest.raises(InputError, match=msg):
            make_pass("partition", {"target": t, **opts})


def build_tower(layers=6, width=32):
    """A chain of MatMul layers with f32 weights (width x width each)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(3)
    h = ops.parameter([1, width], np.float32, name="x")
    x = h
    for i in range(layers):
        w = ops.constant(rng.standard_normal((width, width)).astype(np.float32), name=f"w{i}")
        x = ops.relu(ops.matmul(x, w, False, False, name=f"mm{i}"), name=f"act{i}")
    return ov.Model([ops.result(x, name="y")], [h], "tower")


@pytest.mark.parametrize("method", ["optimal", "heft", "auto"])
def test_compile_under_a_memory_cap_writes_a_model_whose_devices_hold_their_weights(tmp_path, method):
    from click.testing import CliRunner
    from conftest import _save

    from hdp.cli.main import main
    from hdp.runtime.placed.model import read_placed, weight_bytes_by_device

    xml = _save(build_tower(), tmp_path / "tower.xml")
    from hdp.target.capacity import MEMORY_MODELS

    layer = 32 * 32 * 4
    # the GPU holds two layers' weights (and their activations), the CPU four (the CPU plugin: its
    # overhead, and each weight as stored and again at f32): the model must split
    cap = {"GPU": int(2.5 * layer), "CPU": int(MEMORY_MODELS["CPU"][0] + 9 * layer)}
    out = tmp_path / "p.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "i9-flex170", "--method", method,
                                  "--memory", f"GPU={cap['GPU']}", "--memory", f"CPU={cap['CPU']}",
                                  "--objective", "throughput", "--requests", "2", "--no-cache"])
    assert r.exit_code == 0, r.output
    held = weight_bytes_by_device(read_placed(out))
    assert held["GPU"] <= cap["GPU"] and held["CPU"] <= cap["CPU"] and held["GPU"] + held["CPU"] == 6 * layer
    assert "memory (estimated)" in r.output and "requests in flight" in r.output
    from hdp.cli.show import show

    assert f"GPU: {held['GPU'] / 1024:.1f} KiB;" in show(str(out))  # the stored weights as written, per device


def test_compile_refuses_a_model_that_fits_no_device(tmp_path):
    from click.testing import CliRunner
    from conftest import _save

    from hdp.cli.main import main

    xml = _save(build_tower(), tmp_path / "tower.xml")
    out = tmp_path / "p.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "i9-flex170", "--method", "optimal",
                                  "--memory", "GPU=8KiB", "--memory", "CPU=8KiB", "--no-cache"])
    assert r.exit_code == 2 and not out.exists()
    assert "the model does not fit" in r.output and "CPU 8.0 KiB" in r.output and "GPU 8.0 KiB" in r.output
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "i9-flex170",
                                  "--objective", "throughput", "--requests", "0", "--no-cache"])
    assert r.exit_code == 2 and "--requests: must be an integer in [1, 4096], got 0" in r.output


@pytest.mark.slow
def test_evaluate_throughput_runs_requests_in_flight_beside_the_simulated_figure(tmp_path):
    """hdp evaluate --objective throughput: the placed model and the plain compile,
    each with windows of inferences in flight, and the throughput simulated when it was placed."""
    import json

    from click.testing import CliRunner
    from conftest import _save

    from hdp.cli.main import main

    xml = _save(build_tower(), tmp_path / "tower.xml")
    out = tmp_path / "p.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "virtual-2x1", "--method",
                                  "optimal", "--objective", "throughput", "--requests", "2", "--no-cache", "-v"])
    assert r.exit_code == 0, r.output
    # compile's final comparison is the objective's: served beside the plain compile's own streams and
    # beside this host's default plain compile with the throughput hint, whose verdict is the one
    assert "served with 2 requests in flight beside the plain CPU" in r.output, r.output
    assert "placed vs plain CPU (windows side by side, time per request): " in r.output
    assert "placed vs default CPU (windows side by side, time per request): " in r.output
    assert "verdict: " in r.output and "default plain CPU compile (" in r.output.split("verdict: ")[1]
    assert sum(x.startswith("verdict: ") for x in r.output.splitlines()) == 1 and "placement vs plain" not in r.output
    r = CliRunner().invoke(main, ["evaluate", str(out), "--objective", "throughput", "--requests", "2", "--runs", "3",
                                  "--plain", "CPU", "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output[r.output.index("{"):])
    for k in ("placed", "plain"):
        assert len(res[k]["rates"]) == 6 and all(x > 0 for x in res[k]["rates"]) and res[k]["requests"] == 2
        est, lo, hi = res[k]["estimate"]
        assert lo <= est <= hi
    assert res["placed"]["what"].startswith("HETERO:") and res["simulated_per_second"] > 0
    # the two ran window beside window: one paired verdict, placed over plain per inference
    v = res["placed_vs_plain"]
    assert v["rounds"] == 6 and v["verdict"] in ("faster", "slower", "equal") and v["low"] <= v["ratio"] <= v["high"]
    assert res["placed"]["pinning"] == "unpinned"
    # the plain compile priced too: two streams of the one-thread CPU, from the singles recorded when placed
    from hdp.runtime.placed.model import model_info, read_placed

    singles = dict(x.split("=") for x in model_info(read_placed(out).model, "sim_singles").split(","))
    assert set(singles) == {"CPU", "CPU_B"}
    assert res["simulated_plain_per_second"] == pytest.approx(min(2, os.cpu_count()) / float(singles["CPU"]))
    r = CliRunner().invoke(main, ["evaluate", str(out), "--objective", "throughput", "--requests", "2", "--runs", "3",
                                  "--plain", "CPU"])
    assert r.exit_code == 0 and "both measured side by side" in r.output, r.output
    assert r.output.strip().splitlines()[-1].startswith("verdict: ")
    r = CliRunner().invoke(main, ["evaluate", str(out), "--objective", "throughput", "--requests", "0"])
    assert r.exit_code == 2 and "--requests: must be an integer in [1, 4096], got 0" in r.output


@pytest.mark.slow
def test_serving_beside_the_plain_compile_leaves_the_worker_usable(tmp_path):
    """On virtual-2x1 (two pinned one-thread CPU instances) a pipeline is served unpinned (the
    plugin would pin every instance to the same core), window beside window with the plain
    compile; a second serve in the same worker still compiles (no cores left reserved)."""
    from conftest import _save

    from hdp.ir.openvino_frontend import lower
    from hdp.runtime.measure.measurer import Measurer

    xml = _save(build_tower(layers=6, width=64), tmp_path / "tower.xml")
    module = lower(str(xml))

    def device_of(stages):
        out = []
        for op in module.graph.ops:
            digits = "".join(ch for ch in op.name if ch.isdigit())
            i = int(digits) if op.name[:1] in "mwa" and digits else (0 if op.name == "x" else 5)
            out.append(stages[min(i * len(stages) // 6, len(stages) - 1)])
        return out

    with Measurer(module, "virtual-2x1", runs=1, warmup=1, cache=False) as m:
        for stages, pinning in ((["CPU", "CPU_B"], "unpinned"), (["CPU", "CPU_B", "CPU"], "unpinned")):
            placed, plain = m.serve_beside(device_of(stages), None, "CPU", {"NUM_STREAMS": "2"}, requests=2,
                                           batches=4, per_batch=8)
            assert placed.ok and plain.ok, (placed.error, plain.error)
            assert placed.submodels == len(stages) and placed.pinning == pinning
            assert len(placed.rates) == len(plain.rates) == 4 and plain.pinning == ""


def test_pipeline_parallel_fills_devices_in_priority_order_by_1_2_times_their_constants():
    from hdp.placers.options import PipelineParallel

    # P -> x1 .. x6 -> R, each x reading its own 1000-byte constant
    types = ["Parameter"] + ["Constant", "X"] * 6 + ["Result"]
    edges, prev = [], 0
    for i in range(6):
        c, x = 1 + 2 * i, 2 + 2 * i
        edges += [(prev, x), (c, x)]
        prev = x
    edges.append((prev, 13))
    t = np.ones((14, 2))
    m = make_module(types, edges, t, edge_bytes=[4] * len(edges), weights={1 + 2 * i: 1000 for i in range(6)})
    p = problem(m).with_capacity([2500, np.inf])
    gd = place(PipelineParallel(), PlaceContext(module=m, problem=p)).group_device
    per_op = p.op_devices(gd)
    assert [int(per_op[2 + 2 * i]) for i in range(6)] == [0, 0, 1, 1, 1, 1]  # 2 x 1.2 kB fit D0's 2.5 kB, 3 do not
    gd = place(PipelineParallel(priority=("D1", "D0")), PlaceContext(module=m, problem=p)).group_device
    assert set(gd.tolist()) == {1}  # D1 is unlimited: everything stays there


# --------------------------------------------------------------- device memory models (issue 18)

def test_a_device_memory_model_adds_its_overhead_and_a_copy_at_its_precision_where_it_runs():
    from hdp.placement.memory import DeviceMemory

    # D0 like the CPU plugin: 1000 bytes of its own and each f32 weight again at f32; D1 computes in
    # f16 with one copy: each weight again at half its stored size; a device that runs nothing needs nothing
    dm = DeviceMemory(overhead=np.array([1000.0, 0.0]), copies=np.array([1.0, 1.0]),
                      precision_bytes=np.array([4.0, 2.0]))
    p = problem(two_op_module()).with_device_memory(dm)
    sim = Simulator(p)
    assert sim.memory([0, 0]).tolist() == [1000 + 2 * (100 + 200) + 50, 0]
    assert sim.memory([0, 1]).tolist() == [1000 + 2 * (100 + 200) + 30, 1.5 * 200 + 50]
    assert sim.memory([1, 1]).tolist() == [0, 1.5 * 300 + 50]


def test_compressed_weights_are_copied_as_stored_and_the_others_at_the_compute_precision():
    from hdp.ir.build import graph_from_edges
    from hdp.ir.types import Op
    from hdp.placement.memory import memory_needs
    from hdp.placement.structure import build_structure

    # P -> mm -> conv -> R; mm reads a u8 weight (through Convert) and an f16 one; conv an f16 one
    ops = [Op("p", "Parameter", ((1,),), ("f32",)), Op("w", "Constant", ((8,),), ("u8",), weight_bytes=8),
           Op("cv", "Convert", ((8,),), ("f32",)), Op("h", "Constant", ((4,),), ("f16",), weight_bytes=8),
           Op("mm", "MatMul", ((1,),), ("f32",)), Op("k", "Constant", ((4,),), ("f16",), weight_bytes=8),
           Op("kc", "Convert", ((4,),), ("f32",)), Op("conv", "Convolution", ((1,),), ("f32",)),
           Op("r", "Result", ((1,),), ("f32",))]
    edges = [(0, 4), (1, 2), (2, 4), (3, 4), (4, 7), (5, 6), (6, 7), (7, 8)]
    e = np.array(edges)
    g = graph_from_edges(ops, e[:, 0], e[:, 1], np.ones(len(e), np.int64))
    needs = memory_needs(g, build_structure(g))
    assert needs.total_weights == 24
    # the MatMul keeps its u8 and f16 weights compressed (16 bytes); the convolution's 4 f16 elements
    # are converted to the compute precision
    assert needs.w_other.sum() + needs.u_other.sum() == 16 and needs.w_float.sum() + needs.u_float.sum() == 4


@pytest.mark.parametrize("seed", range(6))
def test_optimal_in_stages_equals_brute_force_under_device_memory_models(seed, monkeypatch):
    """The coarse stages (clusters, then the groups near their cuts) forced on small problems, with
    an overhead and a weight copy per device: the answer is still the optimum."""
    import hdp.placers.constrained as C
    from hdp.placement.memory import DeviceMemory

    monkeypatch.setattr(C, "COARSE_ABOVE", 0)
    monkeypatch.setattr(C, "clusters", lambda p, target: np.arange(p.n_groups) // 2)  # pairs: a real coarse stage
    rng = np.random.default_rng(40 + seed)
    m = random_module(rng, 9, 3, n_ties=1, ovh=0.0, const_frac=0.25, weights=True)
    dm = DeviceMemory(overhead=rng.uniform(0, 500, 3), copies=rng.integers(0, 2, 3).astype(float),
                      precision_bytes=np.array([4.0, 2.0, 2.0]))
    p0 = problem(m).with_device_memory(dm)
    total = Simulator(p0).memory(p0.single(0)).sum()
    caps = rng.uniform(0.4, 0.9, 3) * total
    for obj in (Latency(), Throughput(requests=2)):
        p = p0.with_objective(obj).with_capacity(caps)
        sim = Simulator(p)
        got = optimal_matches_brute(p, m)
        if got is None:
            continue
        try:
            gd = place(Heft(), ctx_of(p, m)).group_device
        except InputError as e:
            assert "heft" in str(e) and "\n" not in str(e)
        else:
            assert sim.feasible(gd)


@pytest.mark.parametrize("seed", range(4))
def test_the_program_over_clusters_is_the_optimum_of_placements_that_keep_each_cluster_together(seed):
    import hdp.placers.constrained as C

    rng = np.random.default_rng(60 + seed)
    m = random_module(rng, 10, 3, ovh=0.0, const_frac=0.25, weights=True)
    p0 = problem(m)
    total = Simulator(p0).memory(p0.single(0)).sum()
    cluster = rng.integers(0, max(2, p0.n_groups // 2), p0.n_groups)
    cluster = np.unique(cluster, return_inverse=True)[1].reshape(-1)
    for obj in (Latency(), Throughput(requests=3)):
        p = p0.with_objective(obj).with_capacity(rng.uniform(0.5, 1.0, 3) * total)
        sim = Simulator(p)
        best = None
        for cd in itertools.product(range(3), repeat=int(cluster.max()) + 1):
            gd = np.array(cd)[cluster]
            if p.allowed[np.arange(p.n_groups), gd].all() and sim.feasible(gd):
                best = sim.cost(gd) if best is None else min(best, sim.cost(gd))
        gd, res = C._program(p, 0.0).run(30, 1e-9, cluster=cluster)
        if best is None:
            assert gd is None
            continue
        assert len({(c, d) for c, d in zip(cluster, gd)}) == int(cluster.max()) + 1  # one device per cluster
        assert sim.feasible(gd) and sim.cost(gd) == pytest.approx(best, rel=1e-7)


def test_a_device_whose_overhead_exceeds_its_memory_runs_nothing():
    from hdp.placement.memory import DeviceMemory

    m = two_op_module()
    p = problem(m).with_device_memory(DeviceMemory(np.array([10_000.0, 0.0]), np.zeros(2), np.full(2, 4.0)))
    p = p.with_capacity([5_000, 1_000])
    for method in (Optimal(margin=0.0), Heft()):
        gd = place(method, PlaceContext(module=m, problem=p)).group_device
        assert set(gd.tolist()) == {1}
    with pytest.raises(InputError, match="no device can hold"):
        place(Optimal(), PlaceContext(module=m, problem=p.with_capacity([5_000, 100])))


def test_targets_give_each_device_its_kinds_memory_model_or_their_own():
    from hdp.target.capacity import MEMORY_MODELS, device_memory
    from hdp.target.target import load_target, parse_target

    dm = device_memory(load_target("virtual"))  # two real CPU plugin instances, f32 and bf16
    assert dm.overhead.tolist() == [MEMORY_MODELS["CPU"][0]] * 2 and dm.copies.tolist() == [1.0, 1.0]
    assert dm.precision_bytes.tolist() == [4.0, 2.0]
    dm = device_memory(load_target("i9-flex170"))  # a modeled CPU (f32) and a GPU (f16, none measured)
    assert dm.copies.tolist() == [1.0, 0.0] and dm.overhead[1] == 0 and dm.precision_bytes.tolist() == [4.0, 2.0]
    toml = ('name = "t"\n[[devices]]\nname = "GPU"\nkind = "real"\nmemory_overhead = {}\nweight_copies = {}\n'
            'config = {{ INFERENCE_PRECISION_HINT = "f16" }}\n')
    dm = device_memory(parse_target(toml.format('"300MiB"', 1)))
    assert dm.overhead.tolist() == [300 * 2**20] and dm.copies.tolist() == [1.0] and dm.precision_bytes.tolist() == [2.0]
    for bad, field in (('"lots"', "memory_overhead"), ("-1", "memory_overhead")):
        with pytest.raises(InputError, match=rf"devices\[0\]\.{field}"):
            parse_target(toml.format(bad, 1))
    with pytest.raises(InputError, match=r"devices\[0\]\.weight_copies"):
        parse_target(toml.format(0, -1))


def test_memory_overrides_are_recorded_in_the_placed_model_and_read_back(tmp_path):
    from click.testing import CliRunner
    from conftest import _save

    from hdp.cli.main import main
    from hdp.cli.show import placed_memory, show
    from hdp.runtime.placed.model import read_placed

    xml = _save(build_tower(), tmp_path / "tower.xml")
    out = tmp_path / "p.xml"
    cap = int(2.5 * 32 * 32 * 4)
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "i9-flex170", "--method", "heft",
                                  "--memory", f"GPU={cap}", "--no-cache"])
    assert r.exit_code == 0, r.output
    pm = read_placed(out)
    assert pm.memory == (("GPU", cap),)
    assert pm.capacities().tolist() == [32 * 2**30, cap]  # the CPU's from the target, the GPU's as given
    assert "GPU: " in show(str(out)) and "of 10.0 KiB" not in show(str(out)) and "10.0 KiB" in show(str(out))
    line, rows = placed_memory(out)
    assert rows[1]["device"] == "GPU" and rows[1]["capacity"] == cap and rows[1]["estimate"] <= cap
    # without --memory nothing is recorded and the target's caps are read back
    out2 = tmp_path / "q.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out2), "--target", "i9-flex170", "--method", "heft",
                                  "--no-cache"])
    assert r.exit_code == 0, r.output
    assert read_placed(out2).memory == () and read_placed(out2).capacities().tolist() == [32 * 2**30, 16 * 2**30]


def test_a_fallback_to_one_device_keeps_within_its_memory(tmp_path):
    """A placement that fails its check falls back to the fastest single device whose memory holds
    the whole model (not the fastest one), and is refused in one line when none does."""
    from conftest import _save

    from hdp.ir.openvino_frontend import lower
    from hdp.passes.manager import PassManager
    from hdp.pipeline.schedule import make_pass
    from hdp.runtime.serve.verify import CheckResult, verify_and_repair
    from hdp.target.target import load_target

    class FailsSplits:  # every split fails, every single device passes
        def check_module(self, module):
            return CheckResult(passed=np.unique(module.placement.device_of.numpy()).size == 1, error="scripted")

        def check(self, op_devices, devices):
            return CheckResult(passed=np.unique(op_devices).size == 1, error="scripted")

    from hdp.target.capacity import MEMORY_MODELS

    xml = _save(build_tower(), tmp_path / "tower.xml")
    tgt = load_target("i9-flex170")  # on this tiny model the CPU is the fastest single device
    layer = 32 * 32 * 4
    cpu = f"CPU={int(MEMORY_MODELS['CPU'][0] + 10 * layer)}"  # five layers of six (stored and at f32)
    goal = {"target": tgt, "method": "optimal", "objective": "throughput"}
    m = PassManager([make_pass("support", {"target": tgt}), make_pass("profile", {"target": tgt}),
                     make_pass("partition", {**goal, "memory": cpu}), make_pass("assign", {})]).run(lower(xml))
    assert np.unique(m.placement.device_of.numpy()).size == 2
    v = verify_and_repair(m, tgt, replace=lambda mod, ties: mod, checker=FailsSplits(), rounds=0)
    assert v.fallback == "GPU"
    m2 = PassManager([make_pass("partition", {**goal, "memory": f"{cpu},GPU={int(2.5 * layer)}"}),
                      make_pass("assign", {})]).run(m)
    with pytest.raises(InputError, match="no single device of .* holds the whole model within its memory") as e:
        verify_and_repair(m2, tgt, replace=lambda mod, ties: mod, checker=FailsSplits(), rounds=0)
    assert "\n" not in str(e.value)


def test_auto_tries_two_stage_pipelines_for_throughput():
    """Under the throughput objective auto's candidates include, per ordered device pair, the best
    cut of the groups' topological order: two HETERO submodels, devices allowed, memory fitting."""
    import msgspec

    from hdp.placers.pipelines import pipeline_candidates

    types = ["Parameter"] + ["MatMul"] * 6 + ["Result"]
    edges = [(i, i + 1) for i in range(7)]
    t = np.array([[0, 0]] + [[1, 1]] * 6 + [[0, 0]], float) * 1e-3
    p = problem(make_module(types, edges, t, lat=1e-6, bw=1e12, ovh=1e-5)).with_objective(Throughput(requests=2))
    sim = Simulator(p)
    got = pipeline_candidates(p, sim)
    assert [n for n, _, _ in got] == ["pipeline:D0>D1", "pipeline:D1>D0"]
    for _, gd, single in got:
        assert not single and sim.terms(gd)[2] == 2  # two submodels
        order = np.asarray(gd)
        assert (np.diff(order[sim.counted]) != 0).sum() == 1  # one cut in topological order
        assert sim.cost(gd) == pytest.approx(3e-3, rel=0.05)  # three layers per stage
    # a device that cannot run the second half: no pipeline starting on it
    allowed = p.allowed.copy()
    allowed[5:, 1] = False
    q = msgspec.structs.replace(p, allowed=allowed)
    assert [n for n, _, _ in pipeline_candidates(q, Simulator(q))] == ["pipeline:D1>D0"]


def test_evaluate_refuses_requests_against_latency_and_throughput_with_the_executor(tmp_path):
    """--requests means throughput (issue 33); said against --objective latency or with the concurrent
    executor it is a contradiction, refused in one line as compile refuses it."""
    from click.testing import CliRunner
    from conftest import _save

    from hdp.cli.main import main

    xml = _save(build_tower(), tmp_path / "tower.xml")
    r = CliRunner().invoke(main, ["evaluate", str(xml), "--objective", "latency", "--requests", "3"])
    assert r.exit_code == 2 and "--requests 3: " in r.output and "not with --objective latency" in r.output
    r = CliRunner().invoke(main, ["evaluate", str(xml), "--requests", "3", "--execution", "concurrent"])
    assert r.exit_code == 2 and "not with --execution concurrent" in r.output
    r = CliRunner().invoke(main, ["evaluate", str(xml), "--execution", "concurrent", "--objective", "throughput"])
    assert r.exit_code == 2 and "not with --execution concurrent" in r.output
    assert "Traceback" not in r.output


def test_calibrate_takes_devices_instead_of_the_default_target(tmp_path):
    """--devices alone is a target (the default --target virtual only applies without it)."""
    from click.testing import CliRunner

    from hdp.cli.main import main

    r = CliRunner().invoke(main, ["calibrate", str(tmp_path / "missing.xml"), "--devices", "CPU"])
    assert r.exit_code == 2 and "not both" not in r.output and "Traceback" not in r.output
    assert "one device: there is no boundary to calibrate" in r.output or "missing.xml" in r.output


def test_a_served_subgraph_pays_the_hand_off_on_its_device_and_in_the_request():
    """``Throughput.handoff`` (hdp calibrate's, per served HETERO subgraph) is added to each subgraph's
    overhead in its device's load and in the latency bound; one request's latency is unchanged."""
    base = problem(two_op_module())
    h = 0.25
    plain, served = (Simulator(base.with_objective(Throughput(requests=2, handoff=x))) for x in (0.0, h))
    for gd, per_dev in (([0, 1], [1, 1]), ([1, 0], [1, 1]), ([0, 0], [1, 0])):  # subgraphs per device
        nsub = sum(per_dev)
        assert served.terms(np.array(gd))[2] == nsub
        assert served.loads(gd).tolist() == pytest.approx((plain.loads(gd) + h * np.array(per_dev)).tolist())
        assert served.latency(gd) == pytest.approx(plain.latency(gd))
        assert served.served_latency(gd) == pytest.approx(plain.latency(gd) + h * nsub)
        assert served.cost(gd) == pytest.approx(max(served.served_latency(gd) / 2, served.loads(gd).max()))
        assert served.report(np.array(gd))["period"] == pytest.approx(served.cost(gd))
    assert served.costs(np.array([[0, 1], [0, 0]])).tolist() == pytest.approx([served.cost([0, 1]), served.cost([0, 0])])


@pytest.mark.parametrize("seed", range(4))
def test_optimal_under_a_hand_off_buys_fewer_subgraphs_within_one_hand_off_of_brute_force(seed):
    """The MILP charges a served subgraph's overhead per copy a device receives and once per device
    used (a chain's device that starts no segment is charged one too many): ``optimal`` under a
    hand-off is within one hand-off of brute force over the simulator's period, and a large hand-off
    buys fewer subgraphs than none."""
    rng = np.random.default_rng(200 + seed)
    n = 8
    types = ["Parameter"] + ["X"] * n + ["Result"]
    edges = [(i, i + 1) for i in range(n + 1)]
    t = [[0, 0]] + rng.uniform(0.5, 2.0, size=(n, 2)).tolist() + [[0, 0]]
    m = make_module(types, edges, t, edge_bytes=[int(b) for b in rng.integers(1, 50, n + 1)], lat=0.01, bw=1e3,
                    ovh=0.0)
    p0 = problem(m)
    subgraphs = []
    for h in (0.0, 0.05, 3.0):
        p = p0.with_objective(Throughput(requests=2, handoff=h))
        sim = Simulator(p)
        got = place(Optimal(margin=0.0, mip_gap=1e-9), ctx_of(p, m)).group_device
        assert sim.cost(got) <= brute(p, sim) + h + 1e-9
        subgraphs.append(sim.terms(got)[2])
    assert subgraphs[2] <= min(subgraphs[0], 2)


def test_the_partition_pass_takes_a_hand_off_only_for_throughput():
    from hdp.pipeline.schedule import make_pass
    from hdp.target.target import load_target

    t = load_target("i9-flex170")
    p = make_pass("partition", {"target": t, "objective": "throughput", "requests": "4", "handoff": "2e-4"})
    assert p.objective == Throughput(requests=4, handoff=2e-4)
    for bad, msg in (({"objective": "latency", "handoff": "1e-4"}, "only with objective throughput"),
                     ({"objective": "throughput", "handoff": "soon"}, "option 'handoff' must be a number"),
                     ({"objective": "throughput", "handoff": "-1"}, r"in \[0, 10\]")):
        with pytest.raises(InputError, match=msg):
            make_pass("partition", {"target": t, **bad})


def test_optimal_under_throughput_is_never_above_the_best_two_stage_pipeline_in_simulation():
    """optimal's program charges the served overhead per copy received (a stand-in for per
    subgraph); with skip connections every cut sends two copies, so the program's answer is priced
    above the best two-stage cut by the simulator: optimal keeps the cut and says so."""
    from hdp.placement.problem import build_problem
    from hdp.placers.options import method_from
    from hdp.placers.pipelines import pipeline_candidates

    n = 12
    types = ["Parameter"] + ["MatMul"] * n + ["Result"]
    edges = sorted([(i, i + 1) for i in range(n + 1)] + [(i, i + 2) for i in range(1, n - 1)])
    t = np.array([[0, 0]] + [[1, 1]] * n + [[0, 0]], float) * 1e-5
    m = make_module(types, edges, t, lat=1e-6, bw=1e12, ovh=1e-5)
    for handoff in (0.0, 4e-5):
        p = build_problem(m, ("D0", "D1")).with_objective(Throughput(requests=2, handoff=handoff))
        sim = Simulator(p)
        got = place(method_from("optimal", {"margin": 0.0}), PlaceContext(module=m, problem=p))
        best = min(sim.cost(gd) for _, gd, _ in pipeline_candidates(p, sim))
        assert sim.cost(got.group_device) == pytest.approx(best)
        assert got.info["pipeline"].startswith("pipeline:D0>D1") and "instead of the program's optimum" in got.info["pipeline"]

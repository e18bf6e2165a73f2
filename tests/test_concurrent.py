"""The concurrent executor (issue 20): placed models cut into device subgraphs that run at once.

Real compiles on two CPU plugin instances (``virtual-f32``: both f32, so outputs match the plain
compile up to float reordering), tiny models built here, fixed seeds.
"""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Array, Placement
from hdp.placement import _kernels as K
from hdp.runtime.placed.executor import compile_concurrent, lane_cores
from hdp.runtime.placed.model import compile_placed, write_placed
from hdp.runtime.placed.split import split_model
from hdp.target.devices import make_core
from hdp.target.target import load_target

EXACT = dict(rtol=1e-5, atol=1e-5)


def _mm(x, rng, n, name):
    from openvino import opset13 as ops

    w = ops.constant((rng.standard_normal((n, n)) * 0.2).astype(np.float32), name=f"{name}_w")
    return ops.relu(ops.matmul(x, w, False, False, name=f"{name}_mm"), name=f"{name}_relu")


def two_towers(n=16, depth=2):
    """x -> stem -> {tower a, tower b} (each ``depth`` MatMul+Relu) -> add -> head -> y."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, n], np.float32, name="x")
    stem = _mm(x, rng, n, "stem")
    a = b = stem
    for i in range(depth):
        a = _mm(a, rng, n, f"a{i}")
        b = _mm(b, rng, n, f"b{i}")
    head = _mm(ops.add(a, b, name="join"), rng, n, "head")
    return ov.Model([ops.result(head, name="y")], [x], "towers")


def place(model, device_of_name):
    """Set HETERO's affinity on every op: ``device_of_name(name)``; a Constant goes with its consumer."""
    for op in model.get_ordered_ops():
        op.get_rt_info()["affinity"] = device_of_name(op.get_friendly_name())
    for op in model.get_ordered_ops():
        for inp in op.inputs():
            src = inp.get_source_output().get_node()
            if src.get_type_name() == "Constant":
                src.get_rt_info()["affinity"] = op.get_rt_info()["affinity"].astype(str)
    return model


def b_tower(name: str) -> str:
    return "CPU_B" if name.startswith("b") else "CPU"


@pytest.fixture(scope="module")
def bed():
    t = load_target("virtual-f32")
    return t, make_core(t)


def reference(model, feed):
    import openvino as ov

    cm = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})
    return [cm(feed)[o] for o in cm.outputs]


def test_two_towers_run_as_independent_subgraphs(bed):
    t, core = bed
    model = place(two_towers(), b_tower)
    cm = compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    subs = cm.split.subgraphs
    # stem, tower a, tower b, join+head: the towers depend on the stem only, not on each other
    assert [s.device for s in subs].count("CPU_B") == 1
    tb = next(i for i, s in enumerate(subs) if s.device == "CPU_B")
    ta = next(i for i, s in enumerate(subs) if s.device == "CPU" and any(
        op.get_friendly_name() == "a0_mm" for op in s.ops))
    assert subs[tb].preds == subs[ta].preds and tb not in subs[ta].preds and ta not in subs[tb].preds
    stem = next(iter(subs[ta].preds))
    assert {op.get_friendly_name() for op in subs[stem].ops} == {"stem_mm", "stem_relu"}
    x = np.random.default_rng(1).standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_allclose(cm({0: x})[0], reference(model, {0: x})[0], **EXACT)
    # a second call on the same request, other inputs
    x2 = x * 2
    np.testing.assert_allclose(cm({"x": x2})["y"], reference(model, {0: x2})[0], **EXACT)
    assert cm.get_property("HETERO_NUMBER_OF_SUBMODELS") == len(subs)


def test_a_residual_around_another_device_is_cut_acyclically(bed):
    """a0 on CPU_B inside a CPU chain whose input also skips to the join: HETERO's split is cyclic
    unless cut; the executor's subgraphs run in a topological order and give the same outputs."""
    t, core = bed
    model = place(two_towers(depth=3), lambda n: "CPU_B" if n.startswith("a1") else "CPU")
    cm = compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    subs = cm.split.subgraphs
    for s, sub in enumerate(subs):
        assert all(p < s for p in sub.preds)  # stored in a topological order
    x = np.random.default_rng(2).standard_normal((1, 16)).astype(np.float32)
    np.testing.assert_allclose(cm({0: x})[0], reference(model, {0: x})[0], **EXACT)


def test_every_op_on_one_device_is_one_subgraph(bed):
    t, core = bed
    model = place(two_towers(), lambda n: "CPU_B")
    cm = compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    assert [s.device for s in cm.split.subgraphs] == ["CPU_B"]
    x = np.ones((1, 16), np.float32)
    np.testing.assert_allclose(cm({0: x})[0], reference(model, {0: x})[0], **EXACT)


def test_outputs_passed_through_and_several_results(bed):
    """A model input given back as an output, a tensor read by a subgraph on each device and
    returned too: every output lands in its place."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(3)
    x = ops.parameter([1, 8], np.float32, name="x")
    a = _mm(x, rng, 8, "a")
    b = _mm(a, rng, 8, "b")
    c = _mm(a, rng, 8, "c")
    model = place(ov.Model([ops.result(b, name="rb"), ops.result(x, name="rx"), ops.result(a, name="ra"),
                            ops.result(c, name="rc")], [x]), lambda n: "CPU_B" if n.startswith("b") else "CPU")
    t, core = bed
    cm = compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    v = rng.standard_normal((1, 8)).astype(np.float32)
    got = cm({0: v})
    for g, w in zip(got.values(), reference(model, {0: v})):
        np.testing.assert_allclose(g, w, **EXACT)
    assert np.array_equal(got[1], v)
    assert got[cm.outputs[2]] is got[2]


def stateful_counter(middle_device="CPU"):
    """state += relu(x @ w) each step, through a middle op on ``middle_device``; output the state."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    rng = np.random.default_rng(4)
    x = ops.parameter([1, 8], np.float32, name="x")
    info = VariableInfo()
    info.data_shape = ov.PartialShape([1, 8])
    info.data_type = ov.Type.f32
    info.variable_id = "acc"
    var = Variable(info)
    init = ops.constant(np.zeros((1, 8), np.float32), name="init")
    past = ops.read_value(init, var, name="past")
    mid = _mm(x, rng, 8, "mid")
    new = ops.add(past, ops.sigmoid(ops.add(past, mid, name="mix"), name="sig"), name="new")
    assign = ops.assign(new, var, name="store")
    model = ov.Model([ops.result(new, name="y")], [assign], [x], "counter")
    return place(model, lambda n: middle_device if n.startswith("mid") else "CPU")


def test_a_stateful_model_carries_its_state_across_calls(bed):
    t, core = bed
    model = stateful_counter(middle_device="CPU_B")  # the x branch on CPU_B, the state on CPU
    cm = compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    import openvino as ov

    ref = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"}).create_infer_request()
    req = cm.create_infer_request()
    assert [s.name for s in req.query_state()] == ["acc"]
    rng = np.random.default_rng(5)
    for step in range(3):
        v = rng.standard_normal((1, 8)).astype(np.float32)
        np.testing.assert_allclose(req.infer({0: v})[0], ref.infer({0: v})[0], **EXACT)
    req.reset_state()
    ref.reset_state()
    v = np.ones((1, 8), np.float32)
    np.testing.assert_allclose(req.infer({0: v})[0], ref.infer({0: v})[0], **EXACT)


def test_state_split_by_another_device_is_refused_in_one_line(bed):
    t, core = bed
    model = stateful_counter()
    for op in model.get_ordered_ops():  # the op between ReadValue and Assign on the other device
        if op.get_friendly_name() == "mix":
            op.get_rt_info()["affinity"] = "CPU_B"
    with pytest.raises(InputError, match="variable 'acc': ops on CPU_B lie between its ReadValue and Assign") as e:
        compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    assert "\n" not in str(e.value)


def test_a_subgraph_error_reaches_the_caller(bed):
    t, core = bed
    cm = compile_concurrent(place(two_towers(), b_tower), t, core, ["CPU", "CPU_B"])
    with pytest.raises(RuntimeError):
        cm({0: np.ones((1, 5), np.float32)})  # a shape the model does not take
    x = np.ones((1, 16), np.float32)
    assert cm({0: x})[0].shape == (1, 16)  # the lanes survive
    with pytest.raises(InputError, match="input 0 .* is not set"):
        cm.create_infer_request().infer()


def test_placed_file_runs_both_ways(branchy_xml, tmp_path):
    """The same placed.xml compiles under HETERO and concurrently, to the same outputs."""
    m = lower(branchy_xml)
    names = [op.name for op in m.graph.ops]
    dev = np.array([1 if n in ("mul", "sum", "out") else 0 for n in names])
    out = write_placed(m.replace(placement=Placement("test", ("CPU", "CPU_B"), Array.of(dev.astype(np.int16)))),
                       tmp_path / "p.xml", load_target("virtual-f32"))
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    seq = compile_placed(out)
    conc = compile_placed(out, execution="concurrent")
    assert conc.submodels >= 2
    for o in range(2):
        np.testing.assert_allclose(conc({0: x})[o], seq({0: x})[o], **EXACT)
    with pytest.raises(InputError, match="execution must be one of sequential, concurrent"):
        compile_placed(out, execution="parallel")


def test_lane_cores_give_pinned_devices_their_own_cores():
    t = load_target("virtual-2x1")
    assert lane_cores(t, ["CPU", "CPU_B"], available=[0, 1]) == {"CPU": [0], "CPU_B": [1]}
    assert lane_cores(t, ["CPU_B"], available=[3, 5]) == {"CPU_B": [3]}
    assert lane_cores(load_target("virtual"), ["CPU", "CPU_B"], available=[0, 1]) == {}
    with pytest.raises(InputError, match="device 'CPU_B' asks for 1 pinned core"):
        lane_cores(t, ["CPU", "CPU_B"], available=[0])


def _quotient_is_acyclic(label, src, dst) -> bool:
    k = int(label.max()) + 1 if label.size else 0
    succ = [set() for _ in range(k)]
    indeg = [0] * k
    for u, v in zip(src, dst):
        a, b = int(label[u]), int(label[v])
        if a != b and b not in succ[a]:
            succ[a].add(b)
            indeg[b] += 1
    ready = [a for a in range(k) if indeg[a] == 0]
    seen = 0
    while ready:
        a = ready.pop()
        seen += 1
        for b in succ[a]:
            indeg[b] -= 1
            if indeg[b] == 0:
                ready.append(b)
    return seen == k


def test_concurrent_labels_are_acyclic_single_device_regions():
    rng = np.random.default_rng(7)
    for trial in range(200):
        n = int(rng.integers(2, 30))
        pairs = sorted({(int(u), int(v)) for u, v in rng.integers(0, n, (n * 2, 2)) if u < v})
        src = np.array([p[0] for p in pairs], np.int64)
        dst = np.array([p[1] for p in pairs], np.int64)
        eff = rng.integers(0, 3, n).astype(np.int64)
        label = np.empty(n, np.int64)
        k = K.concurrent_labels(eff, np.zeros(n, np.bool_), src, dst, label, np.empty(n, np.int64), np.empty(n, np.int64),
                                np.empty(n, np.int64))
        assert k == len(set(label.tolist()))
        for lab in range(k):
            assert len(set(eff[label == lab].tolist())) == 1
        assert _quotient_is_acyclic(label, src, dst), trial
        # every same-device region HETERO makes is refined, never merged across
        het = np.empty(n, np.int64)
        K.subgraph_labels(eff, src, dst, het, *(np.empty(n, np.int64) for _ in range(4)), np.empty(n, np.bool_))
        for lab in range(k):
            assert len(set(het[label == lab].tolist())) == 1


def test_split_leaves_constants_shared_and_uncut(bed):
    """A constant read by subgraphs on both devices is read by each, never an input."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], np.float32, name="x")
    c = ops.constant(np.arange(4, dtype=np.float32).reshape(1, 4), name="c")
    a = ops.add(x, c, name="a")
    b = ops.multiply(x, c, name="b")
    model = place(ov.Model([ops.result(ops.add(a, b, name="s"), name="y")], [x]),
                  lambda n: "CPU_B" if n == "b" else "CPU")
    split = split_model(model.clone(), ["CPU", "CPU_B"])
    for sub in split.subgraphs:
        assert all(src[0] in ("input", "sub") for src in sub.sources)
    t, core = bed
    cm = compile_concurrent(model, t, core, ["CPU", "CPU_B"])
    v = np.ones((1, 4), np.float32)
    np.testing.assert_allclose(cm({0: v})[0], (v + np.arange(4)) + v * np.arange(4), **EXACT)


def _sim(types, edges, op_time, ovh=0.0, lat=0.0):
    from hdp.placement.simulate import Simulator
    from tests.placement_helpers import make_module, problem

    m = make_module(types, edges, op_time, lat=lat, bw=1e30, ovh=ovh)
    return Simulator(problem(m))


def test_concurrent_makespan_overlaps_independent_towers():
    """P -> s -> {a1 -> a2, b1 -> b2} -> j -> R: towers on two devices run at once."""
    types = ["Parameter", "MatMul", "MatMul", "MatMul", "MatMul", "MatMul", "Add", "Result"]
    edges = [(0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (3, 6), (5, 6), (6, 7)]
    t = np.array([[0, 0], [1, 1], [2, 2], [2, 2], [2, 2], [2, 2], [1, 1], [0, 0]], float)
    sim = _sim(types, edges, t)
    from tests.placement_helpers import per_group

    one = per_group(sim.problem, np.zeros(8, int))
    split = per_group(sim.problem, np.array([0, 0, 0, 0, 1, 1, 0, 0]))
    assert sim.latency_concurrent(one) == pytest.approx(10.0)
    assert sim.latency(split) == pytest.approx(10.0)
    assert sim.latency_concurrent(split) == pytest.approx(1 + 4 + 1)
    label, k = sim.concurrent_subgraphs(split)
    assert k >= 4  # stem, tower a, tower b, join (plus the zero-time Parameter/Result alone)
    # launch per subgraph and handover per edge between subgraphs are charged on the critical path
    assert sim.latency_concurrent(split, launch=0.5, handover=0.25) == pytest.approx(1 + 4 + 1 + 3 * 0.5 + 2 * 0.25)
    # the op-level what-if never exceeds the executor's makespan
    assert sim.latency_parallel(split) <= sim.latency_concurrent(split) + 1e-12


def test_concurrent_makespan_charges_conversions_on_both_devices():
    """P -> s -> {a, b} -> j -> R, b on the second device: every tensor crossing between executor
    subgraphs is converted once out of its producer's sub-model (on the producer's device) and once
    into each consumer sub-model (on the consumer's), ``convert`` seconds per byte; a tensor read
    twice by one subgraph is converted into it once, a Parameter's or a Result's tensor never."""
    from hdp.placement.simulate import Simulator
    from tests.placement_helpers import make_module, per_group, problem

    types = ["Parameter", "MatMul", "MatMul", "MatMul", "Add", "Result"]
    edges = [(0, 1), (1, 2), (1, 3), (2, 4), (3, 4), (4, 5)]
    nbytes = np.array([7, 100, 100, 10, 20, 9], np.int64)  # s's output is read by a and b
    t = np.array([[0, 0], [1, 1], [3, 3], [3, 3], [1, 1], [0, 0]], float)
    p = problem(make_module(types, edges, t, edge_bytes=nbytes, lat=0.0, bw=1e30, ovh=0.0))
    gd = per_group(p, np.array([0, 0, 0, 1, 0, 0]))
    # these tensors are 1-D: the plugin keeps them in a plain layout, nothing to convert
    assert Simulator(p).latency_concurrent(gd, convert=1e-3) == pytest.approx(1 + 3 + 1)
    # as 4-D tensors (every byte converts)
    sim = Simulator(msgspec.structs.replace(p, convert_bytes=p.structure.t_bytes.astype(float)))
    one = per_group(sim.problem, np.zeros(6, int))
    assert sim.latency_concurrent(one, convert=1e-3) == pytest.approx(8.0)  # one subgraph: nothing crosses
    assert sim.latency_concurrent(gd) == pytest.approx(1 + 3 + 1)
    # s hands 100 bytes out (0.1) to b's subgraph (in: 0.1) and to a's (cut from s: in 0.1);
    # b hands 20 out (0.02) and j takes a's 10 and b's 20 in (0.03)... on the critical path:
    # s 1 + out 0.1 -> b: in 0.1 + 3 + out 0.02 -> j: in 0.01 + 0.02 + 1; a (in 0.1 + 3 + out 0.01)
    # runs on the first device after s, beside b
    got = sim.latency_concurrent(gd, convert=1e-3)
    label, k = sim.concurrent_subgraphs(gd)
    assert k >= 4
    assert got == pytest.approx(1 + 0.1 + max(0.1 + 3 + 0.01, 0.1 + 3 + 0.02) + 0.03 + 1)
    assert sim.latencies_concurrent(np.stack([one, gd]), convert=1e-3) == pytest.approx([8.0, got])
    from hdp.placement.objective import Concurrent

    assert Simulator(sim.problem.with_objective(Concurrent(convert=1e-3))).cost(gd) == pytest.approx(got)


def test_concurrent_makespan_waits_for_whole_subgraphs():
    """s1 -> s2 on CPU, s1 -> b on CPU_B, (s2, b) -> j on CPU: b can start after s1 only because the
    executor cuts s1 from s2 (s1 sends to another device, s2 does not)."""
    types = ["Parameter", "MatMul", "MatMul", "MatMul", "Add", "Result"]
    edges = [(0, 1), (1, 2), (1, 3), (2, 4), (3, 4), (4, 5)]
    t = np.array([[0, 0], [1, 1], [3, 3], [3, 3], [1, 1], [0, 0]], float)
    sim = _sim(types, edges, t)
    from tests.placement_helpers import per_group

    gd = per_group(sim.problem, np.array([0, 0, 0, 1, 0, 0]))
    assert sim.latency_concurrent(gd) == pytest.approx(1 + 3 + 1)


def test_hdp_evaluate_execution_concurrent(branchy_xml, tmp_path):
    """`hdp evaluate --execution concurrent`: checked as the executor runs it, then measured head to
    head with HETERO and each single device, one verdict each (the figures are not asserted)."""
    import json

    from click.testing import CliRunner

    from hdp.cli.main import main

    m = lower(branchy_xml)
    names = [op.name for op in m.graph.ops]
    dev = np.array([1 if n in ("mul", "sum", "out") else 0 for n in names], np.int16)
    out = write_placed(m.replace(placement=Placement("test", ("CPU", "CPU_B"), Array.of(dev))),
                       tmp_path / "p.xml", load_target("virtual-f32"))
    r = CliRunner().invoke(main, ["evaluate", str(out), "--execution", "concurrent", "--json", "--runs", "6",
                                  "--max-seconds", "1", "--warmup", "1"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["check"]["passed"] and res["check"]["execution"] == "concurrent"
    assert set(res["measurements"]) == {"concurrent", "HETERO", "single CPU", "single CPU_B"}
    assert [p["a"] for p in res["pairs"]] == ["HETERO", "single CPU", "single CPU_B"]
    assert all("comparison" in p for p in res["pairs"])
    r = CliRunner().invoke(main, ["evaluate", str(out), str(out), "--execution", "concurrent"])
    assert r.exit_code == 2 and "evaluates one placed file" in r.output


def test_fit_executor_costs_measures_three_probes():
    """The executor's own costs come from real runs on the bed (their values are not asserted)."""
    from hdp.runtime.costs.executor import ExecutorCosts, fit_executor_costs

    c = fit_executor_costs(load_target("virtual-f32"), rounds=12)
    assert isinstance(c, ExecutorCosts) and c.rounds == 12
    for x, (lo, hi) in ((c.request, c.request_ci), (c.launch, c.launch_ci), (c.handover, c.handover_ci),
                        (c.convert, c.convert_ci)):
        assert x >= 0 and lo <= hi
    assert c.convert_ci != (0.0, 0.0)  # the convolution probes ran
    assert c.handover_ci != (0.0, 0.0)  # two devices: the alternating probe ran
    assert "per subgraph" in c.describe()
    one = fit_executor_costs(load_target("virtual-f32").__class__(
        name="one", devices=[load_target("virtual-f32").devices[0]]), rounds=8)
    assert one.handover == 0.0 and one.handover_ci == (0.0, 0.0)


def test_concurrent_batch_equals_one_by_one():
    from hdp.placement.simulate import Simulator
    from tests.placement_helpers import problem as problem_of_module
    from tests.placement_helpers import random_module

    rng = np.random.default_rng(11)
    m = random_module(rng, 40, 3)
    sim = Simulator(problem_of_module(m))
    p = sim.problem
    mat = np.stack([np.array([rng.choice(np.flatnonzero(p.allowed[g])) for g in range(p.n_groups)])
                    for _ in range(20)])
    batch = sim.latencies_concurrent(mat, launch=1e-3, handover=2e-3, request=5e-4)
    one = [sim.latency_concurrent(row, launch=1e-3, handover=2e-3, request=5e-4) for row in mat]
    np.testing.assert_allclose(batch, one)


# --------------------------------------------------------------------------- the Concurrent objective

TOWER_TYPES = ["Parameter", "MatMul", "MatMul", "MatMul", "MatMul", "MatMul", "Add", "Result"]
TOWER_EDGES = [(0, 1), (1, 2), (2, 3), (1, 4), (4, 5), (3, 6), (5, 6), (6, 7)]
TOWER_TIME = np.array([[0, 0], [1, 1], [2, 2], [2, 2], [2, 2], [2, 2], [1, 1], [0, 0]], float) * 1e-3


def _towers_ctx(objective):
    from hdp.placers import PlaceContext
    from tests.placement_helpers import make_module
    from tests.placement_helpers import problem as problem_of_module

    m = make_module(TOWER_TYPES, TOWER_EDGES, TOWER_TIME, lat=1e-6, bw=1e12, ovh=1e-5)
    return PlaceContext(module=m, problem=problem_of_module(m).with_objective(objective))


def test_the_concurrent_objective_is_priced_by_the_executor_model():
    from hdp.placement.objective import Concurrent
    from hdp.placement.simulate import Simulator

    ob = Concurrent(launch=2e-5, handover=1e-5, request=3e-5)
    sim = Simulator(_towers_ctx(ob).problem)
    split = sim.problem.structure.group_devices(np.array([0, 0, 0, 0, 1, 1, 0, 0]))
    assert sim.cost(split) == pytest.approx(sim.latency_concurrent(split, 2e-5, 1e-5, 3e-5))
    assert sim.cost(split) < sim.latency(split)
    mat = np.stack([split, sim.problem.single(0), sim.problem.single(1)])
    np.testing.assert_allclose(sim.costs(mat), [sim.cost(r) for r in mat])
    rep = sim.report(split)
    assert rep["concurrent"] == pytest.approx(sim.cost(split)) and rep["concurrent_subgraphs"] >= 4


def test_heft_prices_the_conversions_of_a_cut_for_the_executor():
    """The towers pay off on two devices while a cut costs little; once each cut tensor's conversions
    out of and into a sub-model cost more than a tower, heft keeps the model on one device (and the
    simulator agrees that this is faster)."""
    from hdp.placement.objective import Concurrent
    from hdp.placement.simulate import Simulator
    from hdp.placers import place
    from hdp.placers.options import method_from

    for convert, split_expected in ((0.0, True), (2e-3, False)):
        ctx = _towers_ctx(Concurrent(convert=convert))
        p = ctx.problem
        p = msgspec.structs.replace(p, convert_bytes=p.structure.t_bytes.astype(float))  # as 4-D tensors
        ctx = type(ctx)(module=ctx.module, problem=p)
        gd = place(method_from("heft"), ctx).group_device
        assert (np.unique(gd).size > 1) == split_expected, convert
        sim = Simulator(p)
        assert sim.cost(gd) <= min(sim.cost(p.single(j)) for j in range(2)) + 1e-12


def test_placers_serve_the_concurrent_objective_or_refuse_in_one_line():
    from hdp.placement.objective import Concurrent
    from hdp.placement.simulate import Simulator
    from hdp.placers import place
    from hdp.placers.options import method_from

    ctx = _towers_ctx(Concurrent())
    sim = Simulator(ctx.problem)
    singles = min(sim.cost(ctx.problem.single(j)) for j in range(2))
    heft = place(method_from("heft"), ctx).group_device
    assert sim.cost(heft) < singles  # the towers on two devices at once
    auto = place(method_from("auto"), ctx)
    assert sim.cost(auto.group_device) <= sim.cost(heft) + 1e-12
    assert "concurrent latency" in auto.info["report"]
    with pytest.raises(InputError, match="method 'optimal' cannot place for the concurrent objective") as e:
        place(method_from("optimal"), ctx)
    assert "\n" not in str(e.value) and "use heft or auto" in str(e.value)
    # HSDAG's simulated reward is the problem's objective; a measured one is HETERO's latency
    with pytest.raises(InputError, match="method 'hsdag:measure' cannot place for the concurrent objective") as e:
        place(method_from("hsdag:measure"), ctx)
    assert "use hsdag:simulate or heft or auto" in str(e.value)
    import msgspec

    from hdp.passes.coarsen import CoarsenPass
    from hdp.passes.features import FeaturesPass
    from hdp.placers import PlaceContext

    m = CoarsenPass().run(FeaturesPass().run(ctx.module))
    o = msgspec.structs.replace(method_from("hsdag"), episodes=3, samples=4, hidden=16, budget=0.0)
    learned = place(o, PlaceContext(module=m, problem=ctx.problem))
    assert learned.info["warm_start"].startswith("heft")  # optimal, its default, is not exact here
    assert sim.cost(learned.group_device) <= sim.cost(heft) + 1e-12
    assert float(learned.info["best_latency_s"]) == pytest.approx(sim.cost(learned.group_device), rel=1e-9)


def test_execution_concurrent_options():
    from hdp.passes.partition import PartitionPass
    from hdp.pipeline.schedule import make_pass
    from hdp.placement.objective import Concurrent, Latency

    t = load_target("virtual-2x1")
    assert make_pass("partition", {"target": t, "execution": "sequential"}).objective == Latency()
    assert make_pass("partition", {"target": t, "execution": "concurrent"}).objective == Concurrent()
    with pytest.raises(InputError, match="--execution concurrent optimises one request's latency.*throughput"):
        make_pass("partition", {"target": t, "objective": "throughput", "execution": "concurrent"})
    with pytest.raises(InputError, match="--requests 2: .*not with --execution concurrent"):
        make_pass("partition", {"target": t, "requests": "2", "execution": "concurrent"})
    with pytest.raises(InputError, match="launch is a cost of hdp's concurrent executor"):
        make_pass("partition", {"target": t, "launch": "1e-5"})
    p = make_pass("partition", {"target": t, "method": "heft", "execution": "concurrent", "launch": "1e-5",
                                "handover": "2e-6", "request": "3e-5"})
    assert isinstance(p, PartitionPass) and p.objective == Concurrent(launch=1e-5, handover=2e-6, request=3e-5)
    q = make_pass("partition", {"target": t, "method": "heft"})
    assert msgspec_bytes(p) != msgspec_bytes(q)
    with pytest.raises(InputError, match="option 'launch' must be a number"):
        make_pass("partition", {"target": t, "method": "heft", "execution": "concurrent", "launch": "soon"})


def msgspec_bytes(p) -> bytes:
    import msgspec

    return msgspec.msgpack.encode(p)


def test_hdp_compile_execution_concurrent(tmp_path):
    """heft for the executor's latency; optimal refused in one line, exit 2."""
    import openvino as ov
    from click.testing import CliRunner

    from hdp.cli.main import main

    xml = tmp_path / "towers.xml"
    ov.save_model(two_towers(n=32, depth=3), str(xml), compress_to_fp16=False)
    args = ["compile", str(xml), "-o", str(tmp_path / "p.xml"), "--target", "virtual-f32", "--no-compare",
            "--execution", "concurrent", "--cache-dir", str(tmp_path / "c"), "-v"]
    r = CliRunner().invoke(main, args + ["--method", "heft"])
    assert r.exit_code == 0, r.output
    assert "run by hdp's concurrent executor" in r.output
    assert "checked: runs concurrently (hdp's executor)" in r.output  # and the written file under HETERO
    r = CliRunner().invoke(main, args + ["--method", "optimal"])
    assert r.exit_code == 2 and "cannot place for the concurrent objective" in r.output
    assert len([x for x in r.output.splitlines() if "error" in x]) == 1
    r = CliRunner().invoke(main, args + ["--method", "heft", "--objective", "throughput"])
    assert r.exit_code == 2 and "not with --objective throughput" in r.output


def _thread_ticks() -> dict[str, int]:
    """CPU clock ticks (user + system) spent so far by each thread of this process."""
    import os

    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[tid] = int(fields[11]) + int(fields[12])
    return out


def test_a_split_under_hetero_keeps_each_device_to_its_thread_cap(tmp_path):
    """HETERO compiles a split model's subgraphs with exclusive async requests, which make the CPU
    plugin ignore ``INFERENCE_NUM_THREADS``: on ``virtual-2x1`` (two 1-thread devices) each half of
    a chain ran on both cores (CPU time 2.0x wall). With hetero_config's override, each subgraph
    runs on one thread: one thread of the process does (nearly) all the work of a chain that
    depends on itself end to end (without the override, 4 of 37 ticks on a second thread with the
    host busy, half of them on a quiet one: OpenVINO's threads steal work from a thread that waits
    for a core, so a very busy host can hide the second thread, never invent one)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = h = ops.parameter([64, 1024], np.float32, name="x")
    for i in range(12):
        h = _mm(h, rng, 1024, f"{'b' if i >= 6 else 'a'}{i}")
    ov.save_model(ov.Model([ops.result(h, name="y")], [x], "chain"), tmp_path / "chain.xml")
    m = lower(tmp_path / "chain.xml")
    dev = np.array([1 if op.name.startswith("b") else 0 for op in m.graph.ops], np.int16)
    t = load_target("virtual-2x1")
    out = write_placed(m.replace(placement=Placement("test", ("CPU", "CPU_B"), Array.of(dev))), tmp_path / "p.xml", t)
    compiled = compile_placed(out, t)
    assert list(compiled.get_property("EXECUTION_DEVICES")) == ["CPU", "CPU_B"]
    req = compiled.create_infer_request()
    feed = {0: rng.standard_normal((64, 1024)).astype(np.float32)}
    req.infer(feed)
    before = _thread_ticks()
    for _ in range(40):
        req.infer(feed)
    spent = {tid: n - before.get(tid, 0) for tid, n in _thread_ticks().items()}
    total = sum(spent.values())
    busy = sorted((n for n in spent.values() if n >= 0.05 * total), reverse=True)
    assert total >= 20, f"only {total} ticks measured"
    assert len(busy) == 1, f"{len(busy)} threads each did 5 % of the work or more: {busy} of {total} ticks"
    np.testing.assert_allclose(req.get_output_tensor(0).data,
                               reference(ov.Core().read_model(tmp_path / "chain.xml"), feed)[0], **EXACT)


def test_hetero_config_turns_exclusive_requests_off_only_for_thread_capped_devices():
    from hdp.target.devices import hetero_config

    capped, free = load_target("virtual-2x1"), load_target("virtual")
    assert hetero_config(free, ["CPU", "CPU_B"], {"PERF_COUNT": "YES"}) == {"PERF_COUNT": "YES"}
    got = hetero_config(capped, ["CPU", "CPU_B"], {"DEVICE_PROPERTIES": {"CPU": {"EXCLUSIVE_ASYNC_REQUESTS": "YES"}}})
    # a caller's own device property wins over the override
    assert got == {"DEVICE_PROPERTIES": {"CPU": {"EXCLUSIVE_ASYNC_REQUESTS": "YES"},
                                         "CPU_B": {"EXCLUSIVE_ASYNC_REQUESTS": "NO"}}}

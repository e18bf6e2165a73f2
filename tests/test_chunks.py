"""Profiling in chunks (hdp.runtime.measure.chunks): the plan, the cut-out models, and the profile they give."""

import numpy as np
import pytest
from dynamic_models import build_stateful_lm
from dynamic_models import save as save_dynamic
from hostile import chain_model, save

from hdp.ir.openvino_frontend import lower
from hdp.ir.shapes import parse_request
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import make_pass
from hdp.runtime.costs.profile import profile_costs, zero_cost_ops
from hdp.runtime.measure import chunks, query
from hdp.runtime.measure.protocol import RuntimeNode
from hdp.target.target import load_target


def _members(model):
    return [i for i, op in enumerate(model.get_ordered_ops())
            if op.get_type_name() not in ("Parameter", "Constant", "Result")]


def test_a_chain_is_cut_into_bounded_chunks_and_equal_chunks_are_measured_once():
    shared = chain_model(400, shared=True)
    ops = shared.get_ordered_ops()
    p = chunks.plan(ops, 50, query.signatures(ops)[0].sig_of)
    assert [len(m) for m in p.members] == [50] * 8
    assert sorted(i for m in p.members for i in m) == _members(shared)  # every op timed by exactly one chunk
    assert p.measured() == [0] and p.copies() == {0: 8}  # Relu/Add pairs reading one Constant: all alike
    own = chain_model(400, shared=False).get_ordered_ops()  # Constants of seven values, 25 Adds a chunk
    p = chunks.plan(own, 50, query.signatures(own)[0].sig_of)
    assert len(p.members) == 8 and len(p.measured()) == 7 and p.same_as[7] == 0
    assert chunks.plan(own, 50).measured() == list(range(8))  # without signatures every chunk is measured
    assert len(chunks.plan(own, 1000).members) == 1


def test_a_variable_is_read_and_assigned_in_one_chunk():
    ops = build_stateful_lm(layers=2).get_ordered_ops()
    p = chunks.plan(ops, 3)
    chunk_of = {i: c for c, m in enumerate(p.members) for i in m}
    pairs = {}
    for i, op in enumerate(ops):
        if op.get_type_name() in ("ReadValue", "Assign"):
            pairs.setdefault(op.get_variable_id(), set()).add(chunk_of[i])
    assert len(pairs) == 4 and all(len(c) == 1 for c in pairs.values())
    assert len(p.members) > 4


def test_chunks_compile_alone_with_known_shapes_as_constants():
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([2, 3, 4], np.float32, name="x")
    h = ops.relu(ops.relu(x, name="r0"), name="r1")
    shape = ops.concat([ops.gather(ops.shape_of(h, name="s"), ops.constant(np.int64([0])), ops.constant(np.int64(0))),
                        ops.constant(np.int64([-1]))], 0, name="shape")
    out = ops.relu(ops.reshape(ops.relu(h, name="r2"), shape, False, name="flat"), name="r3")
    model = ov.Model([ops.result(out, name="out")], [x], "m")
    p, models = chunks.chunk_models(model, 2)
    assert len(p.members) > 2 and all(m is not None for m in models)
    core = ov.Core()
    for m in models:  # each chunk alone: data inputs are Parameters, the shape arithmetic a Constant
        assert all(i.get_element_type() == ov.Type.f32 for i in m.inputs)
        assert all(s.is_static for s in (i.get_partial_shape() for i in m.inputs))
        core.compile_model(m, "CPU")
    names = {op.get_friendly_name() for m in models for op in m.get_ordered_ops()}
    assert {chunks.op_name(i) for i in _members(model)} <= names
    assert model.get_ordered_ops()[1].get_friendly_name() == "r0"  # the model cut from is left as it is


def test_chunk_times_count_repeats_and_one_request_per_chunk():
    p = chunks.Plan(members=[[0], [1], [2], [3]], same_as=[0, 1, 0, 0])
    # per run: chunk 0, chunk 1, then the one-op model (one request's own cost)
    runs = [[3e-5, 5e-5, 1e-5], [4e-5, 5e-5, 2e-5], [3e-5, 6e-5, 1e-5]]
    assert chunks.chunk_times(p, runs) == pytest.approx([3 * 3e-5 + 5e-5 - 3e-5, 3 * 4e-5 + 5e-5 - 3e-5,
                                                         3 * 3e-5 + 6e-5 - 3e-5])
    assert chunks.chunk_times(p, []) == []
    # a one-op model measured slower than the chunks: the slowest chunk, not 0 or less
    slow = [[1e-5, 2e-5, 3e-5]]
    assert chunks.chunk_times(p, slow) == pytest.approx([2e-5])


def _node(name, ops, preds=()):
    return RuntimeNode(name=name, type="Eltwise", exec_type="jit", original=name, ops=list(ops), preds=list(preds),
                       avg_warm=1e-6, avg_all=1e-6, avg_runs=[1e-6, 1e-6], executed=True)


def test_repeated_chunks_get_the_measured_nodes_at_their_own_ops():
    p = chunks.Plan(members=[[1, 2], [4, 5], [7, 8]], same_as=[0, 1, 0])
    measured = [[_node("in", []), _node("a", [1, 2], [0]), _node("k", [3])],  # 3: a Constant read by chunk 0
                [_node("b", [4], []), _node("c", [5], [0])]]
    nodes = chunks.spread_nodes(p, measured)
    assert [n.name for n in nodes] == ["in", "a", "k", "b", "c", "in", "a", "k"]
    assert [n.ops for n in nodes] == [[], [1, 2], [3], [4], [5], [], [7, 8], []]
    assert [n.preds for n in nodes] == [[], [0], [], [], [3], [], [5], []]


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    m = lower(save(chain_model(60, shared=False), tmp_path_factory.mktemp("chain") / "chain.xml"))
    return PassManager([make_pass("support", {"target": load_target("virtual")})]).run(m)


def test_a_chunked_profile_costs_the_ops_a_whole_one_does(chain):
    t = load_target("virtual")
    whole, _ = profile_costs(chain, t, runs=3, denoise=False, chunk=0)
    cut, info = profile_costs(chain, t, runs=3, denoise=False, chunk=10, whole_max=0)
    assert [info[d]["chunks"] for d in t.device_names] == [6, 6]
    assert [info[d]["measured_chunks"] for d in t.device_names] == [6, 6]  # 5 Adds a chunk, i % 7: all differ
    w, c = whole.op_time.numpy(), cut.op_time.numpy()
    free = zero_cost_ops(chain.graph)
    assert np.all(c[free] == 0) and np.all(w[free] == 0)
    assert np.all(np.isfinite(c)) and np.all(c[~free] > 0) and np.all(w[~free] > 0)
    assert all(x > 0 for x in cut.measured_total)
    again, info = profile_costs(chain, t, runs=3, denoise=False, chunk=0, whole_max=0)
    assert "chunks" not in info["CPU"] and again.op_time.numpy().shape == w.shape  # chunk=0: whole


def test_repeated_chunks_take_the_measured_times(tmp_path):
    m = lower(save(chain_model(80, shared=True), tmp_path / "shared.xml"))
    m = PassManager([make_pass("support", {"target": load_target("virtual")})]).run(m)
    costs, info = profile_costs(m, load_target("virtual"), runs=3, denoise=False, chunk=20, whole_max=0)
    assert info["CPU"]["chunks"] == 4 and info["CPU"]["measured_chunks"] == 1
    t = costs.op_time.numpy()
    members = [i for i, op in enumerate(m.graph.ops) if op.type in ("Relu", "Add")]
    per_chunk = t[members].reshape(4, 20, -1)
    assert np.all(per_chunk > 0) and np.array_equal(per_chunk[1:], np.broadcast_to(per_chunk[0], per_chunk[1:].shape))


def test_a_stateful_model_is_profiled_in_chunks(tmp_path):
    xml = save_dynamic(build_stateful_lm(layers=2), tmp_path / "lm.xml")
    m = lower(xml, parse_request([], seq_len=8))
    t = load_target("virtual")
    m = PassManager([make_pass("support", {"target": t})]).run(m)
    costs, info = profile_costs(m, t, runs=2, chunk=8, whole_max=0)
    assert info["CPU"]["chunks"] > 2
    tt = costs.op_time.numpy()
    assert np.all(np.isfinite(tt)) and tt.sum() > 0


def test_chunk_options_enter_the_profile_key_only_when_set():
    t = load_target("virtual")
    default = make_pass("profile", {"target": t})
    assert "chunk" not in default.key_value() and "whole_max" not in default.key_value()
    assert make_pass("profile", {"target": t, "chunk": 64}).key_value()["chunk"] == 64
    assert make_pass("profile", {"target": t, "whole_max": 0}).key_value()["whole_max"] == 0


def test_a_dynamic_shape_at_a_boundary_leaves_the_model_whole():
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([-1, 4], np.float32, name="x")
    h = x
    for i in range(6):
        h = ops.relu(h, name=f"r{i}")
    model = ov.Model([ops.result(h)], [x], "dyn")
    with pytest.raises(chunks.ChunkError, match="dynamic shape"):
        chunks.chunk_models(model, 2)

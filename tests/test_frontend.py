import numpy as np
import pytest
from conftest import build_branchy, save_model

from hdp.base.errors import InputError
from hdp.ir.openvino_frontend import lower
from hdp.ir.shapes import parse_input_shapes
from hdp.ir.verify import verify


def by_name(m):
    return {op.name: i for i, op in enumerate(m.graph.ops)}


def edges(m):
    g = m.graph
    ip, ix = g.indptr.numpy(), g.indices.numpy()
    sp, dp, eb = g.src_port.numpy(), g.dst_port.numpy(), g.edge_bytes.numpy()
    names = [op.name for op in g.ops]
    return {(names[u], int(sp[k]), names[ix[k]], int(dp[k])): int(eb[k])
            for u in range(g.n_ops) for k in range(ip[u], ip[u + 1])}


def test_branches_and_multi_output(branchy_xml):
    m = lower(branchy_xml)
    verify(m)
    idx = by_name(m)
    e = edges(m)
    g = m.graph
    # Split has two outputs; both feed both Add and Multiply: four edges, each from its own port
    assert len(g.ops[idx["split"]].out_shapes) == 2
    assert e[("split", 0, "add", 0)] == e[("split", 1, "add", 1)] == 1 * 4 * 16 * 16 * 4
    assert ("split", 0, "mul", 0) in e and ("split", 1, "mul", 1) in e
    # relu has two consumers (split and the 'feat' Result): one edge each, full tensor bytes
    assert e[("relu", 0, "split", 0)] == e[("relu", 0, "feat", 0)] == 8 * 16 * 16 * 4
    # topological order: every edge goes forward
    for (u, _, v, _) in e:
        assert idx[u] < idx[v]
    assert g.ops[idx["w"]].type == "Constant" and g.ops[idx["w"]].weight_bytes == 8 * 3 * 3 * 3 * 4
    assert g.ops[idx["conv"]].flops == 2 * 8 * 16 * 16 * 27
    assert m.meta["input_shapes"] == "x:1,3,16,16"


def test_matmul_flops(mlp_xml):
    m = lower(mlp_xml)
    ops = {op.name: op for op in m.graph.ops}
    assert ops["mm1"].flops == 2 * 32 * 64
    assert ops["mm2"].flops == 2 * 64 * 10
    assert ops["act"].flops == 64


def test_dynamic_batch_defaults_to_one(dynamic_xml):
    m = lower(dynamic_xml)
    ops = {op.name: op for op in m.graph.ops}
    assert ops["x"].out_shapes == ((1, 32),)
    assert m.meta["input_shapes"] == "x:1,32"


def test_dynamic_batch_from_input_shape(dynamic_xml):
    m = lower(dynamic_xml, parse_input_shapes(["x:4,32"]))
    assert {op.name: op for op in m.graph.ops}["y"].out_shapes == ((4, 10),)


def test_dynamic_beyond_batch_needs_input_shape(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, -1], np.float32, name="tokens")
    model = ov.Model([ops.result(ops.relu(x), name="r")], [x], "dyn2")
    p = save_model(model, tmp_path / "d.xml")
    with pytest.raises(InputError, match="tokens.*--input-shape"):
        lower(p)
    m = lower(p, {"tokens": [1, 7]})
    assert m.graph.ops[0].out_shapes == ((1, 7),)
    with pytest.raises(InputError, match="no input 'nope'"):
        lower(p, {"nope": [1, 7]})
    with pytest.raises(InputError, match="rank"):
        lower(p, {"tokens": [7]})


def test_duplicate_names_made_unique(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 4], np.float32, name="x")
    a = ops.relu(x, name="act")
    b = ops.relu(a, name="act")
    model = ov.Model([ops.result(b, name="out")], [x], "dup")
    m = lower(save_model(model, tmp_path / "dup.xml"))
    names = [op.name for op in m.graph.ops]
    assert len(set(names)) == len(names)
    assert "act#1" in names and m.graph.renamed["act#1"] == "act"


@pytest.mark.parametrize("spec", ["x", ":1,2", "x:a,b", "x:-1,3", "x:f32"])
def test_bad_input_shape_spec(spec):
    with pytest.raises(InputError, match="--input-shape"):
        parse_input_shapes([spec])


def test_input_shape_spec_scalars_zero_sizes_and_types():
    from hdp.ir.shapes import parse_request

    assert parse_input_shapes(["s:", "x:0,3", "in:0:1,224x224:f32"]) == {"s": [], "x": [0, 3], "in:0": [1, 224, 224]}
    r = parse_request(["ids:1,16:i64;s::bool"], seq_len=8, phase="decode")
    assert r.shapes == {"ids": (1, 16), "s": ()} and r.types == {"ids": "i64", "s": "boolean"}
    assert (r.seq_len, r.phase) == (8, "decode")
    with pytest.raises(InputError, match="--seq-len 0"):
        parse_request([], seq_len=0)


def test_lowering_is_deterministic(branchy_xml):
    from hdp.ir import serde

    assert serde.digest(lower(branchy_xml)) == serde.digest(lower(branchy_xml))


def test_model_without_constants_lowers(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([2, 2], np.float32, name="x")
    model = ov.Model([ops.result(ops.relu(x, name="r"), name="o")], [x], "noconst")
    m = lower(save_model(model, tmp_path / "nc.xml"))
    assert [op.type for op in m.graph.ops] == ["Parameter", "Relu", "Result"]


def test_every_op_lowered(branchy_xml):
    m = lower(branchy_xml)
    names = sorted(op.get_friendly_name() for op in build_branchy().get_ordered_ops())
    assert sorted(op.name for op in m.graph.ops) == names
    assert m.graph.n_ops == 11 and m.graph.n_edges == 13  # one per consumer input

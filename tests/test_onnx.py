"""ONNX in: ``hdp compile/lower/profile/show model.onnx`` read it through OpenVINO's ONNX frontend; the
placed output is IR. A file that is not ONNX, or a truncated one, is one line naming it, exit 2."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.cli.main import main

onnx = pytest.importorskip("onnx", reason="the onnx package (dev extra) builds the test's ONNX file")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def mlp_onnx(tmp_path):
    """x[batch, 16] -> MatMul -> Add -> Relu -> MatMul -> Softmax, batch dynamic (onnx helper API)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
               for n, s in (("W1", (16, 32)), ("b1", (32,)), ("W2", (32, 8)))]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="fc1"),
             helper.make_node("Add", ["h1", "b1"], ["h2"], name="bias1"),
             helper.make_node("Relu", ["h2"], ["h3"], name="act"),
             helper.make_node("MatMul", ["h3", "W2"], ["h4"], name="fc2"),
             helper.make_node("Softmax", ["h4"], ["y"], name="prob", axis=-1)]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    return path


def test_compile_an_onnx_model_writes_a_placed_ir(mlp_onnx, tmp_path):
    import openvino as ov

    from hdp.runtime.placed.model import compile_placed, read_placed

    out = tmp_path / "placed.xml"
    r = run("compile", mlp_onnx, "-o", out, "--target", "virtual", "--method", "random", "--seed", "0",
            "--no-compare", "--no-cache")
    assert r.exit_code == 0, r.output
    assert "checked: runs under HETERO" in r.output
    assert out.read_text().startswith("<?xml") and "<net " in out.read_text()  # IR, not ONNX
    pm = read_placed(out)
    assert [i.get_any_name() for i in pm.model.inputs] == ["x"] and pm.model.inputs[0].get_partial_shape().is_dynamic
    x = np.random.default_rng(1).standard_normal((3, 16)).astype(np.float32)
    want = ov.Core().compile_model(str(mlp_onnx), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})({0: x})[0]
    got = compile_placed(out)({0: x})[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-2

    m = tmp_path / "m.hdp"
    r = run("lower", mlp_onnx, "-o", m)
    assert r.exit_code == 0 and "10 ops" in r.output, r.output
    costs = tmp_path / "c.json"
    r = run("profile", mlp_onnx, "--target", "virtual", "-o", costs, "--no-cache", "--runs", "2")
    assert r.exit_code == 0, r.output
    assert {op["name"] for op in json.loads(costs.read_text())["ops"]} >= {"fc1", "fc2"}
    r = run("show", mlp_onnx)
    assert r.exit_code == 0 and "ops: 10" in r.output and "not placed" in r.output


@pytest.mark.parametrize("content", [b"this is not ONNX\n", "truncated"])
def test_a_bad_onnx_file_is_one_line_naming_it(mlp_onnx, tmp_path, content):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(mlp_onnx.read_bytes()[:200] if content == "truncated" else content)
    out = tmp_path / "out.xml"
    for args in (("compile", bad, "-o", out, "--target", "virtual", "--no-cache"), ("lower", bad, "-o", tmp_path / "m.hdp"),
                 ("profile", bad, "--target", "virtual", "-o", tmp_path / "c.json", "--no-cache")):
        r = run(*args)
        assert r.exit_code == 2, r.output
        lines = r.output.strip().splitlines()
        assert len(lines) == 1 and "bad.onnx: not an ONNX model" in lines[0], r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx", "mlp.onnx"]  # nothing written

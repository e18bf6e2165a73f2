"""Compressed weights are constant data of their consumer everywhere (issue 9 item 3).

An FP16-compressed IR puts a Convert after every weight, an NNCF int8 IR a Convert/Subtract/
Multiply chain: on `ultra-npu`, whose NPU does not list Convert, those chains must not keep the
weights' consumers off the NPU, and an FP16 IR must be placed like its f32 twin.
"""

import numpy as np
import pytest

from hdp.ir.openvino_frontend import lower
from hdp.passes.partition import PartitionPass
from hdp.passes.profile import ProfilePass
from hdp.passes.support import SupportPass
from hdp.placement.problem import build_problem
from hdp.placement.structure import CONE, PLACED, roles
from hdp.placers.options import Optimal
from hdp.runtime.costs.profile import op_bytes
from hdp.target.target import load_target


def placed_devices(xml, target):
    """The optimal device of every placed op (constant data left out), in op order, and the module."""
    m = lower(xml)
    for p in (SupportPass(target=target), ProfilePass(target=target)):
        m = p.run(m)
    m = PartitionPass(target=target, placer=Optimal()).run(m)
    problem = build_problem(m, target.device_names)
    dev = problem.op_devices(m.partition.group_device.numpy())
    keep = roles(m.graph) == PLACED
    return [(m.graph.ops[i].type, target.device_names[dev[i]]) for i in np.nonzero(keep)[0]], m


@pytest.fixture(scope="module")
def npu():
    return load_target("ultra-npu")


def build_mlp(tmp_path, weights: str):
    """x[1,256,1024] -> 4 x (MatMul 1024x1024 -> Relu) -> Result, with weights stored as f32, as
    f16 + Convert (an FP16-compressed IR) or as u8 + Convert/Subtract/Multiply (NNCF int8)."""
    import openvino as ov
    from conftest import save_model
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([1, 256, 1024], np.float32, name="x")
    h = x
    for k in range(4):
        w = rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03
        if weights == "f32":
            wt = ops.constant(w)
        elif weights == "f16":
            wt = ops.convert(ops.constant(w.astype(np.float16)), ov.Type.f32)
        else:
            scale = np.abs(w).max(axis=1, keepdims=True) / 127
            q = (np.round(w / scale) + 128).astype(np.uint8)
            zero = ops.convert(ops.constant(np.full((1024, 1), 128, np.uint8)), ov.Type.f32)
            wt = ops.multiply(ops.subtract(ops.convert(ops.constant(q), ov.Type.f32), zero),
                              ops.constant(scale.astype(np.float32)))
        h = ops.relu(ops.matmul(h, wt, False, True, name=f"mm{k}"), name=f"act{k}")
    return save_model(ov.Model([ops.result(h, name="y")], [x], "mlp"), tmp_path / f"mlp-{weights}.xml")


def test_fp16_and_int8_irs_are_placed_like_their_f32_twin(tmp_path, npu):
    f32, _ = placed_devices(build_mlp(tmp_path, "f32"), npu)
    assert {d for t, d in f32 if t == "MatMul"} == {"NPU"}  # the premise: big MatMuls go to the NPU
    f16, m16 = placed_devices(build_mlp(tmp_path, "f16"), npu)
    assert f16 == f32, "the Converts after the f16 weights changed the placement"
    converts = [i for i, op in enumerate(m16.graph.ops) if op.type == "Convert"]
    assert len(converts) == 4 and (roles(m16.graph)[converts] == CONE).all()
    i8, _ = placed_devices(build_mlp(tmp_path, "i8"), npu)
    assert i8 == f32, "the int8 decompression chain changed the placement"


@pytest.mark.slow
def test_fp16_zoo_cnn_is_placed_like_its_f32_twin(zoo_export, npu):
    f32, _ = placed_devices(zoo_export("resnet50"), npu)
    f16, _ = placed_devices(zoo_export("resnet50:fp16"), npu)
    assert f16 == f32 and "NPU" in {d for _, d in f32}


def test_integer_weights_cost_their_stored_bytes(zoo_export):
    f32 = lower(zoo_export("mobilenet_v2-tiny"))
    i8 = lower(zoo_export("mobilenet_v2-tiny:int8"))

    def conv_bytes(m):
        b = op_bytes(m.graph, "f32")
        return sorted(b[i] for i, op in enumerate(m.graph.ops) if op.type == "Convolution")

    a, b = np.array(conv_bytes(f32)), np.array(conv_bytes(i8))
    assert a.shape == b.shape
    assert (b <= a).all() and (b < a).any()  # u8 weights: a quarter of the f32 bytes, activations unchanged

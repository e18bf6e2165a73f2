"""Shared fixtures: tiny OpenVINO models built with openvino.opset13, saved to tmp_path."""

from __future__ import annotations

import numpy as np
import pytest


def _save(model, path):
    import openvino as ov

    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


def build_branchy(batch=1):
    """Conv -> Relu -> Split(2 outputs) -> {Add, Multiply} -> Add -> Result, plus a second Result
    on the Relu (a tensor with several consumers, a multi-output op, two graph outputs)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = ops.parameter([batch, 3, 16, 16], np.float32, name="x")
    w = ops.constant(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), name="w")
    conv = ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1], name="conv")
    relu = ops.relu(conv, name="relu")
    split = ops.split(relu, ops.constant(np.int64(1), name="axis"), 2, name="split")
    add = ops.add(split.output(0), split.output(1), name="add")
    mul = ops.multiply(split.output(0), split.output(1), name="mul")
    out = ops.add(add, mul, name="sum")
    r1 = ops.result(out, name="out")
    r2 = ops.result(relu, name="feat")
    return ov.Model([r1, r2], [x], "branchy")


def build_mlp(batch=1, dynamic=False):
    """MatMul -> Add -> Relu -> MatMul; with a dynamic batch when ``dynamic``."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(1)
    x = ops.parameter([-1 if dynamic else batch, 32], np.float32, name="x")
    w1 = ops.constant(rng.standard_normal((32, 64)).astype(np.float32), name="w1")
    b1 = ops.constant(rng.standard_normal((64,)).astype(np.float32), name="b1")
    w2 = ops.constant(rng.standard_normal((64, 10)).astype(np.float32), name="w2")
    h = ops.relu(ops.add(ops.matmul(x, w1, False, False, name="mm1"), b1, name="bias"), name="act")
    y = ops.matmul(h, w2, False, False, name="mm2")
    return ov.Model([ops.result(y, name="y")], [x], "mlp")


@pytest.fixture
def branchy_xml(tmp_path):
    return _save(build_branchy(), tmp_path / "branchy.xml")


@pytest.fixture
def mlp_xml(tmp_path):
    return _save(build_mlp(), tmp_path / "mlp.xml")


@pytest.fixture
def dynamic_xml(tmp_path):
    return _save(build_mlp(dynamic=True), tmp_path / "dyn.xml")


@pytest.fixture
def cache_dir(tmp_path):
    return tmp_path / "cache"


def save_model(model, path):
    return _save(model, path)


# Tiny zoo exports (transformers/keras models made the way users make them), cached per session.
from zoo_exports import (  # noqa: E402,F401
    bert_dynamic_xml,
    cnn_dynamic_xml,
    cnn_fp16_xml,
    llama_int4_xml,
    llama_stateful_xml,
    zoo_export,
)

"""Writer / loader round trip, with real HETERO compiles (CPU, and the two-CPU test bed)."""

import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.ir.openvino_frontend import lower
from hdp.ir.types import Array, Placement
from hdp.runtime.placed.model import compile_placed, read_placed, write_placed
from hdp.target.target import load_target


def placed(module, devices, device_of, method="test"):
    return module.replace(placement=Placement(method, tuple(devices), Array.of(np.asarray(device_of, np.int16))))


def run_plain(xml, x):
    import openvino as ov

    core = ov.Core()
    cm = core.compile_model(core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return [cm({0: x})[o] for o in cm.outputs]


def test_every_layer_carries_affinity(branchy_xml, tmp_path):
    import openvino as ov

    m = lower(branchy_xml)
    out = write_placed(placed(m, ["CPU"], np.zeros(m.graph.n_ops)), tmp_path / "p.xml")
    model = ov.Core().read_model(str(out))
    for op in model.get_ordered_ops():
        assert op.get_rt_info()["user_dataaffinity"].astype(str) == "CPU", op.get_friendly_name()
    assert model.get_rt_info(["hdp", "devices"]).astype(str) == "CPU"
    assert model.get_rt_info(["hdp", "method"]).astype(str) == "test"
    assert 'user_data name="affinity" value="CPU"' in out.read_text()


def test_loader_compiles_hetero_and_outputs_match(branchy_xml, tmp_path):
    m = lower(branchy_xml)
    out = write_placed(placed(m, ["CPU"], np.zeros(m.graph.n_ops)), tmp_path / "p.xml",
                       load_target("virtual"))
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    cm = compile_placed(out, config={})
    got = [cm({0: x})[o] for o in cm.outputs]
    want = run_plain(branchy_xml, x)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_split_across_two_real_devices(branchy_xml, tmp_path):
    """The virtual target: CPU and CPU_B (the CPU plugin registered again) really split the model."""
    m = lower(branchy_xml)
    names = [op.name for op in m.graph.ops]
    dev = np.array([1 if n in ("split", "add", "mul", "sum", "out", "axis") else 0 for n in names])
    t = load_target("virtual")
    out = write_placed(placed(m, ["CPU", "CPU_B"], dev), tmp_path / "p2.xml", t)
    pm = read_placed(out)
    assert pm.devices == ["CPU", "CPU_B"] and pm.target.name == "virtual"
    cm = compile_placed(out)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    got = [cm({0: x})[o] for o in cm.outputs]
    want = run_plain(branchy_xml, x)
    for a, b in zip(got, want):  # CPU_B runs in bf16: loose tolerance
        np.testing.assert_allclose(a, b, rtol=0.05, atol=0.1)


def test_weights_untouched(mlp_xml, tmp_path):
    m = lower(mlp_xml)
    out = write_placed(placed(m, ["CPU"], np.zeros(m.graph.n_ops)), tmp_path / "p.xml")
    assert out.with_suffix(".bin").read_bytes() == mlp_xml.with_suffix(".bin").read_bytes()


def test_unplaced_model_is_rejected_by_loader(mlp_xml):
    with pytest.raises(InputError, match="no op carries an affinity"):
        read_placed(mlp_xml)


def test_placement_with_unknown_device(branchy_xml, tmp_path):
    m = lower(branchy_xml)
    out = write_placed(placed(m, ["NOPE"], np.zeros(m.graph.n_ops)), tmp_path / "p.xml")
    with pytest.raises(InputError, match="NOPE"):
        compile_placed(out, target=load_target("virtual"))


def test_changed_source_is_detected(branchy_xml, tmp_path):
    m = lower(branchy_xml)
    branchy_xml.with_suffix(".bin").write_bytes(branchy_xml.with_suffix(".bin").read_bytes()[::-1])
    with pytest.raises(InputError, match="changed since it was lowered"):
        write_placed(placed(m, ["CPU"], np.zeros(m.graph.n_ops)), tmp_path / "p.xml")


def test_a_modeled_placement_names_the_modeled_devices_it_uses(branchy_xml, tmp_path):
    """Only GPU used on i9-flex170: the refusal names GPU, not the target's first device."""
    t = load_target("i9-flex170")
    m = lower(branchy_xml)
    out = write_placed(placed(m, t.device_names, np.ones(m.graph.n_ops)), tmp_path / "p.xml", target=t)
    with pytest.raises(InputError, match=r"placed on GPU, modeled device\(s\) of target 'i9-flex170'"):
        compile_placed(out)

"""A device's ``max_allocation``: a cap on one tensor (an iGPU allocates at most ~4 GiB in one buffer),
checked per tensor by the memory model; KV-cache tensors grow with ``--context``."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner
from conftest import _save
from openvino import opset13 as ops
from openvino._offline_transformations import compress_model_transformation

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.cli.show import show
from hdp.ir.openvino_frontend import lower, lower_model
from hdp.passes.profile import ProfilePass
from hdp.passes.support import SupportPass
from hdp.pipeline.schedule import make_pass
from hdp.placement.problem import build_problem
from hdp.runtime.placed.model import read_placed
from hdp.target.capacity import device_memory, max_allocations
from hdp.target.target import parse_target

#: a CPU and a GPU that is faster at everything, the GPU capping one tensor at ``{cap}``
FAST_GPU = """
name = "capped"
[[devices]]
name = "CPU"
kind = "modeled"
peak_flops = {{ f32 = 1e11 }}
memory_bandwidth = 1e10
op_overhead = 1e-6
[[devices]]
name = "GPU"
kind = "modeled"
peak_flops = {{ f32 = 1e13 }}
memory_bandwidth = 1e12
op_overhead = 1e-6
{cap}
[link]
latency = 1e-7
bandwidth = 1e12
subgraph_overhead = 1e-7
"""


def capped(cap: str | None = "100KiB"):
    return parse_target(FAST_GPU.format(cap=f'max_allocation = "{cap}"' if cap else ""), "capped")


def tower(widths=(32, 256, 32)):
    """MatMuls in a chain, one f32 weight each (``widths[i]`` square); the 256 one holds 256 KiB."""
    rng = np.random.default_rng(0)
    h = ops.parameter([1, widths[0]], np.float32, name="x")
    x = h
    for i, w in enumerate(widths):
        if x.get_output_partial_shape(0)[1].get_length() != w:
            x = ops.matmul(x, ops.constant(rng.standard_normal((x.get_output_shape(0)[1], w)).astype(np.float32)),
                           False, False, name=f"fit{i}")
        x = ops.relu(ops.matmul(x, ops.constant(rng.standard_normal((w, w)).astype(np.float32), name=f"w{i}"),
                                False, False, name=f"mm{i}"), name=f"act{i}")
    return ov.Model([ops.result(x, name="y")], [h], "tower")


def placed_module(xml, target, **partition):
    m = lower(xml)
    for p in (SupportPass(target=target), ProfilePass(target=target),
              make_pass("partition", {"target": target, "method": "optimal", **partition})):
        m = p.run(m)
    return m


def test_target_declares_a_cap_per_device_and_names_the_field_when_bad():
    t = capped("4GiB")
    assert t.device("GPU").max_allocation_bytes == 4 * 2**30 and t.device("CPU").max_allocation_bytes is None
    assert max_allocations(t).tolist() == [np.inf, 4 * 2**30]
    for bad in ('"lots"', "0", '"-1GiB"'):
        with pytest.raises(InputError, match=r"devices\[1\]\.max_allocation") as e:
            parse_target(FAST_GPU.format(cap=f"max_allocation = {bad}"), "capped")
        assert "\n" not in str(e.value)


def test_a_weight_over_the_cap_stays_off_the_device_and_the_rest_goes_there(tmp_path):
    xml = _save(tower(), tmp_path / "tower.xml")
    free = placed_module(xml, capped(None)).partition
    assert set(free.group_device.numpy().tolist()) == {1}  # without a cap the GPU runs everything
    m = placed_module(xml, capped("100KiB"))
    p = build_problem(m, m.support.devices, device_memory=device_memory(capped()))
    largest = p.largest_allocation()
    gd = m.partition.group_device.numpy()
    big = largest[:, 1] > 100 * 1024
    assert big.sum() >= 1 and (gd[big] == 0).all() and (gd[~big & p.allowed[:, 1]] == 1).all()
    # the one 256 KiB weight is the reason: its MatMul's group holds exactly that constant
    assert largest[big, 1].max() == 256 * 256 * 4


def test_a_tensor_no_device_can_hold_is_one_line_naming_it_and_every_cap(tmp_path):
    xml = _save(tower(), tmp_path / "tower.xml")
    both = FAST_GPU.format(cap='max_allocation = "100KiB"').replace(
        'name = "CPU"\nkind = "modeled"', 'name = "CPU"\nkind = "modeled"\nmax_allocation = "64KiB"')
    with pytest.raises(InputError, match=r"its constant 'w1' is 256\.0 KiB \(max_allocation: CPU 64\.0 KiB, "
                                         r"GPU 100\.0 KiB\)") as e:
        placed_module(xml, parse_target(both, "both"))
    assert "\n" not in str(e.value)


def test_the_cap_applies_to_the_device_s_own_copy_at_its_compute_precision():
    """A device that keeps a copy of its weights at its compute precision (the CPU plugin's memory
    model: an f16 convolution weight repacked to f32) allocates that copy; one that keeps the stored
    weights alone (a GPU's default model) allocates them as stored."""
    x = ops.parameter([1, 8, 4, 4], np.float32, name="x")
    w = ops.constant(np.ones((64, 8, 3, 3), np.float32), name="w")
    model = ov.Model([ops.result(ops.convolution(x, w, [1, 1], [1, 1], [1, 1], [1, 1]))], [x], "conv")
    compress_model_transformation(model)  # the weight stored in f16, decompressed by a Convert
    t = capped(None)
    p = build_problem(lower_model(model), t.device_names, device_memory=device_memory(t))
    big = p.largest_allocation().max(axis=0)
    elements = 64 * 8 * 3 * 3
    assert big.tolist() == [4 * elements, 2 * elements]  # (the largest activation, the output, is 4 KiB)
    assert device_memory(t).copies.tolist() == [1.0, 0.0]


@pytest.mark.slow
def test_kv_cache_tensors_grow_with_context_past_the_cap(tmp_path, llama_stateful_xml):
    """llama-tiny's KV cache holds 2 heads x 16 x 4 bytes per token and variable: 128 KiB at 1,024
    tokens, 256 KiB at 2,048. Under a 200 KiB cap the states (and the attention tied to them) go to
    the GPU at the shorter context and stay on the CPU at the longer one."""
    target = tmp_path / "capped.toml"
    target.write_text(FAST_GPU.format(cap='max_allocation = "200KiB"'))
    devices = {}
    for context in (1024, 2048):
        out = tmp_path / f"p{context}.xml"
        r = CliRunner().invoke(main, ["compile", str(llama_stateful_xml), "-o", str(out), "--target", str(target),
                                      "--method", "optimal", "--context", str(context), "--no-cache"])
        assert r.exit_code == 0, r.output
        pm = read_placed(out)
        devices[context] = {op.get_rt_info()["affinity"].astype(str) for op in pm.model.get_ordered_ops()
                            if op.get_type_name() in ("ReadValue", "Assign")}
        if context == 2048:
            assert "largest tensor" in show(str(out)) and "of at most 200.0 KiB" in show(str(out))
    assert devices == {1024: {"GPU"}, 2048: {"CPU"}}

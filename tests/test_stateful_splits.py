"""Stateful LLM splits that run under HETERO (issue 16): the state rule of hdp.placement.subgraphs.

HETERO cuts a component (same-device ops joined by tensors) that lies on a cycle of the component
graph, and the piece holding an Assign then reaches, through the Assign -> ReadValue control
dependency the IR reader adds, a ReadValue, its initialiser and an input another piece owns:
``Model references undeclared parameters: opset1::Parameter input_ids () -> (i64[?,?])``. The fast
tests reproduce that with a Llama-shaped decoder built with openvino.opset13 in optimum-intel's
layout and show the rule keeps it whole; the slow ones run ``hdp compile`` on tiny transformers
exports (Llama, Qwen2, Phi-3; 2 and 8 layers; f32 and int4) and check teacher-forced generation.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from dynamic_models import build_llama_lm, save
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import make_module, problem, random_types_and_edges

from hdp.placement.subgraphs import components, tangled_states, untangle
from hdp.zoo import models as zoo

UNDECLARED = "Model references undeclared parameters: opset1::Parameter input_ids () -> (i64[?,?])"
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


# --- the rule on hand-built graphs (no OpenVINO) ------------------------------------------------------

def skeleton(live=True):
    """A one-state decoder skeleton: ids -> emb -> layer0 -> concat(reorder(ReadValue), .) -> Assign,
    concat -> attn -> layer1 -> Result; the ReadValue's initialiser is shape arithmetic on ids."""
    types = ["Parameter", "Parameter", "X", "ShapeOf", "Constant", "X", "ReadValue", "X", "X", "X",
             "Assign", "X", "X", "Result"]
    #        0 ids        1 beam       2 emb 3 shape  4 zero      5 init 6 rv       7 reorder 8 layer0 9 concat
    #        10 assign 11 attn 12 layer1 13 out
    edges = [(0, 2), (0, 3), (3, 5), (4, 5), (5, 6), (6, 7), (1, 7), (2, 8), (7, 9), (8, 9), (9, 10),
             (9, 11), (11, 12), (12, 13)]
    n = len(types)
    live_shapes = np.array([t == "ShapeOf" for t in types]) if live else None
    return make_module(types, edges, np.ones((n, 2)), ties=[(6, 10)], live_shapes=live_shapes)


def test_a_state_in_a_component_on_a_cycle_is_tangled_and_untangle_keeps_a_split():
    p = problem(skeleton())
    s = p.structure
    grp = {i: int(s.group_of[i]) for i in range(s.n_ops) if s.group_of[i] >= 0}
    # ids joins the embedding (its data reader), beam the state group (its only reader)
    assert grp[0] == grp[2] and grp[1] == grp[6] == grp[7] == grp[9] == grp[10]
    # the live ShapeOf connects ids to the ReadValue: ids -> emb (D1), layer0 (D0), state (D1)
    gd = np.zeros(p.n_groups, np.int64)
    gd[[grp[0], grp[6]]] = 1
    assert sorted(tangled_states(s, s.op_devices(gd)).tolist()) == [6, 10]
    c = components(s, s.op_devices(gd))
    assert c.comp[0] == c.comp[6] and c.cyclic[c.comp[6]]
    fixed, moved = untangle(p, gd)
    assert moved > 0 and len(set(fixed.tolist())) == 2 and not tangled_states(s, s.op_devices(fixed)).size
    # a pipeline (embedding, layer 0 and the state on D1, the rest on D0) is left alone
    pipe = gd.copy()
    pipe[grp[8]] = 1
    assert not tangled_states(s, s.op_devices(pipe)).size
    assert untangle(p, pipe)[1] == 0
    # folded into a Constant (a static shape), the ShapeOf joins nothing: no cycle through the state
    q = problem(skeleton(live=False))
    assert not tangled_states(q.structure, q.structure.op_devices(gd)).size


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(6, 40), n_states=st.integers(1, 3))
def test_untangle_always_leaves_no_state_tangled(seed, n, n_states):
    rng = np.random.default_rng(seed)
    types, edges = random_types_and_edges(rng, n)
    xs = [i for i, t in enumerate(types) if t == "X"]
    ties = []
    for _ in range(min(n_states, len(xs) // 2)):
        a, b = sorted(rng.choice(xs, 2, replace=False).tolist())
        types[a], types[b] = "ReadValue", "Assign"
        xs = [x for x in xs if x not in (a, b)]
        ties.append((a, b))
    live = np.array([rng.random() < 0.5 for _ in types])
    m = make_module(types, edges, rng.uniform(0.5, 2.0, (len(types), 2)), ties=ties or None, live_shapes=live)
    p = problem(m)
    s = p.structure
    gd = rng.integers(0, 2, p.n_groups)
    fixed, moved = untangle(p, gd)
    assert not tangled_states(s, s.op_devices(fixed)).size
    if not tangled_states(s, s.op_devices(gd)).size:
        assert moved == 0 and np.array_equal(fixed, gd)
    assert moved == int((fixed != gd).sum())


# --- OpenVINO: the failure without the rule, and the split with it -------------------------------------

@pytest.fixture(scope="module")
def llama2(tmp_path_factory):
    from hdp.ir.openvino_frontend import lower
    from hdp.ir.shapes import parse_request

    xml = save(build_llama_lm(layers=2), tmp_path_factory.mktemp("llama") / "llama.xml")
    return xml, lower(xml, parse_request([], seq_len=8))


def _group_of(module, st_, name):
    return int(st_.group_of[next(i for i, op in enumerate(module.graph.ops) if op.name == name)])


def test_optimum_layout_structure(llama2):
    """Each layer's key and value states share a group with the attention that reads them (the CPU
    plugin's stateful attention: apart, the state fails with "Can not clone with new dims"); the
    layers stay apart: beam_idx joins layer 0's attention, the shallowest of its readers (joined to
    a later layer's it closed the group over every layer in between); ShapeOf(input_ids) is live."""
    from hdp.placement.problem import build_problem

    _, m = llama2
    s = build_problem(m, ("CPU", "CPU_B")).structure
    g = {n: _group_of(m, s, n) for n in ("past.0.key", "past.0.value", "layers.0.sdpa", "past.1.key",
                                         "past.1.value", "layers.1.sdpa", "beam_idx", "input_ids", "embed_tokens",
                                         "layers.0.q_proj")}
    assert g["past.0.key"] == g["past.0.value"] == g["layers.0.sdpa"] == g["beam_idx"]
    assert g["past.1.key"] == g["past.1.value"] == g["layers.1.sdpa"] != g["past.0.key"]
    assert g["input_ids"] == g["embed_tokens"] != g["past.0.key"]
    assert g["layers.0.q_proj"] not in (g["past.0.key"], g["past.1.key"])
    live = [m.graph.ops[i].name for i in np.nonzero(m.graph.live_shapes.numpy())[0]]
    assert "ids_shape" in live


def _hetero(xml, module, device_of):
    """Compile the placement the way hdp writes it (legalized, dynamic shapes kept) with HETERO on
    two f32 CPU plugin instances; returns the compiled model or raises OpenVINO's RuntimeError."""
    from hdp.ir import openvino_read as ovr
    from hdp.ir.openvino_legalize import legalize
    from hdp.placement.structure import PLACED, roles
    from hdp.target.devices import make_core
    from hdp.target.target import load_target

    model = ovr.read_model(xml)
    names = [("CPU", "CPU_B")[int(d)] for d in device_of]
    legalize(model, list(model.get_ordered_ops()), roles(module.graph) == PLACED, names)
    for op in model.get_ordered_ops():
        rt = op.get_rt_info()
        rt["affinity"] = rt["user_dataaffinity"].astype(str)
    return make_core(load_target("virtual-f32")).compile_model(model, "HETERO:CPU,CPU_B")


def test_hetero_cuts_a_tangled_state_and_the_untangled_split_generates(llama2):
    """The embedding and layer 1's attention on CPU_B, the rest on CPU: input_ids (embedding) and
    layer 1's state initialiser (ShapeOf(input_ids)) join one CPU_B component, which feeds layer 0
    on CPU and waits for it: HETERO cuts it and fails with OpenVINO's own message. Untangled, the
    placement still uses both devices and generates the plain compile's logits (f32 on both)."""
    import openvino as ov

    xml, m = llama2
    from hdp.placement.problem import build_problem

    p = build_problem(m, ("CPU", "CPU_B"))
    s = p.structure
    gd = np.zeros(p.n_groups, np.int64)
    gd[[_group_of(m, s, "input_ids"), _group_of(m, s, "past.1.value")]] = 1
    bad = {m.graph.ops[i].name for i in tangled_states(s, s.op_devices(gd))}
    assert {"past.1.value", "past.1.key", "past.0.key"} <= bad
    with pytest.raises(RuntimeError, match=re.escape(UNDECLARED)):
        _hetero(xml, m, s.op_devices(gd))

    fixed, moved = untangle(p, gd)
    dev = s.op_devices(fixed)
    assert moved > 0 and set(dev.tolist()) == {0, 1} and not tangled_states(s, dev).size
    ids = np.random.default_rng(0).integers(1, 40, (2, 5))
    want = zoo.generate(ov.Core().compile_model(str(xml), "CPU", F32), ids, steps=4)
    got = zoo.generate(_hetero(xml, m, dev), ids, steps=4, follow=want.tokens)
    for a, b in zip(got.logits, want.logits):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


# --- hdp compile on tiny transformers exports (slow) ---------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name, target, method, seed", [
    ("llama-tiny:stateful,int4", "virtual", "random", 0),
    ("qwen2-tiny-8l:stateful", "virtual", "heft", 0),
    ("phi3-tiny:stateful", "i9-flex170", "heft", 0),
    ("phi3-tiny-8l:stateful,int4", "ultra-npu", "random", 3),
    ("llama-tiny-8l:stateful,int4", "i9-flex170", "random", 1),
])
def test_stateful_exports_split_without_fallback_and_generate(zoo_export, tmp_path, name, target, method, seed):
    """optimum-intel-layout exports placed by ``hdp compile``: a split (both devices used), no
    fallback, and teacher-forced logits within the tolerance ``hdp compile`` states."""
    from click.testing import CliRunner

    from hdp.cli.main import main
    from hdp.runtime.serve.verify import check_generation
    from hdp.target.target import load_target

    xml = zoo_export(name)
    out = tmp_path / "placed.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", target, "--method", method,
                                  "--seed", str(seed), "--seq-len", "16", "--no-compare", "--no-cache"])
    assert r.exit_code == 0, r.output
    assert "fell back" not in r.output, r.output
    g = check_generation(out, xml, load_target(target), seed=seed)
    assert len(g.used) == 2, g.used
    assert g.passed, (g.errors, g.tolerance, g.floor)

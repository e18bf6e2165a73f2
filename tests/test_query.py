"""``support`` per op signature (hdp.runtime.measure.query) against OpenVINO's whole-model ``query_model``.

On this host's devices (the CPU plugin, twice) every op of every model is supported, so the zoo
comparisons check the mechanics (cut-out models, names, stateful models, the context fallback);
the custom-op model has an op the CPU plugin does not support, next to ones it does, and checks
that the answers differ where whole-model ``query_model`` says they do.
"""

from __future__ import annotations

import hostile
import numpy as np
import pytest

from hdp.runtime.measure import query

# --------------------------------------------------------------------------- in process


def _noeval_op():
    import openvino as ov

    class NoEval(ov.Op):
        """An identity op with no evaluate(): the CPU plugin cannot run it."""

        class_type_info = ov.DiscreteTypeInfo("NoEval", "extension")

        def __init__(self, inputs=None):
            super().__init__(self, inputs)
            if inputs:
                self.constructor_validate_and_infer_types()

        def validate_and_infer_types(self):
            self.set_output_type(0, self.get_input_element_type(0), self.get_input_partial_shape(0))

        def clone_with_new_inputs(self, new_inputs):
            return type(self)(new_inputs)

        def get_type_info(self):
            return type(self).class_type_info

        def visit_attributes(self, visitor):
            return True

    class WithEval(NoEval):
        """The same, with evaluate(): the CPU plugin runs it by reference."""

        class_type_info = ov.DiscreteTypeInfo("WithEval", "extension")

        def has_evaluate(self):
            return True

        def evaluate(self, outputs, inputs):
            inputs[0].copy_to(outputs[0])
            return True

    return NoEval, WithEval


def _mixed_model():
    """Relu, an op the CPU cannot run (twice, two shapes), Relu, one it can, Add with a constant."""
    import openvino as ov
    from openvino import opset13 as ops

    NoEval, WithEval = _noeval_op()
    x = ops.parameter([1, 4], np.float32, name="x")
    a = ops.relu(x, name="a")
    b = NoEval([a.output(0)])
    b.set_friendly_name("b")
    c = ops.relu(b, name="c")
    d = WithEval([c.output(0)])
    d.set_friendly_name("d")
    e = ops.add(d, ops.constant(np.ones((1, 4), np.float32), name="k"), name="e")
    r = ops.reshape(e, ops.constant(np.array([4, 1], np.int64), name="shape"), False, name="r")
    f = NoEval([r.output(0)])
    f.set_friendly_name("f")
    return ov.Model([ops.result(f, name="out")], [x], "mixed")


def _whole_and_new(model, device="CPU"):
    import openvino as ov

    from hdp.ir.op_identity import supported_mask

    core = ov.Core()
    ops_ = model.get_ordered_ops()
    sigs, feeds = query.signatures(ops_)
    asked = []

    def ask(m):
        asked.append(m)
        return set(core.query_model(m, device))

    answers, cost = query.answer(model, sigs, query.plan(model, sigs, feeds), ask)
    new = query.mask(len(ops_), sigs, answers)
    whole = supported_mask(ops_, core.query_model(model, device))
    anywhere = np.array([o.get_type_name() in query.ANYWHERE for o in ops_])
    return new, whole | anywhere, sigs, cost, asked


def test_signatures_answer_like_whole_model_query_with_an_unsupported_op():
    new, whole, sigs, cost, asked = _whole_and_new(_mixed_model())
    names = [o.get_friendly_name() for o in _mixed_model().get_ordered_ops()]
    assert not whole.all(), "the CPU plugin should not support the op without evaluate()"
    assert np.array_equal(new, whole), list(zip(names, new, whole))
    assert cost == {"queries": 1, "in_context": 0} and len(asked) == 1
    assert sigs.asked() == 6  # Relu (twice, one signature), NoEval at two shapes, WithEval, Add, Reshape


def test_a_chain_has_two_signatures_and_one_small_query():
    m = hostile.chain_model(2000)
    new, whole, sigs, cost, asked = _whole_and_new(m)
    assert sigs.asked() == 2 and np.array_equal(new, whole)
    assert cost["queries"] == 1 and len(asked[0].get_ordered_ops()) < 10
    distinct = hostile.chain_model(200, shared=False)  # seven constant values: seven Add signatures
    assert query.signatures(distinct.get_ordered_ops())[0].asked() == 8


def test_known_shape_arithmetic_is_cut_out_as_constants():
    """A Reshape whose target comes from ShapeOf arithmetic on static shapes: the cut-out copy
    gets the value as a Constant, so it infers the original's static output shape."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([2, 3, 4], np.float32, name="x")
    shape = ops.concat([ops.gather(ops.shape_of(x), ops.constant(np.array([0]), np.int64), ops.constant(0)),
                        ops.constant(np.array([-1], np.int64))], 0)
    y = ops.reshape(ops.relu(x, name="r"), shape, False, name="flat")
    m = ov.Model([ops.result(y, name="out")], [x], "shapes")
    sigs, feeds = query.signatures(m.get_ordered_ops())
    plan = query.plan(m, sigs, feeds)
    assert not plan.context and not plan.alone
    cut = {o.get_friendly_name(): o for mm, _ in plan.models for o in mm.get_ordered_ops()}
    k = sigs.sig_of[[o.get_friendly_name() for o in m.get_ordered_ops()].index("flat")]
    assert list(cut[f"hdp_sig{k}"].get_output_shape(0)) == [2, 12]
    assert np.array_equal(*_whole_and_new(m)[:2])


def test_batches_are_bounded():
    m = hostile.chain_model(40, shared=False)
    sigs, feeds = query.signatures(m.get_ordered_ops())
    plan = query.plan(m, sigs, feeds, batch=3)
    assert [len(ks) for _, ks in plan.models] == [3, 3, 2]


# --------------------------------------------------------------------------- through the worker


def _compare(xml, target="virtual", cache_dir=""):
    """The support pass's columns (per signature) and whole-model query_model's, both with
    Parameters, Constants and Results supported everywhere (what the pass does)."""
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.support import ANYWHERE, query_support
    from hdp.runtime.measure.measurer import Measurer
    from hdp.target.target import load_target

    m = lower(xml)
    t = load_target(target)
    devices = [d.name for d in t.devices if d.kind == "real"]
    new = query_support(m, t, devices, cache_dir=cache_dir)
    with Measurer(m, t, cache=False) as me:
        whole = me.support_of(devices)
    anywhere = np.isin([op.type for op in m.graph.ops], list(ANYWHERE))
    return m, new, [np.array(whole[d], bool) | anywhere for d in devices]


@pytest.mark.parametrize("name", ["branchy", "mlp", "chain"])
def test_support_equals_whole_model_query_on_tiny_models(name, branchy_xml, mlp_xml, tmp_path):
    xml = {"branchy": branchy_xml, "mlp": mlp_xml}.get(name) or hostile.save(hostile.chain_model(300),
                                                                             tmp_path / "chain.xml")
    _, new, whole = _compare(xml)
    for a, b in zip(new, whole):
        assert np.array_equal(a, b)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-tiny:dynamic", "llama-tiny:stateful", "llama-tiny:stateful,int4",
                                  "mobilenet_v2-tiny", "gpt2-tiny"])
def test_support_equals_whole_model_query_on_the_zoo(zoo_export, name):
    _, new, whole = _compare(zoo_export(name))
    for a, b in zip(new, whole):
        assert np.array_equal(a, b)


def test_signature_answers_are_memoised_across_models(tmp_path, monkeypatch):
    """A longer chain has the same signatures as a shorter one: once the short one was asked, the
    long one starts no query (only the worker's signatures)."""
    from hdp.ir.openvino_frontend import lower
    from hdp.passes.support import query_support
    from hdp.runtime.measure import measurer as measure
    from hdp.target.target import load_target

    short = lower(hostile.save(hostile.chain_model(100), tmp_path / "short.xml"))
    long_ = lower(hostile.save(hostile.chain_model(400), tmp_path / "long.xml"))
    t = load_target("virtual")
    asked = []
    real = measure.Measurer.query_signatures
    monkeypatch.setattr(measure.Measurer, "query_signatures", lambda self, ask: (asked.append(ask), real(self, ask))[1])
    first = query_support(short, t, ["CPU", "CPU_B"], cache_dir=str(tmp_path / "q"))
    assert asked == [{"CPU": [0, 1], "CPU_B": [0, 1]}] and all(c.all() for c in first)
    again = query_support(long_, t, ["CPU", "CPU_B"], cache_dir=str(tmp_path / "q"))
    assert len(asked) == 1 and all(c.all() and c.shape == (long_.graph.n_ops,) for c in again)

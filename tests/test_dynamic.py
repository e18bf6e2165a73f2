"""Dynamic models: placed on a static specialisation, written onto the original.

Models come from :mod:`dynamic_models` (opset13, shaped as exporters shape them). Placements are
made by hand so the split is known; HETERO runs them on the ``virtual`` target (CPU f32 + CPU_B,
the CPU plugin registered again with a bf16 hint: outputs are compared with a bf16 tolerance).
"""

import numpy as np
import pytest
from click.testing import CliRunner
from dynamic_models import build_cnn, build_encoder, build_stateful_lm, save

from hdp.base.errors import InputError
from hdp.ir import op_identity as oi
from hdp.ir import openvino_frontend as fe
from hdp.ir import openvino_read as ovr
from hdp.ir.openvino_frontend import lower
from hdp.ir.shapes import parse_request
from hdp.ir.types import Array, Placement
from hdp.passes.manager import PassManager
from hdp.pipeline.schedule import make_pass
from hdp.runtime.placed.model import compile_placed, write_placed
from hdp.target.target import load_target

BF16 = dict(rtol=0.05, atol=0.05)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("dyn")
    return {"cnn": save(build_cnn(), d / "cnn.xml"), "enc": save(build_encoder(), d / "enc.xml"),
            "lm": save(build_stateful_lm(), d / "lm.xml")}


def placed(module, device_of, devices=("CPU", "CPU_B")):
    return module.replace(placement=Placement("test", tuple(devices), Array.of(np.asarray(device_of, np.int16))))


def plain(xml):
    import openvino as ov

    core = ov.Core()
    return core.compile_model(core.read_model(str(xml)), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})


def by_name(module):
    return {op.name: op for op in module.graph.ops}


# --------------------------------------------------------------------------- specialisation


def test_defaults_batch_one_and_seq_len(models):
    m = lower(models["cnn"])
    assert by_name(m)["x"].out_shapes == ((1, 3, 16, 16),)
    assert m.meta["input_shapes"] == "x:1,3,16,16" and "seq_len" not in m.meta
    e = lower(models["enc"])
    assert e.meta["input_shapes"] == "input_ids:1,128;attention_mask:1,128;token_type_ids:1,128"
    assert e.meta["seq_len"] == "128"
    e16 = lower(models["enc"], parse_request([], seq_len=16))
    assert by_name(e16)["l1.norm"].out_shapes == ((1, 16, 32),)
    # --input-shape wins over the defaults, for the inputs it names
    e2 = lower(models["enc"], parse_request(["input_ids:2,9", "attention_mask:2,9", "token_type_ids:2,9"]))
    assert by_name(e2)["l1.norm"].out_shapes == ((2, 9, 32),)
    spec = fe.module_specialisation(e2)
    assert [i.shape for i in spec.inputs] == [(2, 9)] * 3 and spec.seq_len == 0


def test_stateful_prefill_and_decode_specialisations(models):
    pre = lower(models["lm"], parse_request([], seq_len=16))
    ops = by_name(pre)
    assert pre.meta["phase"] == "prefill"
    assert pre.meta["input_shapes"] == "input_ids:1,16;attention_mask:1,16;position_ids:1,16;beam_idx:1"
    # prefill: the state starts as its initialiser makes it (past length 0) and grows by seq_len
    assert ops["past.0.key"].out_shapes == ((1, 2, 0, 16),)
    assert ops["present.0.key"].out_shapes == ((1, 2, 16, 16),)
    assert ops["assign.1.value"].out_shapes == ((1, 2, 16, 16),)
    assert ops["logits"].out_shapes == ((1, 16, 40),)
    dec = lower(models["lm"], parse_request([], seq_len=16, phase="decode"))
    ops = by_name(dec)
    assert dec.meta["input_shapes"] == "input_ids:1,1;attention_mask:1,17;position_ids:1,1;beam_idx:1"
    assert ops["past.1.value"].out_shapes == ((1, 2, 16, 16),) and ops["present.1.value"].out_shapes == ((1, 2, 17, 16),)
    assert ops["logits"].out_shapes == ((1, 1, 40),)
    # states given by variable id
    given = [f"past_key_values.{k}.{w}present.{k}.{w}:1,2,5,16" for k in (0, 1) for w in ("key", "value")]
    m = lower(models["lm"], parse_request(given, seq_len=3, phase="decode"))
    assert by_name(m)["present.0.key"].out_shapes == ((1, 2, 6, 16),)
    assert m.meta["input_shapes"] == "input_ids:1,1;attention_mask:1,4;position_ids:1,1;beam_idx:1"
    with pytest.raises(InputError, match="states .*:1,2,5,16;.*:1,2,3,16.* do not fit the model"):
        lower(models["lm"], parse_request(given[:1], seq_len=3, phase="decode"))  # keys and values disagree
    # same structure whatever the specialisation: the ops are the original's
    assert oi.graph_structure(pre.graph) == oi.graph_structure(dec.graph)


def test_lowering_a_stateful_model_is_deterministic(models):
    from hdp.ir import serde

    assert serde.digest(lower(models["lm"])) == serde.digest(lower(models["lm"]))


def test_missing_shapes_are_listed_together_with_an_example(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    a = ops.parameter([-1, 3, -1, -1], np.float32, name="pixel_values")
    b = ops.parameter(ov.PartialShape.dynamic(), np.float32, name="extra")
    c = ops.parameter([-1, 8], np.float32, name="ok")
    xml = save(ov.Model([ops.result(ops.relu(p)) for p in (a, b, c)], [a, b, c], "two"), tmp_path / "two.xml")
    with pytest.raises(InputError) as e:
        lower(xml)
    msg = str(e.value)
    assert "no shape for 2 inputs" in msg and "'ok'" not in msg
    assert "--input-shape pixel_values:1,3,D2,D3" in msg and "--input-shape extra:D0,D1,..." in msg
    assert f"hdp compile {xml}" in msg
    m = lower(xml, parse_request(["pixel_values:1,3,8,8", "extra:2,2"]))
    assert m.meta["input_shapes"] == "pixel_values:1,3,8,8;extra:2,2;ok:1,8"


def test_shapes_that_do_not_fit_and_misused_options(models, tmp_path):
    with pytest.raises(InputError, match=r"x:2,3,8,8 does not fit .*\[\?,3,16,16\]"):
        lower(models["cnn"], parse_request(["x:2,3,8,8"]))
    with pytest.raises(InputError, match="rank 2 but the input has rank 4"):
        lower(models["cnn"], parse_request(["x:2,3"]))
    with pytest.raises(InputError, match="no input 'nope'.*inputs: x"):
        lower(models["cnn"], parse_request(["nope:1"]))
    with pytest.raises(InputError, match="--seq-len 16: .* no transformer-style input"):
        lower(models["cnn"], parse_request([], seq_len=16))
    with pytest.raises(InputError, match="--phase decode: .* not stateful"):
        lower(models["enc"], parse_request([], phase="decode"))
    with pytest.raises(InputError, match="element type i64, but the input is f32"):
        lower(models["cnn"], parse_request(["x:1,3,16,16:i64"]))


def test_lower_cache_key_includes_the_specialisation(models, tmp_path):
    from hdp.passes.cache import PassCache
    from hdp.pipeline.stages import lower_cached

    cache = PassCache(tmp_path / "cache")
    a = lower_cached(models["enc"], parse_request([], seq_len=8), cache)
    b = lower_cached(models["enc"], parse_request([], seq_len=12), cache)
    assert a.meta["input_shapes"] != b.meta["input_shapes"]
    assert lower_cached(models["enc"], parse_request([], seq_len=8), cache).meta == a.meta


# --------------------------------------------------------------------------- op identity


def test_structure_check_refuses_a_different_model(models, tmp_path):
    import shutil

    xml = tmp_path / "m.xml"
    shutil.copy(models["cnn"], xml)
    shutil.copy(models["cnn"].with_suffix(".bin"), xml.with_suffix(".bin"))
    m = lower(xml)
    save(build_encoder(), xml)  # another model under the same name; the digest check is bypassed
    m = m.replace(meta={**m.meta, "source_digest": ovr.file_digest(xml)})
    with pytest.raises(InputError, match="changed since it was lowered"):
        write_placed(placed(m, np.zeros(m.graph.n_ops)), tmp_path / "p.xml")


def test_ops_are_matched_by_position_not_name(tmp_path):
    """Two ops share a friendly name and sit on different devices: each gets its own affinity."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([-1, 4], np.float32, name="x")
    a = ops.relu(x, name="act")
    b = ops.sigmoid(a, name="act")
    xml = save(ov.Model([ops.result(b, name="out")], [x], "dup"), tmp_path / "dup.xml")
    m = lower(xml)
    dev = [1 if op.type in ("Sigmoid", "Result") else 0 for op in m.graph.ops]
    out = write_placed(placed(m, dev), tmp_path / "p.xml", load_target("virtual"))
    got = {op.get_type_name(): op.get_rt_info()["user_dataaffinity"].astype(str)
           for op in ov.Core().read_model(str(out)).get_ordered_ops()}
    assert got["Relu"] == "CPU" and got["Sigmoid"] == "CPU_B"
    cm = compile_placed(out)
    x4 = np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(cm({0: x4})[0], 1 / (1 + np.exp(-np.maximum(x4, 0))), **BF16)


def test_name_mapping_helpers():
    class Node:
        def __init__(self, n):
            self.n = n

        def get_friendly_name(self):
            return self.n

    ops = [Node("a"), Node("b,c"), Node("a"), Node("d")]
    index = oi.name_positions(ops)
    assert index == {"a": [0, 2], "b,c": [1], "d": [3]}
    assert oi.layer_names_to_positions("b,c,d", index) == [1, 3]
    assert oi.layer_names_to_positions("zzz,a", index) == [0, 2]
    assert oi.most_name_parts(index) == 2 and oi.most_name_parts({}) == 1
    assert oi.supported_mask(ops, {"d", "a", "nope"}).tolist() == [True, False, True, True]


def _every_length(original, index):
    """:func:`hdp.ir.op_identity.layer_names_to_positions` as it was: every length tried."""
    parts = original.split(",") if original else []
    out, i = set(), 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            if ",".join(parts[i:j]) in index:
                out.update(index[",".join(parts[i:j])])
                i = j
                break
        else:
            i += 1
    return sorted(out)


def test_layer_names_map_as_when_every_length_was_tried():
    """Names with up to three commas, runtime nodes listing known and unknown names in any order:
    the bounded search finds what trying every length found."""
    rng = np.random.default_rng(0)
    pieces = ["a", "b", "c", "d", "e", "f"]
    names = sorted({",".join(rng.choice(pieces, size=int(rng.integers(1, 5)))) for _ in range(40)})
    index = {n: [k] for k, n in enumerate(names)}
    for _ in range(300):
        original = ",".join(rng.choice(names + ["zzz", "b,zzz"], size=int(rng.integers(0, 12))))
        assert oi.layer_names_to_positions(original, index) == _every_length(original, index), original
        singles = {k for n in original.split(",") if n in index for k in index[n]} if original else set()
        assert oi.layer_names_to_positions(original, index, 1) == sorted(singles)


# --------------------------------------------------------------------------- written models keep their shapes


def _split_half(module):
    n = module.graph.n_ops
    return [1 if i >= n // 2 else 0 for i in range(n)]


def test_dynamic_batch_cnn_split_runs_at_two_batch_sizes(models, tmp_path):
    import openvino as ov

    m = lower(models["cnn"])
    out = write_placed(placed(m, _split_half(m)), tmp_path / "cnn.xml", load_target("virtual"))
    model = ov.Core().read_model(str(out))
    assert [str(i.get_partial_shape()) for i in model.inputs] == ["[?,3,16,16]"]
    assert [str(o.get_partial_shape()) for o in model.outputs] == ["[?,5]"]
    assert [i.get_any_name() for i in model.inputs] == ["x"]
    assert [o.get_names() for o in model.outputs] == [o.get_names() for o in build_cnn().outputs]
    assert {op.get_rt_info()["user_dataaffinity"].astype(str) for op in model.get_ordered_ops()} == {"CPU", "CPU_B"}
    assert out.with_suffix(".bin").read_bytes() == models["cnn"].with_suffix(".bin").read_bytes()
    cm, ref = compile_placed(out), plain(models["cnn"])
    for b in (1, 4):
        x = np.random.default_rng(b).standard_normal((b, 3, 16, 16)).astype(np.float32)
        got = cm({"x": x})[0]
        assert got.shape == (b, 5)
        np.testing.assert_allclose(got, ref({"x": x})[0], **BF16)


def test_dynamic_sequence_encoder_split_runs_at_two_shapes(models, tmp_path):
    import openvino as ov

    m = lower(models["enc"], parse_request([], seq_len=16))
    out = write_placed(placed(m, _split_half(m)), tmp_path / "enc.xml", load_target("virtual"))
    model = ov.Core().read_model(str(out))
    assert [str(i.get_partial_shape()) for i in model.inputs] == ["[?,?]"] * 3
    assert model.get_rt_info(["hdp", "specialisation"]).astype(str) == m.meta["specialisation"]
    cm, ref = compile_placed(out), plain(models["enc"])
    for b, s in ((1, 7), (3, 20)):
        rng = np.random.default_rng(s)
        feed = {"input_ids": rng.integers(0, 50, (b, s)), "attention_mask": np.ones((b, s), np.int64),
                "token_type_ids": rng.integers(0, 2, (b, s))}
        got = cm(feed)[0]
        assert got.shape == (b, s, 32)
        np.testing.assert_allclose(got, ref(feed)[0], **BF16)


def _generate(compiled, steps=4, prompt=6):
    """Greedy generation: a prompt, then one token per step with the KV cache in the state."""
    req = compiled.create_infer_request()
    ids, past, logits_seen = np.arange(1, prompt + 1)[None], 0, []
    for _ in range(steps):
        n = ids.shape[1]
        logits = req.infer({"input_ids": ids, "attention_mask": np.ones((1, past + n), np.int64),
                            "position_ids": np.arange(past, past + n)[None],
                            "beam_idx": np.zeros(1, np.int32)})[0].copy()
        logits_seen.append(logits[:, -1])
        past += n
        ids = logits[:, -1:].argmax(-1)
    return np.stack(logits_seen), [tuple(s.state.shape) for s in req.query_state()]


def test_stateful_model_lowers_with_no_flags_and_generates_when_placed(models, tmp_path):
    import openvino as ov

    m = lower(models["lm"])  # no --input-shape, no --seq-len
    out = write_placed(placed(m, np.zeros(m.graph.n_ops)), tmp_path / "lm.xml", load_target("virtual"))
    model = ov.Core().read_model(str(out))
    assert [str(i.get_partial_shape()) for i in model.inputs] == ["[?,?]"] * 3 + ["[?]"]
    assert sorted(str(v.get_info().data_shape) for v in model.get_variables()) == ["[?,2,?,16]"] * 4
    got, states = _generate(compile_placed(out))
    want, _ = _generate(plain(models["lm"]))
    assert states == [(1, 2, 9, 16)] * 4  # 6 prompt tokens + 3 generated, carried in the state
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert (got.argmax(-1) == want.argmax(-1)).all()


# --------------------------------------------------------------------------- odd inputs


@pytest.mark.filterwarnings("ignore:profile on")
def test_dynamic_type_and_rank_input(tmp_path):
    """As a TorchScript export without an example input has it: type and rank dynamic."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter(ov.PartialShape.dynamic(), ov.Type.dynamic, name="x.1")
    w = ops.constant(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, name="w")
    y = ops.relu(ops.add(ops.matmul(x, w, False, False), ops.constant(np.float32(-0.5))), name="y")
    xml = save(ov.Model([ops.result(y, name="out")], [x], "ts"), tmp_path / "ts.xml")
    with pytest.raises(InputError, match=r"'x\.1' \(a dynamic element type and a dynamic rank\).*"
                                         r"--input-shape x\.1:D0,D1,\.\.\.:f32"):
        lower(xml)
    m = lower(xml, parse_request(["x.1:2,4:f32"]))
    assert m.graph.ops[0].out_types == ("f32",) and m.graph.ops[0].out_shapes == ((2, 4),)
    t = load_target("virtual")  # support and a measured profile used to die here with "map::at"
    m = PassManager([make_pass("support", {"target": t}), make_pass("profile", {"target": t, "runs": 2})]).run(m)
    mm = [i for i, op in enumerate(m.graph.ops) if op.type == "MatMul"]
    assert np.all(m.costs.op_time.numpy()[mm] > 0)
    out = write_placed(placed(m, _split_half(m)), tmp_path / "p.xml", t)
    model = ov.Core().read_model(str(out))
    # no device compiles a dynamic type or rank: those two take the given ones, dims stay dynamic
    assert str(model.inputs[0].get_partial_shape()) == "[?,?]" and model.inputs[0].get_element_type() == ov.Type.f32
    x5 = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    np.testing.assert_allclose(compile_placed(out)({0: x5})[0],
                               np.maximum(x5 @ (np.arange(12).reshape(4, 3) / 10) - 0.5, 0), **BF16)


@pytest.mark.filterwarnings("ignore:profile on")  # coverage warnings of a busy host
def test_scalar_and_zero_size_inputs_are_profiled(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([-1, 4], np.float32, name="x")
    s = ops.parameter([], np.float32, name="scale")
    e = ops.parameter([0, 4], np.float32, name="empty")
    y = ops.relu(ops.multiply(ops.concat([x, e], 0), s), name="y")
    xml = save(ov.Model([ops.result(y, name="out")], [x, s, e], "odd"), tmp_path / "odd.xml")
    m = lower(xml)
    assert m.meta["input_shapes"] == "x:1,4;scale:;empty:0,4"
    t = load_target("virtual")
    m = PassManager([make_pass("support", {"target": t}), make_pass("profile", {"target": t, "runs": 2})]).run(m)
    assert m.costs.op_time.numpy().shape == (m.graph.n_ops, 2)
    out = write_placed(placed(m, np.zeros(m.graph.n_ops)), tmp_path / "p.xml", t)
    got = compile_placed(out)({"x": np.ones((3, 4), np.float32), "scale": np.float32(2),
                               "empty": np.zeros((0, 4), np.float32)})[0]
    np.testing.assert_allclose(got, np.full((3, 4), 2.0))


def test_models_without_ops_or_inputs_are_refused(tmp_path):
    import openvino as ov
    from openvino import opset13 as ops

    xml = save(ov.Model([ops.result(ops.relu(ops.constant(np.ones(3, np.float32))))], [], "noin"), tmp_path / "n.xml")
    with pytest.raises(InputError, match="has no inputs"):
        lower(xml)
    empty = tmp_path / "empty.xml"
    empty.write_text('<?xml version="1.0"?>\n<net name="e" version="11"><layers></layers><edges></edges></net>\n')
    with pytest.raises(InputError, match="has no ops"):
        lower(empty)


# --------------------------------------------------------------------------- the measuring worker


@pytest.mark.filterwarnings("ignore:profile on")
def test_worker_measures_and_profiles_stateful_specialisations(models):
    from hdp.runtime.costs.profile import profile_costs
    from hdp.runtime.measure.measurer import Measurer

    t = load_target("virtual")
    for phase in ("prefill", "decode"):
        m = lower(models["lm"], parse_request([], seq_len=8, phase=phase))
        with Measurer(m, t, runs=2, warmup=1, cache=False) as me:
            assert me.latency(np.zeros(m.graph.n_ops, np.int16)) > 0
            assert me.loaded().spec == m.meta["specialisation"]
        costs, info = profile_costs(m, t, runs=2)
        sdpa = [i for i, op in enumerate(m.graph.ops) if op.type == "ScaledDotProductAttention"]
        assert all(costs.op_time.numpy()[sdpa, 0] > 0), phase
        assert info["CPU"]["unattributed"] == 0


def test_worker_refuses_a_module_whose_source_changed_structure(models, tmp_path):
    from hdp.runtime.measure.measurer import Measurer

    m = lower(models["cnn"])
    bad = m.replace(graph=lower(models["enc"]).graph)
    with Measurer(bad, load_target("virtual"), cache=False) as me:
        with pytest.raises(InputError, match="changed since it was lowered"):
            me.loaded()


def test_compile_command_on_a_dynamic_model(models, tmp_path):
    from hdp.cli.main import main

    out = tmp_path / "placed.xml"
    r = CliRunner().invoke(main, ["compile", str(models["enc"]), "-o", str(out), "--target", "virtual",
                                  "--method", "single:CPU_B", "--seq-len", "8", "--no-cache", "-q"])
    assert r.exit_code == 0, r.output
    cm, ref = compile_placed(out), plain(models["enc"])
    for b, s in ((1, 5), (2, 11)):
        feed = {"input_ids": np.ones((b, s), np.int64), "attention_mask": np.ones((b, s), np.int64),
                "token_type_ids": np.zeros((b, s), np.int64)}
        np.testing.assert_allclose(cm(feed)[0], ref(feed)[0], **BF16)
    r = CliRunner().invoke(main, ["lower", str(models["lm"]), "-o", str(tmp_path / "m.hdp"), "--phase", "decode",
                                  "--seq-len", "4"])
    assert r.exit_code == 0, r.output
    from hdp.ir.serde import load

    assert load(tmp_path / "m.hdp").meta["input_shapes"].startswith("input_ids:1,1;attention_mask:1,5")


# --------------------------------------------------------------------------- real exports (slow)


@pytest.mark.slow
def test_transformers_bert_export_split_runs_at_two_sequence_lengths(tmp_path):
    """A transformers BERT through ov.convert_model: dynamic [?,?] inputs and FP16-compressed
    weights. Reshaping it (the old way) made SmartReshape add ops with fresh auto names."""
    import openvino as ov
    from click.testing import CliRunner
    from dynamic_models import export_bert

    from hdp.cli.main import main

    xml = export_bert(tmp_path / "bert.xml")
    m = lower(xml, parse_request([], seq_len=32))
    assert m.meta["input_shapes"] == "input_ids:1,32;attention_mask:1,32;token_type_ids:1,32"
    # through hdp compile, which checks the split (a raw half split by op index can cut the
    # attention mask chain where HETERO cannot hand it over; compile repairs such placements)
    out = tmp_path / "p.xml"
    r = CliRunner().invoke(main, ["compile", str(xml), "-o", str(out), "--target", "virtual", "--method",
                                  "random", "--seed", "1", "--seq-len", "32", "--no-cache", "--no-compare"])
    assert r.exit_code == 0, r.output
    assert "fell back" not in r.output, r.output
    assert [str(i.get_partial_shape()) for i in ov.Core().read_model(str(out)).inputs] == ["[?,?]"] * 3
    cm, ref = compile_placed(out), plain(xml)
    for b, s in ((1, 5), (2, 17)):
        rng = np.random.default_rng(s)
        feed = {"input_ids": rng.integers(0, 100, (b, s)), "attention_mask": np.ones((b, s), np.int64),
                "token_type_ids": np.zeros((b, s), np.int64)}
        np.testing.assert_allclose(cm(feed)[0], ref(feed)[0], **BF16)


@pytest.mark.slow
def test_optimum_style_stateful_export_generates_when_placed(tmp_path):
    """convert_model + optimum-intel's make-stateful steps: lowered with no flags (prefill, then
    a decode specialisation), placed on one device, generating 4 greedy steps like the plain compile."""
    from dynamic_models import export_stateful_lm

    xml = export_stateful_lm(tmp_path / "lm.xml")
    m = lower(xml)
    assert m.meta["input_shapes"] == "input_ids:1,128;attention_mask:1,128;position_ids:1,128;beam_idx:1"
    assert set(m.meta["state_shapes"].split(";")) == {
        f"past_key_values.{k}.{w}present.{k}.{w}:1,2,0,16" for k in (0, 1) for w in ("key", "value")}
    dec = lower(xml, parse_request([], seq_len=64, phase="decode"))
    assert dec.meta["input_shapes"] == "input_ids:1,1;attention_mask:1,65;position_ids:1,1;beam_idx:1"
    want, _ = _generate(plain(xml))
    for device in ("CPU", "CPU_B"):
        out = write_placed(placed(m, np.full(m.graph.n_ops, ("CPU", "CPU_B").index(device))),
                           tmp_path / f"{device}.xml", load_target("virtual"))
        got, states = _generate(compile_placed(out))
        assert states == [(1, 2, 9, 16)] * 4
        np.testing.assert_allclose(got, want, **BF16)
        assert (got.argmax(-1) == want.argmax(-1)).all()

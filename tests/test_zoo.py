import dataclasses
import os
import subprocess
import sys
import textwrap
from collections import Counter
from importlib import metadata
from pathlib import Path

import numpy as np
import pytest

from hdp.base.errors import InputError
from hdp.zoo import models as zoo

ROOT = Path(__file__).resolve().parents[1]


def _tiny_model(scale: float = 2.0):
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    y = ops.multiply(ops.relu(x), ops.constant(np.full([1, 4], scale, np.float32)))
    return ov.Model([ops.result(y)], [x], "tiny")


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "hdp" / "zoo"


@pytest.fixture
def tiny_zoo(monkeypatch):
    """Replace mobilenet_v2's builder by a tiny opset model and count how often it runs."""
    calls = []

    def build(shape):
        calls.append(1)
        return _tiny_model()

    spec = dataclasses.replace(zoo.MODELS["mobilenet_v2"], packages=(), build=build)
    monkeypatch.setitem(zoo.MODELS, "mobilenet_v2", spec)
    return calls


def _op_counts(xml: Path) -> Counter:
    import openvino as ov

    return Counter(op.get_type_name() for op in ov.Core().read_model(str(xml)).get_ordered_ops())


def test_unknown_name_lists_known_models(tmp_path):
    with pytest.raises(InputError, match="unknown zoo model 'vgg16'; known: bert, bert-tiny, bert_base, bert_large, "
                                         "densenet-tiny, densenet121, densenet201, gpt2, gpt2-tiny, inception_v3, llama, "
                                         "llama-24l, llama-32l, llama-tiny, llama-tiny-8l, mobilenet_v2, mobilenet_v2-tiny, phi3-tiny, "
                                         "phi3-tiny-8l, qwen2, qwen2-moe, qwen2-moe-tiny, qwen2-tiny, qwen2-tiny-8l, "
                                         r"resnet50, vit, vit-tiny \(each takes options"):
        zoo.export("vgg16", tmp_path / "m.xml")
    assert not (tmp_path / "m.xml").exists()


def test_output_must_be_xml(tmp_path):
    with pytest.raises(InputError, match=r"m\.onnx.*\.xml"):
        zoo.export("resnet50", tmp_path / "m.onnx")


def test_missing_optional_dependency_names_the_extra(tmp_path, monkeypatch, cache_home):
    real = metadata.version

    def version(dist):
        if dist == "transformers":
            raise metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(zoo.metadata, "version", version)
    with pytest.raises(InputError, match=r"bert_base.*'transformers'.*pip install 'hdp\[zoo\]'"):
        zoo.export("bert_base", tmp_path / "m.xml")
    assert not cache_home.exists()


def test_import_is_cheap():
    code = ("import sys, hdp.zoo.models; heavy = {'keras', 'transformers', 'torch', 'openvino', 'nncf', 'numpy'}"
            " & set(sys.modules);"
            " print(sorted(heavy))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cache_key_follows_version_and_packages(monkeypatch):
    key = zoo.cache_key("resnet50")
    assert key == zoo.cache_key("resnet50")
    assert key != zoo.cache_key("inception_v3")
    monkeypatch.setattr(zoo, "ZOO_VERSION", zoo.ZOO_VERSION + 1)
    assert zoo.cache_key("resnet50") != key
    monkeypatch.undo()
    real = metadata.version
    monkeypatch.setattr(zoo.metadata, "version", lambda d: "0.0" if d == "keras" else real(d))
    assert zoo.cache_key("resnet50") != key


def test_second_export_reuses_cache(tmp_path, cache_home, tiny_zoo):
    import openvino as ov

    first = zoo.export("mobilenet_v2", tmp_path / "a" / "m.xml")
    second = zoo.export("mobilenet_v2", tmp_path / "b.xml")
    assert tiny_zoo == [1]
    assert first == tmp_path / "a" / "m.xml" and second == tmp_path / "b.xml"
    (entry,) = cache_home.iterdir()
    assert entry.name == f"mobilenet_v2-{zoo.cache_key('mobilenet_v2')}"
    assert sorted(p.name for p in entry.iterdir()) == ["model.bin", "model.xml"]
    for out in (first, second):
        assert out.read_bytes() == (entry / "model.xml").read_bytes()
        assert out.with_suffix(".bin").read_bytes() == (entry / "model.bin").read_bytes()
    compiled = ov.Core().compile_model(str(second), "CPU")
    np.testing.assert_allclose(compiled(np.array([[-1, 0, 1, 2]], np.float32))[0], [[0, 0, 2, 4]])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.bin", "b.xml", "cache"]  # no temp files


def test_export_overwrites_existing_output(tmp_path, cache_home, tiny_zoo):
    out = tmp_path / "m.xml"
    out.write_text("old")
    out.with_suffix(".bin").write_bytes(b"old")
    zoo.export("mobilenet_v2", out)
    assert out.read_text().startswith("<?xml")
    assert _op_counts(out)["Relu"] == 1


def test_incomplete_cache_entry_is_regenerated(tmp_path, cache_home, tiny_zoo):
    xml = zoo.cached("mobilenet_v2")
    xml.with_suffix(".bin").unlink()
    assert zoo.cached("mobilenet_v2") == xml
    assert tiny_zoo == [1, 1]
    assert xml.with_suffix(".bin").is_file()


def test_failed_build_leaves_no_cache_entry(tmp_path, cache_home, monkeypatch):
    def broken(shape):
        raise RuntimeError("converter failed")

    spec = dataclasses.replace(zoo.MODELS["resnet50"], packages=(), build=broken)
    monkeypatch.setitem(zoo.MODELS, "resnet50", spec)
    with pytest.raises(RuntimeError, match="converter failed"):
        zoo.export("resnet50", tmp_path / "m.xml")
    assert list(cache_home.iterdir()) == []
    assert not (tmp_path / "m.xml").exists()


def test_cached_honours_explicit_directory(tmp_path, cache_home, tiny_zoo):
    xml = zoo.cached("mobilenet_v2", tmp_path / "elsewhere")
    assert xml.parent.parent == tmp_path / "elsewhere"
    assert not cache_home.exists()


# --- real models (tens of seconds each) -------------------------------------------------------------

EXPECTED = {
    # name: (input shapes, exact op counts)
    "inception_v3": ({"image": [1, 3, 299, 299]},
                     {"Convolution": 94, "Transpose": 0, "Concat": 11, "MaxPool": 4, "AvgPool": 9}),
    "resnet50": ({"image": [1, 3, 224, 224]}, {"Convolution": 53, "Transpose": 0, "Relu": 49}),
    "mobilenet_v2": ({"image": [1, 3, 224, 224]},
                     {"Convolution": 35, "GroupConvolution": 17, "Transpose": 0, "Clamp": 35}),
    "bert_base": ({k: [1, 128] for k in ("input_ids", "attention_mask", "token_type_ids")},
                  {"MatMul": 97, "Softmax": 12, "MVN": 25, "Gelu": 12, "Transpose": 48, "ShapeOf": 0}),
    "bert": ({k: [1, 128] for k in ("input_ids", "attention_mask", "token_type_ids")},
             {"MatMul": 73, "ScaledDotProductAttention": 12, "Softmax": 0, "ShapeOf": 0}),
    "gpt2": ({k: [1, 128] for k in ("input_ids", "attention_mask")},
             {"MatMul": 49, "ScaledDotProductAttention": 12, "ShapeOf": 0}),
    "llama": ({k: [1, 128] for k in ("input_ids", "attention_mask")},
              {"MatMul": 211, "ScaledDotProductAttention": 30, "ShapeOf": 0}),
    "vit": ({"pixel_values": [1, 3, 224, 224]},
            {"MatMul": 73, "ScaledDotProductAttention": 12, "Convolution": 1, "ShapeOf": 0}),
    "densenet121": ({"image": [1, 3, 224, 224]}, {"Convolution": 120, "Concat": 58, "Transpose": 0, "MatMul": 1}),
}
# qwen2 (Qwen2.5-0.5B shape) is left to the benches: ~100 s and 2 GB of weights to build.


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo-cache")


def _feed(model, rng):
    feed = {}
    for port in model.inputs:
        shape = list(port.get_shape())
        if port.get_any_name() == "input_ids":
            feed["input_ids"] = rng.integers(0, 30522, shape)  # below every real model's vocabulary
        elif port.get_element_type().get_type_name() == "i64":
            feed[port.get_any_name()] = rng.integers(0, 2, shape)
        else:
            feed[port.get_any_name()] = rng.standard_normal(shape).astype(np.float32)
    return feed


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_model_exports_clean_static_graph(name, tmp_path, shared_cache, monkeypatch):
    import openvino as ov

    monkeypatch.setenv("XDG_CACHE_HOME", str(shared_cache))
    xml = zoo.export(name, tmp_path / f"{name}.xml")
    model = ov.Core().read_model(str(xml))
    shapes, counts = EXPECTED[name]
    assert {p.get_any_name(): list(p.get_shape()) for p in model.inputs} == shapes
    assert all(p.get_partial_shape().is_static for p in model.outputs)
    ops = Counter(op.get_type_name() for op in model.get_ordered_ops())
    assert {k: ops[k] for k in counts} == counts
    assert model.get_rt_info(["hdp_zoo", "name"]).astype(str) == name

    compiled = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    rng = np.random.default_rng(0)
    a, b = compiled(_feed(model, rng))[0], compiled(_feed(model, rng))[0]
    assert np.isfinite(a).all()
    assert np.abs(a - b).max() > 1e-4  # random weights, but the output still depends on the input


@pytest.mark.slow
def test_real_model_second_export_hits_cache(tmp_path, cache_home, monkeypatch):
    """The second export is a copy of the cached files: the model is neither built again nor saved
    by OpenVINO (not even imported), counted rather than timed."""
    calls, saves = [], []
    spec = zoo.MODELS["mobilenet_v2"]
    monkeypatch.setitem(zoo.MODELS, "mobilenet_v2",
                        dataclasses.replace(spec, build=lambda shape: calls.append(1) or spec.build(shape)))
    real_import = zoo._import_openvino
    monkeypatch.setattr(zoo, "_import_openvino", lambda: saves.append(1) or real_import())
    zoo.export("mobilenet_v2", tmp_path / "a.xml")
    assert calls == [1] and saves
    saves.clear()
    zoo.export("mobilenet_v2", tmp_path / "b.xml")
    assert calls == [1] and not saves
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


@pytest.mark.slow
def test_generation_is_deterministic(tmp_path):
    import openvino as ov

    for run in ("1", "2"):
        ov.save_model(zoo.build("mobilenet_v2"), str(tmp_path / f"{run}.xml"), compress_to_fp16=False)
    assert (tmp_path / "1.bin").read_bytes() == (tmp_path / "2.bin").read_bytes()


@pytest.mark.slow
def test_generation_makes_no_network_access(tmp_path):
    # A fresh process, so that hdp.zoo.models is the first to import openvino (as under `hdp zoo`).
    code = textwrap.dedent("""
        import sys
        def hook(event, args):
            if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "urllib.Request"):
                print("NETWORK", event, args, file=sys.stderr, flush=True)
        sys.addaudithook(hook)
        from hdp.zoo import models as zoo
        for name in ("mobilenet_v2", "bert_base"):
            zoo.build(name)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "NETWORK" not in out.stderr, out.stderr[-2000:]


# --- names, variants and their cache keys (fast) ------------------------------------------------------


def test_variant_names_are_canonical():
    assert str(zoo.parse("llama-tiny:int4,stateful")) == "llama-tiny:stateful,int4"
    assert zoo.parse("llama-tiny:int4,g16") == zoo.parse("llama-tiny:int4")  # 16 is llama-tiny's default
    assert str(zoo.parse("llama-tiny:int4-sym,g32")) == "llama-tiny:int4-sym,g32"
    assert str(zoo.parse("gpt2-tiny:static,f32")) == "gpt2-tiny"
    assert zoo.parse("bert-tiny", shape="dynamic", weights="fp16") == zoo.parse("bert-tiny:fp16,dynamic")
    assert zoo.parse("bert-tiny:dynamic", shape="static") == zoo.parse("bert-tiny")  # keywords win
    assert zoo.parse(zoo.parse("vit-tiny:dynamic")) == zoo.parse("vit-tiny:dynamic")


@pytest.mark.parametrize("name, message", [
    ("gpt2-tiny:int3", r"unknown option 'int3'; options: static, dynamic, stateful; f32, fp16"),
    ("gpt2-tiny:static,dynamic", r"options 'static' and 'dynamic' conflict"),
    ("vit-tiny:stateful", r"'vit-tiny' comes in shapes static, dynamic, not 'stateful'"),
    ("gpt2-tiny:int8,g32", r"g32\) applies to int4 weights only"),
    ("gpt2-tiny:int4,g0", r"unknown option 'g0'"),
])
def test_bad_variants_say_what_is_allowed(name, message):
    with pytest.raises(InputError, match=message):
        zoo.parse(name)


def test_catalog_lists_every_model_with_its_variants():
    rows = {row["name"]: row for row in zoo.catalog()}
    assert sorted(rows) == zoo.names()
    assert rows["llama-tiny"]["shapes"] == ["static", "dynamic", "stateful"]
    assert rows["vit"]["shapes"] == ["static", "dynamic"]
    assert {row["size"] for row in rows.values()} == {"tiny", "real"}
    assert all(row["weights"] == list(zoo.WEIGHTS) for row in rows.values())


def test_cache_key_follows_the_variant(monkeypatch):
    real = metadata.version
    monkeypatch.setattr(zoo.metadata, "version", lambda d: "3.4.0" if d == "nncf" else real(d))
    keys = {spec: zoo.cache_key(spec) for spec in
            ("gpt2-tiny", "gpt2-tiny:dynamic", "gpt2-tiny:stateful", "gpt2-tiny:fp16", "gpt2-tiny:int4",
             "gpt2-tiny:int4,g32", "gpt2-tiny:int4-sym")}
    assert len(set(keys.values())) == len(keys)
    assert zoo.cache_key("gpt2-tiny:int4,g16") == keys["gpt2-tiny:int4"]
    monkeypatch.setattr(zoo.metadata, "version", lambda d: "0.0" if d == "nncf" else real(d))
    assert zoo.cache_key("gpt2-tiny:int4") != keys["gpt2-tiny:int4"]  # int weights depend on nncf
    assert zoo.cache_key("gpt2-tiny:fp16") == keys["gpt2-tiny:fp16"]  # fp16 does not


def test_missing_nncf_names_the_extra(tmp_path, monkeypatch, cache_home):
    real = metadata.version

    def version(dist):
        if dist == "nncf":
            raise metadata.PackageNotFoundError(dist)
        return real(dist)

    monkeypatch.setattr(zoo.metadata, "version", version)
    with pytest.raises(InputError, match=r"'llama-tiny:int4' needs the 'nncf' package: pip install 'hdp\[zoo\]'"):
        zoo.export("llama-tiny:int4", tmp_path / "m.xml")
    assert not cache_home.exists()


def _tiny_matmul(shape):
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1 if shape == "static" else -1, 16], ov.Type.f32, name="x")
    w = ops.constant(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32))
    return ov.Model([ops.result(ops.matmul(x, w, False, True))], [x], "mm")


def test_variant_gets_its_own_cache_entry_and_fp16_weights(tmp_path, cache_home, monkeypatch):
    import openvino as ov

    spec = dataclasses.replace(zoo.MODELS["mobilenet_v2"], packages=(), build=_tiny_matmul)
    monkeypatch.setitem(zoo.MODELS, "mobilenet_v2", spec)
    xml = zoo.export("mobilenet_v2:dynamic,fp16", tmp_path / "m.xml")
    assert sorted(p.name for p in cache_home.iterdir()) == [
        f"mobilenet_v2_dynamic_fp16-{zoo.cache_key('mobilenet_v2:dynamic,fp16')}"]
    model = ov.Core().read_model(str(xml))
    assert model.inputs[0].get_partial_shape().is_dynamic
    (matmul,) = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"]
    convert = matmul.input_value(1).get_node()
    assert convert.get_type_name() == "Convert" and convert.get_output_element_type(0) == ov.Type.f32
    assert convert.input_value(0).get_node().get_output_element_type(0) == ov.Type.f16
    assert model.get_rt_info(["hdp_zoo", "name"]).astype(str) == "mobilenet_v2:dynamic,fp16"
    assert model.get_rt_info(["hdp_zoo", "weights"]).astype(str) == "fp16"


def _running_sum_lm(stateful: bool, vocab: int = 8):
    """A toy causal LM: logits[t] = (sum of embeddings of tokens 0..t) @ W; the stateful one keeps the sum
    of past tokens in a variable (optimum-intel layout: input_ids, attention_mask, beam_idx; logits)."""
    import openvino as ov
    import openvino.opset13 as ops
    from openvino import opset6

    rng = np.random.default_rng(0)
    ids = ops.parameter([-1, -1], ov.Type.i64, name="input_ids")
    mask = ops.parameter([-1, -1], ov.Type.i64, name="attention_mask")
    for p, n in ((ids, "input_ids"), (mask, "attention_mask")):
        p.output(0).get_tensor().set_names({n})
    emb = ops.gather(ops.constant(rng.standard_normal((vocab, vocab)).astype(np.float32)), ids, 0)
    running = ops.cumsum(emb, ops.constant(np.int64(1)))  # [batch, length, vocab]
    params, sinks = [ids, mask], []
    if stateful:
        beam = ops.parameter([-1], ov.Type.i32, name="beam_idx")
        beam.output(0).get_tensor().set_names({"beam_idx"})
        batch = ops.gather(ops.shape_of(ids), ops.constant(np.array([0])), ops.constant(np.int64(0)))
        init = ops.broadcast(ops.constant(np.float32(0)), ops.concat([batch, ops.constant(np.array([vocab]))], 0))
        past = opset6.read_value(init, "past_sum", ov.Type.f32, [-1, vocab])
        past_rows = ops.gather(past, beam, ops.constant(np.int64(0)))
        running = ops.add(running, ops.unsqueeze(past_rows, ops.constant(np.int64(1))))
        last = ops.gather(running, ops.constant(np.int64(-1)), ops.constant(np.int64(1)))
        sinks.append(opset6.assign(last, "past_sum"))
        params.append(beam)
    logits = ops.matmul(running, ops.constant(rng.standard_normal((vocab, vocab)).astype(np.float32)), False, False)
    logits.output(0).get_tensor().set_names({"logits"})
    return ov.Model([ops.result(logits)], sinks, params, "running-sum")


def test_generate_carries_state_like_recomputing():
    import openvino as ov

    core = ov.Core()
    stateful = core.compile_model(_running_sum_lm(True), "CPU", F32)
    stateless = core.compile_model(_running_sum_lm(False), "CPU", F32)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    a, b = zoo.generate(stateful, prompt, steps=3), zoo.generate(stateless, prompt, steps=3)
    assert a.tokens.shape == (2, 4) and len(a.logits) == 4 and a.logits[0].shape == (2, 8)
    np.testing.assert_array_equal(a.tokens, b.tokens)
    for x, y in zip(a.logits, b.logits):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(zoo.generate(stateful, prompt[1:], steps=3).tokens, a.tokens[1:])  # reset
    with pytest.raises(InputError, match=r"input_ids must be \[batch, prompt\]"):
        zoo.generate(stateful, np.zeros((2, 0), np.int64))


def test_generate_follows_given_tokens():
    """``follow`` feeds given tokens instead of the argmax: step 1's logits are those of a prefill of
    the prompt plus the first given token."""
    import openvino as ov

    core = ov.Core()
    stateful = core.compile_model(_running_sum_lm(True), "CPU", F32)
    stateless = core.compile_model(_running_sum_lm(False), "CPU", F32)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    forced = np.array([[7, 0, 7], [0, 7, 0]])
    got = zoo.generate(stateful, prompt, steps=3, follow=forced)
    assert not np.array_equal(got.tokens[:, :3], forced)  # not what it would have picked itself
    for i in range(1, 4):
        prefill = zoo.generate(stateless, np.concatenate([prompt, forced[:, :i]], axis=1), steps=0)
        np.testing.assert_allclose(got.logits[i], prefill.logits[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(InputError, match=r"follow must be \[batch=2, >= 3\]"):
        zoo.generate(stateful, prompt, steps=3, follow=forced[:1])


# --- tiny real exports (slow: torch/transformers/keras import and a few seconds per model) ------------

TINY_LMS = ("gpt2-tiny", "llama-tiny", "qwen2-tiny", "phi3-tiny", "llama-tiny-8l", "qwen2-moe-tiny")
TINY_TEXT = {"gpt2-tiny": 2, "llama-tiny": 2, "qwen2-tiny": 2, "phi3-tiny": 2, "llama-tiny-8l": 8,
             "qwen2-moe-tiny": 2}  # layers
F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def _read(xml):
    import openvino as ov

    return ov.Core().read_model(str(xml))


def _compile(xml_or_model):
    import openvino as ov

    model = _read(xml_or_model) if isinstance(xml_or_model, Path) else xml_or_model
    return ov.Core().compile_model(model, "CPU", F32)


def _shapes(model):
    return {p.get_any_name(): str(p.get_partial_shape()) for p in model.inputs}


def _ids(batch, length, seed=0):
    return np.random.default_rng(seed).integers(0, 512, (batch, length)).astype(np.int64)


def _lm_logits(compiled, ids, mask=None):
    return compiled({"input_ids": ids, "attention_mask": np.ones_like(ids) if mask is None else mask})[0]


@pytest.mark.slow
@pytest.mark.parametrize("name, shapes", [
    ("gpt2-tiny", {"input_ids": "[1,16]", "attention_mask": "[1,16]"}),
    ("llama-tiny", {"input_ids": "[1,16]", "attention_mask": "[1,16]"}),
    ("qwen2-tiny", {"input_ids": "[1,16]", "attention_mask": "[1,16]"}),
    ("bert-tiny", {"input_ids": "[1,16]", "attention_mask": "[1,16]", "token_type_ids": "[1,16]"}),
    ("vit-tiny", {"pixel_values": "[1,3,32,32]"}),
    ("mobilenet_v2-tiny", {"image": "[1,3,32,32]"}),
    ("densenet-tiny", {"image": "[1,3,32,32]"}),
])
def test_tiny_static_export_runs(name, shapes, zoo_export):
    model = _read(zoo_export(name))
    assert _shapes(model) == shapes
    assert all(p.get_partial_shape().is_static for p in model.outputs)
    assert model.get_rt_info(["hdp_zoo", "name"]).astype(str) == name
    rng = np.random.default_rng(0)
    feed = {p.get_any_name(): (rng.integers(0, 2, list(p.get_shape())) if p.get_element_type().is_integral()
                               else rng.standard_normal(list(p.get_shape())).astype(np.float32))
            for p in model.inputs}
    out = _compile(model)(feed)[0]
    assert np.isfinite(out).all() and out.std() > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY_LMS)
def test_tiny_lm_dynamic_batch_and_sequence(name, zoo_export):
    model = _read(zoo_export(f"{name}:dynamic"))
    assert _shapes(model) == {"input_ids": "[?,?]", "attention_mask": "[?,?]"}
    assert str(model.outputs[0].get_partial_shape()) == "[?,?,512]"
    compiled = _compile(model)
    ids = _ids(3, 9)
    full = _lm_logits(compiled, ids)
    assert full.shape == (3, 9, 512)
    # causal: a shorter sequence gives the same logits on its positions (no length baked into the mask)
    np.testing.assert_allclose(_lm_logits(compiled, ids[:, :5]), full[:, :5], atol=1e-4)
    np.testing.assert_allclose(_lm_logits(compiled, ids[1:2]), full[1:2], atol=1e-4)  # batch 1


@pytest.mark.slow
def test_tiny_bert_dynamic_batch_sequence_and_padding(bert_dynamic_xml):
    model = _read(bert_dynamic_xml)
    assert _shapes(model) == {"input_ids": "[?,?]", "attention_mask": "[?,?]", "token_type_ids": "[?,?]"}
    compiled = _compile(model)

    def run(ids, mask):
        return compiled({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)})[0]

    ids = _ids(2, 9)
    padded = np.ones_like(ids)
    padded[:, 5:] = 0
    np.testing.assert_allclose(run(ids, padded)[:, :5], run(ids[:, :5], np.ones((2, 5), np.int64)), atol=1e-4)
    np.testing.assert_allclose(run(ids[:1], padded[:1]), run(ids, padded)[:1], atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vit-tiny", "mobilenet_v2-tiny", "densenet-tiny"])
def test_tiny_image_model_dynamic_batch(name, zoo_export):
    model = _read(zoo_export(f"{name}:dynamic"))
    (port,) = model.inputs
    assert str(port.get_partial_shape()) == "[?,3,32,32]"
    compiled = _compile(model)
    images = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    batch = compiled({0: images})[0]
    for i in (0, 2):
        np.testing.assert_allclose(compiled({0: images[i:i + 1]})[0], batch[i:i + 1], rtol=1e-4, atol=1e-5)
    assert np.abs(batch[0] - batch[1]).max() > 1e-4


def _stateful_structure(model):
    ops = [op for op in model.get_ordered_ops()]
    reads = {op.get_variable_id() for op in ops if op.get_type_name() == "ReadValue"}
    assigns = {op.get_variable_id() for op in ops if op.get_type_name() == "Assign"}
    return reads, assigns


@pytest.mark.slow
@pytest.mark.parametrize("name", TINY_LMS)
def test_tiny_lm_stateful_has_optimum_layout_and_generates_like_dynamic(name, zoo_export):
    model = _read(zoo_export(f"{name}:stateful"))
    assert _shapes(model) == {"input_ids": "[?,?]", "attention_mask": "[?,?]", "position_ids": "[?,?]",
                              "beam_idx": "[?]"}
    assert model.input("beam_idx").get_element_type().get_type_name() == "i32"
    assert [sorted(p.get_names()) for p in model.outputs] == [["logits"]]
    reads, assigns = _stateful_structure(model)
    layers = TINY_TEXT[name]
    assert reads == assigns and len(reads) == 2 * layers
    assert reads == {f"past_key_values.{i}.{kv}present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")}
    stateful, dynamic = _compile(model), _compile(zoo_export(f"{name}:dynamic"))
    for batch in (2, 1):
        ids = _ids(batch, 6, seed=batch)
        a, b = zoo.generate(stateful, ids, steps=4), zoo.generate(dynamic, ids, steps=4)
        assert a.tokens.shape == (batch, 5) and len(a.logits) == 5
        np.testing.assert_array_equal(a.tokens, b.tokens)
        for x, y in zip(a.logits, b.logits):
            np.testing.assert_allclose(x, y, atol=1e-4)
    again = zoo.generate(stateful, ids, steps=4)  # state is reset between runs
    np.testing.assert_array_equal(again.tokens, a.tokens)


_DECOMPRESSION = ("Convert", "Subtract", "Multiply", "Reshape")


def _weight_chain(port):
    """The decompression chain feeding a weight input, e.g. 'Convert:f32 < Reshape:f16 < ... < Constant:u4'
    (first inputs followed up to a Constant); None if the input is not a constant through such a chain."""
    chain = []
    node = port.get_node()
    while True:
        chain.append(f"{node.get_type_name()}:{node.get_output_element_type(0).get_type_name()}")
        if node.get_type_name() == "Constant":
            return " < ".join(chain)
        if node.get_type_name() not in _DECOMPRESSION:
            return None
        node = node.input_value(0).get_node()


def _constant_weight_chains(model, types=("MatMul", "Gather", "Convolution", "GroupConvolution")):
    """Counter of 'OpType: chain' over the weight inputs of ``types`` that hold stored (constant) weights."""
    chains = Counter()
    for op in model.get_ordered_ops():
        if op.get_type_name() not in types:
            continue
        chain = _weight_chain(op.input_value(0 if op.get_type_name() == "Gather" else 1))
        if chain is not None and not chain.endswith(("Constant:i64", "Constant:i32")):
            chains[f"{op.get_type_name()}: {chain}"] += 1
    return chains


INT8_ASYM = "Convert:f32 < Multiply:f16 < Subtract:f16 < Convert:f16 < Constant:u8"


@pytest.mark.slow
@pytest.mark.parametrize("weights, chains", [
    ("int4", {"MatMul: Convert:f32 < Reshape:f16 < Multiply:f16 < Subtract:f16 < Convert:f16 < Constant:u4": 14,
              f"MatMul: {INT8_ASYM}": 1, f"Gather: {INT8_ASYM}": 1}),
    ("int4-sym", {"MatMul: Convert:f32 < Reshape:f16 < Multiply:f16 < Convert:f16 < Constant:i4": 14,
                  f"MatMul: {INT8_ASYM}": 1, f"Gather: {INT8_ASYM}": 1}),
    ("int8", {f"MatMul: {INT8_ASYM}": 15, f"Gather: {INT8_ASYM}": 1}),
    ("int8-sym", {"MatMul: Convert:f32 < Multiply:f16 < Convert:f16 < Constant:i8": 15,
                  "Gather: Convert:f32 < Multiply:f16 < Convert:f16 < Constant:i8": 1}),
    ("fp16", {"MatMul: Convert:f32 < Constant:f16": 15, "Gather: Convert:f32 < Constant:f16": 1}),
])
def test_tiny_llama_compressed_weights_follow_nncf_pattern(weights, chains, zoo_export):
    """Every weight is stored compressed (the embedding and the LM head stay int8, as NNCF does for int4)."""
    model = _read(zoo_export(f"llama-tiny:stateful,{weights}"))
    assert dict(_constant_weight_chains(model)) == chains
    if weights.startswith("int4"):  # grouped: [out, in/16, 16] codes, [out, in/16, 1] scales (and zero points)
        for op in model.get_ordered_ops():
            if op.get_type_name() == "Constant" and op.get_output_element_type(0).get_type_name() in ("u4", "i4"):
                shape = list(op.get_output_shape(0))
                assert len(shape) == 3 and shape[2] in (16, 1), shape
    reads, assigns = _stateful_structure(model)
    assert reads == assigns and len(reads) == 4
    ids = _ids(1, 6)
    reference = zoo.generate(_compile(zoo_export("llama-tiny:stateful")), ids, steps=2)
    out = zoo.generate(_compile(model), ids, steps=2)
    assert all(np.isfinite(step).all() for step in out.logits)
    # the same model, just quantised: logits correlate (random weights are hard on int4 with groups of 16)
    correlation = np.corrcoef(out.logits[0].ravel(), reference.logits[0].ravel())[0, 1]
    assert correlation > {"fp16": 0.999, "int8": 0.98, "int8-sym": 0.98}.get(weights, 0.7)  # int4: 0.84, 0.95


@pytest.mark.slow
def test_tiny_cnn_fp16_and_int8_compress_convolutions(cnn_fp16_xml, zoo_export):
    fp16 = _constant_weight_chains(_read(cnn_fp16_xml))
    assert set(fp16) == {"Convolution: Convert:f32 < Constant:f16", "GroupConvolution: Convert:f32 < Constant:f16",
                         "MatMul: Convert:f32 < Constant:f16"}
    assert fp16["Convolution: Convert:f32 < Constant:f16"] == 35
    int8 = _read(zoo_export("mobilenet_v2-tiny:int8"))
    chains = _constant_weight_chains(int8)
    assert chains[f"Convolution: {INT8_ASYM}"] == 35 and chains[f"MatMul: {INT8_ASYM}"] == 1
    assert not [c for c in chains if c.endswith("Constant:f32")]
    images = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    reference = _compile(zoo_export("mobilenet_v2-tiny"))({0: images})[0]
    np.testing.assert_allclose(_compile(cnn_fp16_xml)({0: images})[0], reference, atol=0.02)
    # int8 on a net this narrow (8-channel depthwise convolutions) moves probabilities by ~0.16
    np.testing.assert_allclose(_compile(int8)({0: images})[0], reference, atol=0.3)


@pytest.mark.slow
def test_fixture_models_for_issue_9(bert_dynamic_xml, cnn_dynamic_xml, llama_stateful_xml, llama_int4_xml,
                                    cnn_fp16_xml):
    assert _read(cnn_dynamic_xml).inputs[0].get_partial_shape()[0].is_dynamic
    assert _read(bert_dynamic_xml).inputs[0].get_partial_shape().is_dynamic
    for xml in (llama_stateful_xml, llama_int4_xml):
        assert "beam_idx" in _shapes(_read(xml))
    types = {op.get_output_element_type(0).get_type_name() for op in _read(llama_int4_xml).get_ordered_ops()
             if op.get_type_name() == "Constant"}
    assert "u4" in types
    assert "f16" in {op.get_output_element_type(0).get_type_name() for op in _read(cnn_fp16_xml).get_ordered_ops()}


@pytest.mark.slow
def test_tiny_variants_make_no_network_access():
    """transformers, keras and NNCF (telemetry included) stay offline while the zoo builds."""
    pytest.importorskip("nncf", reason="nncf not installed (pip install 'hdp[zoo]')")
    code = textwrap.dedent("""
        import sys
        def hook(event, args):
            if event in ("socket.connect", "socket.getaddrinfo", "socket.sendto", "urllib.Request"):
                print("NETWORK", event, args, file=sys.stderr, flush=True)
        sys.addaudithook(hook)
        from hdp.zoo import models as zoo
        for name in ("gpt2-tiny:stateful,int4", "bert-tiny:dynamic,int8", "densenet-tiny:fp16"):
            zoo.build(name)
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "NETWORK" not in out.stderr, out.stderr[-2000:]


def test_zoo_command_honours_cache_dir_and_no_cache(tmp_path, cache_home, tiny_zoo):
    """`hdp zoo` keeps a generated model under <--cache-dir>/zoo, and with --no-cache keeps none
    (nothing under the user's cache either way)."""
    from click.testing import CliRunner

    from hdp.cli.main import main

    run = CliRunner().invoke
    r = run(main, ["zoo", "mobilenet_v2", "-o", str(tmp_path / "a.xml"), "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    (entry,) = (tmp_path / "c" / "zoo").iterdir()
    assert (entry / "model.xml").read_bytes() == (tmp_path / "a.xml").read_bytes()
    r = run(main, ["zoo", "mobilenet_v2", "-o", str(tmp_path / "b.xml"), "--no-cache"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "b.bin").read_bytes() == (tmp_path / "a.bin").read_bytes()
    assert _op_counts(tmp_path / "b.xml") == _op_counts(tmp_path / "a.xml")
    assert tiny_zoo == [1, 1]  # generated afresh, not taken from a cache
    assert not cache_home.exists()


def test_zoo_command_refuses_a_cache_dir_under_a_file(tmp_path, cache_home, tiny_zoo):
    from click.testing import CliRunner

    from hdp.cli.main import main

    (tmp_path / "f").write_text("x")
    r = CliRunner().invoke(main, ["zoo", "mobilenet_v2", "-o", str(tmp_path / "a.xml"),
                                  "--cache-dir", str(tmp_path / "f" / "sub")])
    assert r.exit_code == 2 and "cannot be created" in r.output and "Traceback" not in r.output, r.output
    assert tiny_zoo == [] and not (tmp_path / "a.xml").exists()


@pytest.mark.slow
def test_tiny_moe_routes_like_transformers_own_expert_loop(zoo_export):
    """The MoE export (transformers' batched_mm experts: each token gathers its top-k experts' weights)
    computes what transformers' default loop over the experts computes, weights and routing alike; every
    layer's experts are one stacked weight read by a Gather, the ops a placement moves as a layer's experts."""
    import torch
    import transformers

    from hdp.zoo import hf_models

    config_class, kwargs, _ = hf_models.PRESETS[("qwen2_moe", "tiny")]
    config = getattr(transformers, config_class)(**dict(kwargs, experts_implementation="eager"))
    net = hf_models._instantiate(transformers.Qwen2MoeForCausalLM, config)  # the zoo's seed: the same weights
    ids = _ids(2, 7, seed=3)
    with torch.no_grad():
        expected = net(input_ids=torch.from_numpy(ids)).logits.numpy()
    model = _read(zoo_export("qwen2-moe-tiny:dynamic"))
    np.testing.assert_allclose(_lm_logits(_compile(model), ids), expected, atol=1e-4)
    stacked = [op for op in model.get_ordered_ops() if op.get_type_name() == "Gather"
               and "mlp.experts" in op.get_friendly_name()
               and op.input_value(0).get_node().get_type_name() == "Constant"]
    assert len(stacked) == 2 * 2  # gate_up and down, per layer
    assert {tuple(op.input_value(0).get_shape())[0] for op in stacked} == {8}  # every expert of the layer

"""The models users bring, end to end through ``hdp compile`` (issue 9's "done when").

Each of: a dynamic-sequence BERT, a dynamic-batch CNN, an optimum-intel-style stateful Llama, that
Llama with NNCF int4 weights, an FP16-compressed CNN (tiny zoo exports, random weights) is compiled
on `virtual` with a method that forces a split (`random`), `heft`, `optimal` and the default. Every
written model must keep the original's input partial shapes, run at two batch sizes or sequence
lengths with the plain CPU compile's outputs, and (LLMs) generate 4 greedy steps with the plain
compile's logits. `hdp compile` checks and repairs placements before writing them; these tests
check the files independently, the way a user runs them.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.cli.main import main
from hdp.runtime.placed.model import compile_placed
from hdp.runtime.serve.verify import PRECISION_MARGIN, TOLERANCE_REDUCED
from hdp.zoo import models as zoo

METHODS = ["random", "heft", "optimal", "default"]


def compile_cli(xml, out, method, target="virtual", seed=1, seq_len=None):
    args = ["compile", str(xml), "-o", str(out), "--target", target, "--no-compare", "--seed", str(seed),
            "--no-cache", "-q"] + (["--seq-len", str(seq_len)] if seq_len else [])
    if method == "default":
        args += ["--budget", "5"]
    else:
        args += ["--method", method]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return out


def plain(xml, config=None):
    import openvino as ov

    return ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32", **(config or {})})


def partial_shapes(xml):
    import openvino as ov

    return [str(i.get_partial_shape()) for i in ov.Core().read_model(str(xml)).inputs]


def run_at_two_shapes(placed_xml, original, feeds):
    """The placed model at each feed against the plain f32 compile, within what ``hdp compile``
    promises: a relative L2 error of TOLERANCE_REDUCED, or PRECISION_MARGIN times that of the
    least precise used device running the original alone (a random-weight CNN in bf16 is 0.28 off
    its f32 self on this host's CPU_B: the whole split is held to that, not to 5e-2)."""
    from hdp.runtime.placed.model import read_placed
    from hdp.target.devices import make_core

    pm = read_placed(placed_xml)
    core = make_core(pm.target, list(pm.used))
    alone = [core.compile_model(str(original), d) for d in pm.used]
    cm, ref = compile_placed(placed_xml), plain(original)
    for feed in feeds:
        want = ref(feed)[0]
        floor = max(relative_error(c(feed)[0], want) for c in alone)
        assert relative_error(cm(feed)[0], want) <= max(TOLERANCE_REDUCED, PRECISION_MARGIN * floor), (floor, pm.used)


def bert_feeds():
    rng = np.random.default_rng(0)
    return [{"input_ids": rng.integers(0, 100, (b, s)), "attention_mask": np.ones((b, s), np.int64),
             "token_type_ids": np.zeros((b, s), np.int64)} for b, s in ((1, 16), (2, 9))]


def cnn_feeds(model_xml):
    import openvino as ov

    shape = [d.get_length() if d.is_static else 1 for d in ov.Core().read_model(str(model_xml)).inputs[0].get_partial_shape()]
    rng = np.random.default_rng(0)
    return [{0: rng.standard_normal([b] + shape[1:]).astype(np.float32)} for b in (1, 3)]


def relative_error(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(np.asarray(b, np.float64)))


def check_generation(placed_xml, original):
    """The placed LLM's logits at every step against the plain f32 compile's, both fed the plain
    compile's greedy tokens, within what `hdp compile` promises when a device runs bf16 or keeps a u8
    KV cache: a relative L2 error of TOLERANCE_REDUCED. (Elementwise tolerances do not fit here: on a
    CI host, bf16 with int4 weights moved single logits of a random tiny Llama by up to 0.1 where the
    logits reach 4.2, beyond rtol=atol=5e-2; and greedy tokens diverge at the first flipped near-tie.)"""
    ids = np.random.default_rng(0).integers(1, 100, (1, 6))
    want = zoo.generate(plain(original), ids, steps=4)
    got = zoo.generate(compile_placed(placed_xml), ids, steps=4, follow=want.tokens)
    errors = [relative_error(a, b) for a, b in zip(got.logits, want.logits)]
    assert max(errors) <= TOLERANCE_REDUCED, errors


#: zoo export -> what to run it with (the FP16 CNN with a dynamic batch, to run at two batch sizes)
CASES = {
    "bert-tiny:dynamic": "bert",
    "mobilenet_v2-tiny:dynamic": "cnn",
    "mobilenet_v2-tiny:dynamic,fp16": "cnn",
    "llama-tiny:stateful": "llm",
    "llama-tiny:stateful,int4": "llm",
}


def _case(zoo_export, name, method, tmp_path):
    xml = zoo_export(name)
    kind = CASES[name]
    fixture = name.replace(":", "_").replace(",", "_")
    out = compile_cli(xml, tmp_path / f"{fixture}-{method}.xml", method, seq_len=None if kind == "cnn" else 16)
    assert partial_shapes(out) == partial_shapes(xml)
    if kind == "bert":
        run_at_two_shapes(out, xml, bert_feeds())
    elif kind == "cnn":
        run_at_two_shapes(out, xml, cnn_feeds(xml))
    else:
        check_generation(out, xml)


def test_dynamic_cnn_random_split(zoo_export, tmp_path):
    _case(zoo_export, "mobilenet_v2-tiny:dynamic", "random", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", list(CASES))
def test_users_models_place_run_and_generate(zoo_export, name, method, tmp_path):
    _case(zoo_export, name, method, tmp_path)


@pytest.mark.slow
def test_stateful_llm_split_on_two_f32_devices_generates_the_same_tokens(llama_stateful_xml, tmp_path):
    out = compile_cli(llama_stateful_xml, tmp_path / "lm.xml", "random", target="virtual-f32", seed=2, seq_len=16)
    ids = np.random.default_rng(1).integers(1, 100, (2, 5))
    want = zoo.generate(plain(llama_stateful_xml, {"KV_CACHE_PRECISION": "f32"}), ids, steps=4)
    got = zoo.generate(compile_placed(out), ids, steps=4)
    assert np.array_equal(got.tokens, want.tokens)
    for a, b in zip(got.logits, want.logits):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target,method", [("ultra-npu", "default"), ("i9-flex170", "heft")])
def test_stateful_llm_on_a_modeled_target_passes_its_check(llama_stateful_xml, tmp_path, target, method):
    """Modeled devices are checked on CPU stand-ins in f32 with an f32 KV cache, so a stateful model
    matches its f32 reference exactly; with the CPU plugin's default u8 KV cache the stand-ins were
    1e-2 off and even every op on one device failed the 1e-3 tolerance (found by a new-user try-out)."""
    out = compile_cli(llama_stateful_xml, tmp_path / "lm.xml", method, target=target, seq_len=16)
    assert partial_shapes(out) == partial_shapes(llama_stateful_xml)

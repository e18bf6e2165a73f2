"""The concurrent executor on the tiny zoo models placed by heft on ``virtual-2x1`` (issue 20):
every output matches the plain f32 CPU compile, the stateful LLMs generate what it generates.
Slow (real exports and hdp compile runs); CI runs it with `make test-slow`."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from hdp.cli.main import main
from hdp.runtime.measure.worker import random_inputs
from hdp.runtime.placed.model import compile_placed, read_placed
from hdp.zoo import models as zoo

pytestmark = pytest.mark.slow

TINY = ["mobilenet_v2-tiny", "densenet-tiny", "vit-tiny", "bert-tiny", "gpt2-tiny"]
STATEFUL = ["llama-tiny:stateful", "qwen2-tiny:stateful"]


def heft_placed(xml, tmp_path, seq_len=None):
    out = tmp_path / "placed.xml"
    args = ["compile", str(xml), "-o", str(out), "--target", "virtual-2x1", "--method", "heft", "--no-compare",
            "--no-cache", "-q"] + (["--seq-len", str(seq_len)] if seq_len else [])
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    return out


def plain(xml):
    import openvino as ov

    return ov.Core().compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"})


def relative_error(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("name", TINY)
def test_tiny_zoo_models_run_concurrently(zoo_export, name, tmp_path):
    xml = zoo_export(name)
    out = heft_placed(xml, tmp_path)
    pm = read_placed(out)
    from hdp.ir.specialise import Specialisation
    from hdp.runtime.measure.worker import _recorded_spec

    spec = _recorded_spec(pm.model)
    shapes = [i.shape for i in Specialisation.from_json(spec, str(out)).inputs] if spec else None
    feed = dict(enumerate(random_inputs(pm.model, seed=0, shapes=shapes)))
    conc = compile_placed(out, execution="concurrent")
    want = plain(xml)(feed)
    got = conc(feed)
    for j in range(len(want)):
        assert relative_error(got[j], want[j]) <= 1e-4, (name, j)


@pytest.mark.parametrize("name", STATEFUL)
def test_stateful_zoo_llms_generate_concurrently(zoo_export, name, tmp_path):
    xml = zoo_export(name)
    out = heft_placed(xml, tmp_path, seq_len=16)
    ids = np.random.default_rng(0).integers(1, 100, (1, 6))
    want = zoo.generate(plain(xml), ids, steps=4)
    hetero = zoo.generate(compile_placed(out), ids, steps=4, follow=want.tokens)
    got = zoo.generate(compile_placed(out, execution="concurrent"), ids, steps=4, follow=want.tokens)
    assert max(relative_error(a, b) for a, b in zip(got.logits, want.logits)) <= 1e-3
    assert max(relative_error(a, b) for a, b in zip(got.logits, hetero.logits)) <= 1e-4


def test_test_built_transformer_exports_run_concurrently(tmp_path):
    """The transformer exports the dynamic-shape tests build (a transformers BERT through
    ov.convert_model; a decoder made stateful the way optimum-intel does it), placed by heft on
    virtual-2x1: the executor gives the plain f32 compile's outputs, and generates its logits."""
    from dynamic_models import export_bert, export_stateful_lm

    def split(out):  # both devices hold ops (heft splits both models here): the executor has work to do
        return {op.get_rt_info()["affinity"].astype(str) for op in read_placed(out).model.get_ordered_ops()}

    xml = export_bert(tmp_path / "bert.xml")
    out = heft_placed(xml, tmp_path, seq_len=8)
    assert split(out) == {"CPU", "CPU_B"}
    rng = np.random.default_rng(0)
    feed = {"input_ids": rng.integers(0, 100, (1, 8)), "attention_mask": np.ones((1, 8), np.int64),
            "token_type_ids": np.zeros((1, 8), np.int64)}
    want, got = plain(xml)(feed), compile_placed(out, execution="concurrent")(feed)
    for j in range(len(want)):
        assert relative_error(got[j], want[j]) <= 1e-3, j

    xml = export_stateful_lm(tmp_path / "lm.xml")
    out = heft_placed(xml, tmp_path, seq_len=16)
    assert split(out) == {"CPU", "CPU_B"}
    ids = np.random.default_rng(1).integers(1, 40, (1, 6))
    want = zoo.generate(plain(xml), ids, steps=4)
    got = zoo.generate(compile_placed(out, execution="concurrent"), ids, steps=4, follow=want.tokens)
    assert max(relative_error(a, b) for a, b in zip(got.logits, want.logits)) <= 1e-3

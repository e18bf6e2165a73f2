"""``hdp compile --phases``: prefill and decode of a stateful LLM placed separately, the KV cache handed
from one to the other; ``hdp show`` prints the plan; ``generate(prefill, ids, decode=decode)`` runs it."""

from __future__ import annotations

import numpy as np
import openvino as ov
import pytest
from click.testing import CliRunner
from conftest import _save
from test_max_allocation import FAST_GPU, tower

from hdp.base.errors import InputError
from hdp.cli.main import main
from hdp.cli.show import show
from hdp.pipeline.phases import parse_phases, phase_path, plan_lines, read_plan
from hdp.runtime.placed.model import compile_placed, read_placed, weight_bytes_by_device
from hdp.zoo.models import generate

F32 = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}

#: A CPU that is slow at arithmetic but quick to start an op, and a GPU the other way round: a
#: prompt's many tokens go to the GPU, one token's few FLOPs to the CPU. ``{shares}``: a shared memory.
SPLIT = """
name = "split"
[[devices]]
name = "CPU"
kind = "modeled"
peak_flops = {{ f32 = 1e9 }}
memory_bandwidth = 1e11
op_overhead = 1e-7
[[devices]]
name = "GPU"
kind = "modeled"
peak_flops = {{ f32 = 1e13 }}
memory_bandwidth = 1e12
op_overhead = 2e-5
[link]
latency = 1e-5
bandwidth = 1e9
subgraph_overhead = 1e-5
{shares}
"""


def compile_cli(*args):
    return CliRunner().invoke(main, ["compile", *map(str, args), "--no-cache"])


def test_phases_parse_in_order_and_a_bad_one_names_the_option():
    assert parse_phases("decode,prefill") == ("prefill", "decode") == parse_phases(" prefill , decode ")
    assert parse_phases("decode") == ("decode",)
    for text, msg in (("prefil", "--phases prefil: unknown phase 'prefil' (phases: prefill, decode)"),
                      ("decode,decode", "phase 'decode' given twice"), ("", "expected phases separated"),
                      ("prefill,", "expected phases separated")):
        with pytest.raises(InputError, match=msg.replace("(", r"\(").replace(")", r"\)")):
            parse_phases(text)
    assert phase_path("out/placed.xml", "decode").as_posix() == "out/placed.decode.xml"


def test_bad_phase_options_are_one_line_errors_and_write_nothing(tmp_path, llama_stateful_xml):
    out = tmp_path / "p.xml"
    stateless = _save(tower(), tmp_path / "tower.xml")
    for args, msg in (
            ([llama_stateful_xml, "--phases", "warmup"], "--phases warmup: unknown phase 'warmup'"),
            ([stateless, "--phases"], "--phases: " + str(stateless) + " has no state"),
            ([llama_stateful_xml, "--phases", "--phase", "decode"], "--phases: each phase is placed at its own"),
            ([llama_stateful_xml, "--phases", "--export-blob", tmp_path / "p.blob"], "--export-blob is for one"),
    ):
        r = compile_cli(*args, "-o", out, "--target", "i9-flex170")
        assert r.exit_code == 2, r.output
        assert msg in r.output and r.output.count("\n") == 1, r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tower.bin", "tower.xml"]


def placed_devices(xml):
    return {op.get_rt_info()["affinity"].astype(str) for op in read_placed(xml).model.get_ordered_ops()}


@pytest.mark.slow
@pytest.mark.parametrize("shared", [False, True])
def test_prefill_and_decode_go_where_each_is_fastest_and_the_cache_crosses_unless_memory_is_shared(
        tmp_path, llama_stateful_xml, shared):
    target = tmp_path / "split.toml"
    target.write_text(SPLIT.format(shares='[[shares]]\nresource = "memory"\ndevices = ["CPU", "GPU"]' if shared else ""))
    out = tmp_path / "p.xml"
    r = compile_cli(llama_stateful_xml, "-o", out, "--target", target, "--method", "optimal", "--phases",
                    "--timings", tmp_path / "t.json", "--dump-ir", tmp_path / "ir")
    assert r.exit_code == 0, r.output
    prefill, decode = phase_path(out, "prefill"), phase_path(out, "decode")
    assert not out.exists() and prefill.exists() and decode.exists()
    assert (tmp_path / "t.prefill.json").exists() and (tmp_path / "t.decode.json").exists()
    assert sorted(p.name for p in (tmp_path / "ir").iterdir()) == ["decode", "prefill"]
    plan = read_plan(read_placed(prefill).model)
    assert plan == read_plan(read_placed(decode).model) and plan.seq_len == 128
    pre, dec = plan.phase("prefill"), plan.phase("decode")
    assert (pre.state_on, dec.state_on, pre.file, dec.file) == (("GPU",), ("CPU",), prefill.name, decode.name)
    assert pre.ops["GPU"] > 0.9 * sum(pre.ops.values()) and dec.ops["CPU"] > 0.9 * sum(dec.ops.values())
    assert placed_devices(prefill) >= {"GPU"} and placed_devices(decode) >= {"CPU"}
    # llama-tiny's cache after 128 tokens: 2 layers x (key, value) x [1, 2 heads, 128, 16] f32
    assert plan.kv_bytes == 2 * 2 * 2 * 128 * 16 * 4
    if shared:
        assert plan.handoff == 0 and plan.moved == ()
    else:  # each of the 4 variables over the link: latency + 16 KiB at 1 GB/s
        assert plan.moved == ("GPU>CPU",) and plan.handoff == pytest.approx(4 * (1e-5 + 16384 / 1e9))
    singles = plan.single_requests()
    assert set(singles) == {"CPU", "GPU"}
    # each phase on its best device beats both phases on either one alone
    assert plan.request() < min(total for _, _, total in singles.values())
    assert pre.seconds <= singles["GPU"][0] and dec.seconds <= singles["CPU"][1]
    for line in plan_lines(plan):
        assert line in r.output
    shown = show(str(decode))
    assert "time to first token" in shown and "time per token" in shown and prefill.name in shown
    assert ("copied over the link (GPU>CPU)" in shown) != shared


@pytest.mark.slow
def test_phases_placed_on_this_host_generate_the_original_s_tokens(tmp_path, llama_stateful_xml):
    """On ``virtual``'s real devices: both placed models pass compile's check, and the prompt run on
    the prefill's placement with the steps on the decode's gives the original's tokens."""
    out = tmp_path / "p.xml"
    r = compile_cli(llama_stateful_xml, "-o", out, "--target", "virtual", "--method", "optimal", "--phases",
                    "--seq-len", "16", "--no-compare")
    assert r.exit_code == 0, r.output
    assert r.output.count("checked: runs under HETERO and matches the original") == 2
    ids = np.random.default_rng(1).integers(0, 512, (1, 16))
    want = generate(ov.Core().compile_model(str(llama_stateful_xml), "CPU", F32), ids, steps=6)
    got = generate(compile_placed(phase_path(out, "prefill"), config=F32), ids, steps=6,
                   decode=compile_placed(phase_path(out, "decode"), config=F32))
    np.testing.assert_array_equal(got.tokens, want.tokens)


def test_generate_hands_the_prefill_s_cache_to_the_decode_model(llama_stateful_xml):
    """Two compiled models of one LM: the prompt on one, every step on the other, the KV cache set
    on the second request after the prefill; the logits equal one model's. Without the cache the
    steps would see no prompt."""
    core = ov.Core()
    one = core.compile_model(str(llama_stateful_xml), "CPU", F32)
    other = core.compile_model(str(llama_stateful_xml), "CPU", F32)
    ids = np.random.default_rng(2).integers(0, 512, (2, 7))
    want = generate(one, ids, steps=4)
    got = generate(one, ids, steps=4, decode=other)
    np.testing.assert_array_equal(got.tokens, want.tokens)
    for a, b in zip(got.logits, want.logits):
        np.testing.assert_allclose(a, b, atol=1e-5)
    fresh = core.compile_model(str(llama_stateful_xml), "CPU", F32).create_infer_request()
    fresh.reset_state()
    blind = fresh.infer({"input_ids": want.tokens[:, :1], "attention_mask": np.ones((2, 1), np.int64),
                         "position_ids": np.full((2, 1), 7, np.int64), "beam_idx": np.arange(2, dtype=np.int32)})
    assert np.abs(np.asarray(blind[0])[:, -1] - got.logits[1]).max() > 1e-2


def test_generate_refuses_a_decode_model_without_the_same_state(tmp_path, llama_stateful_xml):
    core = ov.Core()
    lm = core.compile_model(str(llama_stateful_xml), "CPU", F32)
    stateless = core.compile_model(str(_save(tower(), tmp_path / "tower.xml")), "CPU")
    with pytest.raises(InputError, match="decode= must be the same stateful model"):
        generate(lm, np.ones((1, 3), np.int64), steps=1, decode=stateless)


@pytest.mark.slow
def test_a_moe_under_a_gpu_cap_keeps_experts_on_the_cpu_within_the_cap(tmp_path, zoo_export):
    """qwen2-moe-tiny on a GPU faster at everything but capped below the model: each phase's
    placement holds the cap (stored weights as written, read back) and keeps some layers' routed
    experts (their stacked weights' Gathers) on the CPU; uncapped, every expert is on the GPU."""
    xml = zoo_export("qwen2-moe-tiny:stateful")
    target = tmp_path / "fast.toml"
    target.write_text(FAST_GPU.format(cap=""))
    cap = 600 * 1024
    experts = {}
    for label, extra in (("capped", ["--memory", f"GPU={cap}"]), ("free", [])):
        out = tmp_path / f"{label}.xml"
        r = compile_cli(xml, "-o", out, "--target", target, "--method", "optimal", "--phases", "--seq-len", "16",
                        *extra)
        assert r.exit_code == 0, r.output
        for phase in ("prefill", "decode"):
            pm = read_placed(phase_path(out, phase))
            if label == "capped":
                assert weight_bytes_by_device(pm)["GPU"] <= cap
            experts[label, phase] = {op.get_rt_info()["affinity"].astype(str) for op in pm.model.get_ordered_ops()
                                     if op.get_type_name() == "Gather" and "mlp.experts" in op.get_friendly_name()
                                     and op.input_value(0).get_node().get_type_name() == "Constant"}
    assert experts["free", "prefill"] == experts["free", "decode"] == {"GPU"}
    assert "CPU" in experts["capped", "prefill"] and "CPU" in experts["capped", "decode"]

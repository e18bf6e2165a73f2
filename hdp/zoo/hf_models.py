"""Zoo transformers: ``transformers`` configs, random weights (fixed seed), ``ov.convert_model``.

Imported lazily by :mod:`hdp.zoo.models` (it imports torch and transformers). Each model is exported the way a
user gets it: ``ov.convert_model`` with an example input, all dimensions dynamic unless ``input=``
shapes fix them, the attention implementation transformers picks by default (SDPA, which the PyTorch
frontend turns into one ``ScaledDotProductAttention`` op) unless a preset says otherwise.

The stateful causal LMs follow optimum-intel's recipe (``optimum/exporters/openvino/stateful.py``):
convert with the past keys/values as inputs ``past_key_values.N.key|value`` and outputs
``present.N.key|value``; add a ``beam_idx`` input that reorders the cache rows (a Gather on the batch
axis of every past input); turn each past/present pair into a ReadValue/Assign variable with
``openvino._offline_transformations.apply_make_stateful_transformation``; initialise every state to an
empty cache whose batch comes from ``input_ids``.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from hdp.base.errors import InputError
from hdp.zoo.common import SEED, name_port

# (kind, preset) -> (config class name, config kwargs, static sequence length or image size)
_TEXT_TINY = dict(vocab_size=512, max_position_embeddings=128)
# Tiny causal LMs draw weights 5x wider than transformers' default (std 0.02), so that logits spread
# enough (std ~1.5) for greedy tokens to be stable under f32/bf16 differences between placements.
_LM_TINY = dict(initializer_range=0.2)
PRESETS: dict[tuple[str, str], tuple[str, dict[str, Any], int]] = {
    ("bert", "tiny"): ("BertConfig", dict(_TEXT_TINY, hidden_size=64, num_hidden_layers=2,
                                          num_attention_heads=4, intermediate_size=128), 16),
    ("bert", "base"): ("BertConfig", dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                          num_attention_heads=12, intermediate_size=3072,
                                          max_position_embeddings=512, type_vocab_size=2), 128),
    # the original zoo BERT: explicit MatMul/Softmax attention, plain ops every plugin supports
    ("bert", "base-eager"): ("BertConfig", dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                                num_attention_heads=12, intermediate_size=3072,
                                                max_position_embeddings=512, type_vocab_size=2,
                                                attn_implementation="eager"), 128),
    # BERT-large (24 layers, hidden 1024) with eager attention: the zoo's bert_base twice as deep
    ("bert", "large-eager"): ("BertConfig", dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24,
                                                 num_attention_heads=16, intermediate_size=4096,
                                                 max_position_embeddings=512, type_vocab_size=2,
                                                 attn_implementation="eager"), 128),
    ("gpt2", "tiny"): ("GPT2Config", dict(_LM_TINY, vocab_size=512, n_positions=128, n_embd=64, n_layer=2,
                                          n_head=4, bos_token_id=511, eos_token_id=511),
                       16),
    ("gpt2", "small"): ("GPT2Config", dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12,
                                           n_head=12), 128),
    ("llama", "tiny"): ("LlamaConfig", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2), 16),
    ("llama", "smollm-135m"): ("LlamaConfig", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                                   num_hidden_layers=30, num_attention_heads=9,
                                                   num_key_value_heads=3, max_position_embeddings=2048,
                                                   rms_norm_eps=1e-5, tie_word_embeddings=True), 128),
    # Llama-2-7B's depth and layout (32 layers, full multi-head attention, untied embeddings, vocab
    # 32000) at 1/8 of its width: the op graph of a 7B export at a size this machine builds in minutes
    ("llama", "llama2-32l"): ("LlamaConfig", dict(vocab_size=32000, hidden_size=512, intermediate_size=1376,
                                                  num_hidden_layers=32, num_attention_heads=8,
                                                  num_key_value_heads=8, max_position_embeddings=4096,
                                                  rms_norm_eps=1e-5, tie_word_embeddings=False), 128),
    # SmolLM-135M's shape with 24 layers: a 24-layer Llama of a few thousand ops (issue 22's table)
    ("llama", "24l"): ("LlamaConfig", dict(vocab_size=49152, hidden_size=576, intermediate_size=1536,
                                           num_hidden_layers=24, num_attention_heads=9, num_key_value_heads=3,
                                           max_position_embeddings=2048, rms_norm_eps=1e-5,
                                           tie_word_embeddings=True), 128),
    ("qwen2", "tiny"): ("Qwen2Config", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                            num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2), 16),
    ("qwen2", "qwen2.5-0.5b"): ("Qwen2Config", dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                                                    num_hidden_layers=24, num_attention_heads=14,
                                                    num_key_value_heads=2, max_position_embeddings=32768,
                                                    rms_norm_eps=1e-6, tie_word_embeddings=True), 128),
    ("llama", "tiny-8l"): ("LlamaConfig", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                               num_hidden_layers=8, num_attention_heads=4,
                                               num_key_value_heads=2), 16),
    ("qwen2", "tiny-8l"): ("Qwen2Config", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                               num_hidden_layers=8, num_attention_heads=4,
                                               num_key_value_heads=2), 16),
    # Qwen-MoE (Qwen1.5-MoE / Qwen2-MoE layout): every layer's MLP is a sparse block of routed experts
    # (top-k of a softmax router) beside one shared expert behind a sigmoid gate. The experts run with
    # transformers' ``batched_mm`` implementation: each token gathers the weights of its k experts from
    # the stacked ``[experts, 2 x intermediate, hidden]`` tensor and multiplies them (Gather, MatMul), so
    # shapes are static and routing is exact; the default ("eager") loops over the experts a batch hits,
    # a data-dependent loop a trace cannot keep.
    ("qwen2_moe", "tiny"): ("Qwen2MoeConfig", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                                   moe_intermediate_size=32, shared_expert_intermediate_size=64,
                                                   num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1,
                                                   norm_topk_prob=False, num_hidden_layers=2,
                                                   num_attention_heads=4, num_key_value_heads=2,
                                                   experts_implementation="batched_mm"), 16),
    # Qwen1.5-MoE-A2.7B's routing (60 experts, top 4, a shared expert four experts wide, every layer
    # sparse) at 1/8 of its width and half its depth: 12 layers, hidden 256, experts 176 wide, vocab
    # 32000 (~120M parameters, ~80 % of them routed experts)
    ("qwen2_moe", "a2.7b-small"): ("Qwen2MoeConfig", dict(vocab_size=32000, hidden_size=256, intermediate_size=704,
                                                          moe_intermediate_size=176,
                                                          shared_expert_intermediate_size=704, num_experts=60,
                                                          num_experts_per_tok=4, decoder_sparse_step=1,
                                                          norm_topk_prob=False, num_hidden_layers=12,
                                                          num_attention_heads=4, num_key_value_heads=4,
                                                          max_position_embeddings=4096, rms_norm_eps=1e-6,
                                                          tie_word_embeddings=False,
                                                          experts_implementation="batched_mm"), 128),
    # Phi-3: fused qkv_proj and gate_up_proj (split by Slice/VariadicSplit), full multi-head attention
    ("phi3", "tiny"): ("Phi3Config", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                          pad_token_id=0, bos_token_id=1, eos_token_id=2), 16),
    ("phi3", "tiny-8l"): ("Phi3Config", dict(_TEXT_TINY, **_LM_TINY, hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=4,
                                             pad_token_id=0, bos_token_id=1, eos_token_id=2), 16),
    ("vit", "tiny"): ("ViTConfig", dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=128, num_labels=10), 32),
    ("vit", "base"): ("ViTConfig", dict(image_size=224, patch_size=16, hidden_size=768, num_hidden_layers=12,
                                        num_attention_heads=12, intermediate_size=3072, num_labels=1000), 224),
}
_DECODERS = {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
             "phi3": "Phi3ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM"}


def build(kind: str, preset: str, shape: str):
    """The ``ov.Model`` of ``(kind, preset)`` in ``shape`` (static, dynamic or stateful), f32 weights."""
    transformers = _import_transformers()
    config_class, kwargs, length = PRESETS[(kind, preset)]
    config = getattr(transformers, config_class)(**kwargs)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        if kind in _DECODERS:
            return _decoder(transformers, _DECODERS[kind], config, length, shape)
        if kind == "bert":
            return _bert(transformers, config, length, shape)
        if kind == "vit":
            return _vit(transformers, config, length, shape)
    finally:
        transformers.logging.set_verbosity(verbosity)
    raise ValueError(f"unknown transformers zoo kind {kind!r}")


def _import_transformers():
    try:
        import transformers
    except ImportError as e:
        raise InputError(f"cannot import transformers ({e}): pip install 'hdp[zoo]'") from None
    return transformers


def _instantiate(model_class, config):
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        return model_class(config).eval()


def _convert(module, example: dict, shapes: dict[str, list[int]] | None):
    """ov.convert_model with an example input; ``shapes`` fixes the named inputs, None leaves all dynamic."""
    import openvino as ov
    import torch

    kwargs: dict[str, Any] = {"example_input": example}
    if shapes is not None:
        kwargs["input"] = [(k, s, ov.Type.i64 if example[k].dtype == torch.int64 else ov.Type.f32)
                           for k, s in shapes.items()]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ov.convert_model(module, **kwargs)


def _text_inputs(names: tuple[str, ...], batch: int, length: int) -> dict:
    import torch

    return {k: torch.ones((batch, length), dtype=torch.int64) for k in names}


def _keep_named_outputs(ov_model) -> None:
    """Drop the tracer's numeric aliases (``"189"``) next to an output's real name."""
    for port in ov_model.outputs:
        named = {n for n in port.get_names() if not n.isdigit()}
        if named:
            port.get_tensor().set_names(named)


# --- encoders ----------------------------------------------------------------------------------------


def _bert(transformers, config, length: int, shape: str):
    net = _instantiate(transformers.BertModel, config)
    inputs = ("input_ids", "attention_mask", "token_type_ids")
    if shape == "static":
        ov_model = _convert(net, _text_inputs(inputs, 1, length), {k: [1, length] for k in inputs})
    else:  # batch 2, sequence 8: distinct example sizes, nothing fixed
        ov_model = _convert(net, _text_inputs(inputs, 2, 8), None)
    _keep_named_outputs(ov_model)
    return ov_model


class _Logits:
    """torch.nn.Module wrappers that return only the logits (built lazily: torch is heavy)."""

    @staticmethod
    def image(net):
        import torch

        class ImageLogits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, pixel_values):
                return self.net(pixel_values=pixel_values).logits

        return ImageLogits()

    @staticmethod
    def causal(net):
        import torch

        class CausalLogits(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = net

            def forward(self, input_ids, attention_mask):
                return self.net(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

        return CausalLogits()


def _vit(transformers, config, size: int, shape: str):
    import torch

    net = _instantiate(transformers.ViTForImageClassification, config)
    batch = 1 if shape == "static" else 2
    example = {"pixel_values": torch.zeros((batch, 3, size, size))}
    ov_model = _convert(_Logits.image(net), example,
                        {"pixel_values": [1 if shape == "static" else -1, 3, size, size]})
    name_port(ov_model.inputs[0], "pixel_values")
    name_port(ov_model.outputs[0], "logits")
    return ov_model


# --- causal LMs --------------------------------------------------------------------------------------


def _decoder(transformers, model_class: str, config, length: int, shape: str):
    net = _instantiate(getattr(transformers, model_class), config)
    if shape == "stateful":
        return _stateful_decoder(net, config)
    inputs = ("input_ids", "attention_mask")
    if shape == "static":
        ov_model = _convert(_Logits.causal(net), _text_inputs(inputs, 1, length),
                            {k: [1, length] for k in inputs})
    else:
        ov_model = _convert(_Logits.causal(net), _text_inputs(inputs, 2, 8), None)
    name_port(ov_model.outputs[0], "logits")
    return ov_model


def _cache_geometry(config) -> tuple[int, int, int]:
    """(layers, key/value heads, head size) of a decoder config."""
    layers = config.num_hidden_layers
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return layers, kv_heads, head_dim


def _with_past(net, config):
    """The decoder as a module taking/returning the KV cache as plain tensors (what gets traced)."""
    import torch
    from transformers import DynamicCache

    class WithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = net

        def forward(self, input_ids, attention_mask, position_ids, past_key_values):
            cache = DynamicCache(config=config)
            for layer, (key, value) in zip(cache.layers, past_key_values):
                # Fill each layer directly: initialising it through update() would concatenate onto an
                # empty tensor, which the tracer records as a Concat the PyTorch frontend cannot convert.
                layer.lazy_initialization(key, value)
                layer.keys, layer.values = key, value
            out = self.net(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                           past_key_values=cache, use_cache=True)
            present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
            return (out.logits, *present)

    return WithPast()


def _stateful_decoder(net, config):
    import openvino as ov
    import torch

    layers, kv_heads, head_dim = _cache_geometry(config)
    batch, new, past = 2, 3, 5  # distinct sizes so the tracer cannot confuse the dimensions
    example = {
        "input_ids": torch.ones((batch, new), dtype=torch.int64),
        "attention_mask": torch.ones((batch, past + new), dtype=torch.int64),
        "position_ids": torch.arange(past, past + new).expand(batch, new).contiguous(),
        "past_key_values": [(torch.zeros(batch, kv_heads, past, head_dim),) * 2 for _ in range(layers)],
    }
    ov_model = _convert(_with_past(net, config), example, None)
    names = ["input_ids", "attention_mask", "position_ids"]
    past_names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    present_names = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    if len(ov_model.inputs) != len(names) + len(past_names) or len(ov_model.outputs) != 1 + len(present_names):
        raise RuntimeError(f"unexpected traced decoder: {len(ov_model.inputs)} inputs, "
                           f"{len(ov_model.outputs)} outputs for {layers} layers")
    for port, name in zip(ov_model.inputs, names + past_names):
        name_port(port, name)
    for port in ov_model.inputs[len(names):]:  # heads and head size are known, batch and length are not
        port.get_node().set_partial_shape(ov.PartialShape([-1, kv_heads, -1, head_dim]))
    for port, name in zip(ov_model.outputs, ["logits"] + present_names):
        name_port(port, name)
    ov_model.validate_nodes_and_infer_types()
    _fuse_cache_reorder(ov_model, past_names)
    _make_stateful(ov_model, dict(zip(past_names, present_names)))
    return ov_model


def _fuse_cache_reorder(ov_model, past_names: list[str]) -> None:
    """Add ``beam_idx`` ([batch], i32) and gather every past input's rows by it, as optimum-intel does."""
    import openvino as ov
    from openvino import opset13 as ops

    batch = ov_model.input("input_ids").get_partial_shape()[0]
    beam_idx = ops.parameter(ov.PartialShape([batch]), ov.Type.i32, name="beam_idx")
    beam_idx.output(0).get_tensor().set_names({"beam_idx"})
    ov_model.add_parameters([beam_idx])
    for name in past_names:
        port = ov_model.input(name)
        consumers = list(port.get_target_inputs())
        gathered = ops.gather(port, beam_idx, ops.constant(0, ov.Type.i64))
        for consumer in consumers:
            consumer.replace_source_output(gathered.output(0))
    ov_model.validate_nodes_and_infer_types()


def _make_stateful(ov_model, pairs: dict[str, str]) -> None:
    """Past/present pairs -> ReadValue/Assign variables, each initialised to an empty cache."""
    from openvino import opset13 as ops
    from openvino._offline_transformations import apply_make_stateful_transformation

    apply_make_stateful_transformation(ov_model, pairs)
    input_ids = ov_model.input("input_ids")
    batch = ops.gather(ops.shape_of(input_ids, "i64"), ops.constant(np.array([0], np.int64)),
                       ops.constant(np.int64(0)))
    for op in ov_model.get_ops():
        if op.get_type_name() != "ReadValue":
            continue
        # [batch, heads, 0, head size]: the dynamic length starts empty (its minimum, 0)
        dims = [batch] + [ops.constant(np.array([d.get_min_length()], np.int64))
                          for d in list(op.get_output_partial_shape(0))[1:]]
        zero = ops.constant(np.zeros((), op.get_output_element_type(0).to_dtype()))
        op.set_arguments([ops.broadcast(zero, ops.concat(dims, axis=0))])
    ov_model.validate_nodes_and_infer_types()

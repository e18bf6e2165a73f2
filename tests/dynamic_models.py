"""Tiny dynamic-shape models built with openvino.opset13, the way exporters shape them.

- :func:`build_cnn`: a CNN with a dynamic batch ``[?,3,16,16]``;
- :func:`build_encoder`: a BERT-like encoder with ``input_ids``/``attention_mask``/
  ``token_type_ids`` of shape ``[?,?]`` (batch and sequence dynamic), reshapes computed from
  ShapeOf as PyTorch exports compute them;
- :func:`build_stateful_lm`: a decoder with optimum-intel's stateful KV cache: ``input_ids``,
  ``attention_mask``, ``position_ids`` ``[?,?]`` and ``beam_idx`` ``[?]``; per layer a key and a
  value variable ``[?,heads,?,head_dim]`` read by a ReadValue whose initialiser is zeros of
  ``[batch, heads, 0, head_dim]`` (optimum's ``build_state_initializer``), reordered by
  ``beam_idx``, concatenated with the new keys/values, stored by an Assign and attended with
  ScaledDotProductAttention (the pattern the CPU plugin fuses; not causal, to stay small).
"""

from __future__ import annotations

import numpy as np


def _named(param, name):
    param.output(0).set_names({name})
    return param


def build_cnn(channels=8, classes=5):
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    x = _named(ops.parameter([-1, 3, 16, 16], np.float32, name="x"), "x")
    w1 = ops.constant(rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) * 0.3, name="w1")
    c1 = ops.relu(ops.convolution(x, w1, [1, 1], [1, 1], [1, 1], [1, 1], name="conv1"), name="relu1")
    w2 = ops.constant(rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.2, name="w2")
    c2 = ops.relu(ops.convolution(c1, w2, [1, 1], [1, 1], [1, 1], [1, 1], name="conv2"), name="relu2")
    pool = ops.reduce_mean(ops.add(c1, c2, name="skip"), ops.constant(np.int64([2, 3]), name="axes"), False,
                           name="gap")
    fc = ops.matmul(pool, ops.constant(rng.standard_normal((channels, classes)).astype(np.float32), name="fc_w"),
                    False, False, name="fc")
    return ov.Model([ops.result(ops.softmax(fc, -1, name="prob"), name="out")], [x], "dyn_cnn")


def _dims(shape, *idx):
    from openvino import opset13 as ops

    return ops.gather(shape, ops.constant(np.int64(list(idx))), ops.constant(np.int64(0)))


def build_encoder(vocab=50, hidden=32, heads=2, layers=2):
    """input_ids/attention_mask/token_type_ids [?,?] -> hidden states [?,?,hidden]."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(1)
    d = hidden // heads
    ids = _named(ops.parameter([-1, -1], np.int64, name="input_ids"), "input_ids")
    mask = _named(ops.parameter([-1, -1], np.int64, name="attention_mask"), "attention_mask")
    types = _named(ops.parameter([-1, -1], np.int64, name="token_type_ids"), "token_type_ids")
    word = ops.constant(rng.standard_normal((vocab, hidden)).astype(np.float32), name="word_emb")
    tok = ops.constant(rng.standard_normal((2, hidden)).astype(np.float32), name="type_emb")
    h = ops.add(ops.gather(word, ids, ops.constant(np.int64(0))), ops.gather(tok, types, ops.constant(np.int64(0))),
                name="embed")
    shp = ops.shape_of(ids, name="ids_shape")
    split_heads = ops.concat([_dims(shp, 0, 1), ops.constant(np.int64([heads, d]))], 0, name="split_heads")
    merge_heads = ops.concat([_dims(shp, 0, 1), ops.constant(np.int64([hidden]))], 0, name="merge_heads")
    # additive mask [B,1,1,S]: 0 where attended, -1e4 elsewhere
    m = ops.convert(ops.unsqueeze(mask, ops.constant(np.int64([1, 2]))), np.float32)
    bias = ops.multiply(ops.subtract(ops.constant(np.float32(1)), m), ops.constant(np.float32(-1e4)), name="mask_bias")
    perm = ops.constant(np.int64([0, 2, 1, 3]))
    for layer in range(layers):
        def proj(x, what):
            w = ops.constant(rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.2, name=f"l{layer}.{what}.w")
            return ops.transpose(ops.reshape(ops.matmul(x, w, False, False), split_heads, False), perm)

        q, k, v = proj(h, "q"), proj(h, "k"), proj(h, "v")
        s = ops.add(ops.multiply(ops.matmul(q, k, False, True), ops.constant(np.float32(d ** -0.5))), bias)
        a = ops.matmul(ops.softmax(s, -1), v, False, False, name=f"l{layer}.attn")
        a = ops.reshape(ops.transpose(a, perm), merge_heads, False)
        h = ops.mvn(ops.add(h, a), ops.constant(np.int64([-1])), True, 1e-5, "inside_sqrt", name=f"l{layer}.norm")
    return ov.Model([ops.result(h, name="last_hidden_state")], [ids, mask, types], "dyn_encoder")


def build_stateful_lm(vocab=40, hidden=32, heads=2, layers=2):
    """optimum-intel's stateful decoder layout: logits [?,?,vocab]; KV cache in the state."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    rng = np.random.default_rng(2)
    d = hidden // heads
    ids = _named(ops.parameter([-1, -1], np.int64, name="input_ids"), "input_ids")
    mask = _named(ops.parameter([-1, -1], np.int64, name="attention_mask"), "attention_mask")
    pos = _named(ops.parameter([-1, -1], np.int64, name="position_ids"), "position_ids")
    beam = _named(ops.parameter([-1], np.int32, name="beam_idx"), "beam_idx")
    emb = ops.constant(rng.standard_normal((vocab, hidden)).astype(np.float32), name="embed_tokens")
    pemb = ops.constant(rng.standard_normal((512, hidden)).astype(np.float32) * 0.1, name="embed_positions")
    h = ops.add(ops.gather(emb, ids, ops.constant(np.int64(0))), ops.gather(pemb, pos, ops.constant(np.int64(0))),
                name="embed")
    shp = ops.shape_of(ids, name="ids_shape")
    batch = _dims(shp, 0)
    split_heads = ops.concat([_dims(shp, 0, 1), ops.constant(np.int64([heads, d]))], 0, name="split_heads")
    merge_heads = ops.concat([_dims(shp, 0, 1), ops.constant(np.int64([hidden]))], 0, name="merge_heads")
    init_shape = ops.concat([batch, ops.constant(np.int64([heads, 0, d]))], 0, name="state_init_shape")
    perm = ops.constant(np.int64([0, 2, 1, 3]))
    sinks = []
    for layer in range(layers):
        def proj(x, what):
            w = ops.constant(rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.2,
                             name=f"layers.{layer}.{what}_proj")
            return ops.transpose(ops.reshape(ops.matmul(x, w, False, False), split_heads, False), perm)

        q, kv = proj(h, "q"), []
        for what in ("key", "value"):
            info = VariableInfo()
            info.data_shape = ov.PartialShape([-1, heads, -1, d])
            info.data_type = ov.Type.f32
            info.variable_id = f"past_key_values.{layer}.{what}present.{layer}.{what}"
            var = Variable(info)
            init = ops.broadcast(ops.constant(np.float32(0)), init_shape)
            past = ops.gather(ops.read_value(init, var, name=f"past.{layer}.{what}"), beam, ops.constant(np.int64(0)))
            cur = ops.concat([past, proj(h, what[0])], 2, name=f"present.{layer}.{what}")
            sink = ops.assign(cur, var)
            sink.set_friendly_name(f"assign.{layer}.{what}")  # ops.assign ignores name=
            sinks.append(sink)
            kv.append(cur)
        a = ops.scaled_dot_product_attention(q, kv[0], kv[1], causal=False, name=f"layers.{layer}.sdpa")
        h = ops.add(h, ops.reshape(ops.transpose(a, perm), merge_heads, False), name=f"layers.{layer}.residual")
        h = ops.mvn(h, ops.constant(np.int64([-1])), True, 1e-5, "inside_sqrt", name=f"layers.{layer}.norm")
    head = ops.constant(rng.standard_normal((hidden, vocab)).astype(np.float32), name="lm_head")
    logits = ops.matmul(h, head, False, False, name="logits")
    # the mask is consumed as optimum's exports do (it shapes the causal mask); here: scaled by 1
    logits = ops.multiply(logits, ops.convert(ops.reduce_max(mask, ops.constant(np.int64([0, 1])), False),
                                              np.float32), name="logits_masked")
    return ov.Model([ops.result(logits, name="logits")], sinks, [ids, mask, pos, beam], "stateful_lm")


def build_llama_lm(vocab=40, hidden=32, heads=2, layers=2):
    """A Llama-like decoder in optimum-intel's stateful layout, as ``ov.convert_model`` writes a
    transformers Llama: ``input_ids``, ``attention_mask``, ``position_ids`` ``[?,?]`` and
    ``beam_idx`` ``[?]``; rotary embedding (cos/sin) computed once from ``position_ids``; a causal
    mask ``[batch, 1, new, total]`` from ``attention_mask`` and the lengths ShapeOf reads from
    ``input_ids`` and ``attention_mask``; per layer an RMS norm, q/k/v projections reshaped to heads
    by a shape computed from ``input_ids``, rotary applied to q and k, the key and value states in
    ReadValue/Assign (initialiser: zeros of ``[batch of input_ids, heads, 0, head_dim]``, reordered
    by ``beam_idx``), masked ScaledDotProductAttention, output projection and a SiLU MLP."""
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    rng = np.random.default_rng(3)
    d = hidden // heads

    def const(*shape, scale=0.3):
        return ops.constant((rng.standard_normal(shape) * scale).astype(np.float32))

    def i64(*v):
        return ops.constant(np.array(v, np.int64))

    ids = _named(ops.parameter([-1, -1], np.int64, name="input_ids"), "input_ids")
    mask = _named(ops.parameter([-1, -1], np.int64, name="attention_mask"), "attention_mask")
    pos = _named(ops.parameter([-1, -1], np.int64, name="position_ids"), "position_ids")
    beam = _named(ops.parameter([-1], np.int32, name="beam_idx"), "beam_idx")
    h = ops.gather(const(vocab, hidden, scale=1.0), ids, i64(0), name="embed_tokens")
    # rotary embedding from position_ids: [B, 1, S, d]
    inv_freq = ops.constant((1.0 / 10000 ** (np.arange(0, d, 2) / d)).astype(np.float32).reshape(1, -1, 1))
    freqs = ops.transpose(ops.matmul(ops.broadcast(inv_freq, ops.concat([_dims(ops.shape_of(pos), 0), i64(d // 2, 1)], 0)),
                                     ops.convert(ops.unsqueeze(pos, i64(1)), np.float32), False, False),
                          i64(0, 2, 1), name="rotary_emb.freqs")
    angles = ops.concat([freqs, freqs], -1)
    cos = ops.unsqueeze(ops.cos(angles, name="rotary_emb.cos"), i64(1))
    sin = ops.unsqueeze(ops.sin(angles, name="rotary_emb.sin"), i64(1))
    # causal mask from attention_mask and the lengths: [B, 1, S, T]
    ids_shape = ops.shape_of(ids, name="ids_shape")
    one, zero = ops.constant(np.int64(1)), ops.constant(np.int64(0))
    new = ops.gather(ids_shape, one, zero)
    total = ops.gather(ops.shape_of(mask), one, zero)
    q_pos = ops.range(ops.subtract(total, new), total, one, "i64")
    k_pos = ops.range(zero, total, one, "i64")
    causal = ops.less_equal(ops.unsqueeze(k_pos, i64(0)), ops.unsqueeze(q_pos, i64(1)))
    padded = ops.convert(ops.unsqueeze(mask, i64(1, 2)), np.bool_)
    bias = ops.select(ops.logical_and(causal, padded), ops.constant(np.float32(0)),
                      ops.constant(np.float32(-1e4)), name="causal_mask")
    heads_shape = ops.concat([_dims(ids_shape, 0, 1), i64(heads, d)], 0, name="heads_shape")
    merge_shape = ops.concat([_dims(ids_shape, 0, 1), i64(hidden)], 0, name="merge_shape")
    init_shape = ops.concat([_dims(ids_shape, 0), i64(heads, 0, d)], 0, name="state_init_shape")

    def rms(x, name):
        var = ops.reduce_mean(ops.multiply(x, x), i64(-1), True)
        return ops.multiply(ops.divide(x, ops.sqrt(ops.add(var, ops.constant(np.float32(1e-6))))),
                            ops.constant(np.ones(hidden, np.float32)), name=name)

    def rotary(x):
        half = ops.concat([ops.negative(ops.slice(x, i64(d // 2), i64(d), i64(1), i64(3))),
                           ops.slice(x, i64(0), i64(d // 2), i64(1), i64(3))], -1)
        return ops.add(ops.multiply(x, cos), ops.multiply(half, sin))

    sinks = []
    for layer in range(layers):
        x = rms(h, f"layers.{layer}.input_layernorm")

        def proj(what):
            y = ops.matmul(x, const(hidden, hidden), False, False, name=f"layers.{layer}.{what}_proj")
            return ops.transpose(ops.reshape(y, heads_shape, False), i64(0, 2, 1, 3))

        q, kv = rotary(proj("q")), []
        for what, cur in (("key", rotary(proj("k"))), ("value", proj("v"))):
            info = VariableInfo()
            info.data_shape = ov.PartialShape([-1, heads, -1, d])
            info.data_type = ov.Type.f32
            info.variable_id = f"past_key_values.{layer}.{what}present.{layer}.{what}"
            var = Variable(info)
            init = ops.broadcast(ops.constant(np.float32(0)), init_shape)
            past = ops.gather(ops.read_value(init, var, name=f"past.{layer}.{what}"), beam, i64(0))
            state = ops.concat([past, cur], 2, name=f"present.{layer}.{what}")
            sink = ops.assign(state, var)
            sink.set_friendly_name(f"assign.{layer}.{what}")
            sinks.append(sink)
            kv.append(state)
        a = ops.scaled_dot_product_attention(q, kv[0], kv[1], bias, causal=False, name=f"layers.{layer}.sdpa")
        a = ops.reshape(ops.transpose(a, i64(0, 2, 1, 3)), merge_shape, False)
        h = ops.add(h, ops.matmul(a, const(hidden, hidden), False, False, name=f"layers.{layer}.o_proj"))
        y = rms(h, f"layers.{layer}.post_attention_layernorm")
        gate = ops.swish(ops.matmul(y, const(hidden, 2 * hidden), False, False, name=f"layers.{layer}.gate_proj"))
        up = ops.matmul(y, const(hidden, 2 * hidden), False, False, name=f"layers.{layer}.up_proj")
        h = ops.add(h, ops.matmul(ops.multiply(gate, up), const(2 * hidden, hidden), False, False,
                                  name=f"layers.{layer}.down_proj"), name=f"layers.{layer}.residual")
    logits = ops.matmul(rms(h, "norm"), const(hidden, vocab, scale=1.0), False, False, name="lm_head")
    return ov.Model([ops.result(logits, name="logits")], sinks, [ids, mask, pos, beam], "llama_lm")


def save(model, path):
    import openvino as ov

    ov.save_model(model, str(path), compress_to_fp16=False)
    return path


# --------------------------------------------------------------------------- real exports (torch; slow)


def export_bert(path, seq=8):
    """A tiny transformers BertModel (random weights) through ``ov.convert_model``, saved with
    OpenVINO's defaults (FP16-compressed weights): inputs ``[?,?]``."""
    import openvino as ov
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    model = BertModel(cfg).eval()
    ex = {"input_ids": torch.ones(1, seq, dtype=torch.long), "attention_mask": torch.ones(1, seq, dtype=torch.long),
          "token_type_ids": torch.zeros(1, seq, dtype=torch.long)}
    with torch.no_grad():
        ov.save_model(ov.convert_model(model, example_input=ex), str(path))
    return path


def export_stateful_lm(path, vocab=40, hidden=32, heads=2, layers=2):
    """A small PyTorch decoder with explicit past key/values, converted with ``ov.convert_model``
    and made stateful the way optimum-intel does it (``fuse_cache_reorder``: a ``beam_idx`` input
    gathering every past; ``apply_make_stateful_transformation``; ``build_state_initializer``:
    zeros of ``[batch, heads, 0, head_dim]``), saved with OpenVINO's defaults."""
    import openvino as ov
    import torch
    from openvino import opset13
    from openvino._offline_transformations import apply_make_stateful_transformation

    d = hidden // heads

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.pos = torch.nn.Embedding(vocab, hidden), torch.nn.Embedding(256, hidden)
            self.qkv = torch.nn.ModuleList([torch.nn.Linear(hidden, 3 * hidden) for _ in range(layers)])
            self.o = torch.nn.ModuleList([torch.nn.Linear(hidden, hidden) for _ in range(layers)])
            self.head = torch.nn.Linear(hidden, vocab)

        def forward(self, input_ids, attention_mask, position_ids, *past):
            h = self.emb(input_ids) + self.pos(position_ids)
            b, s = input_ids.shape
            bias = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -1e4
            presents = []
            for k in range(layers):
                q, key, value = self.qkv[k](h).view(b, s, 3, heads, d).permute(2, 0, 3, 1, 4)
                key, value = torch.cat([past[2 * k], key], 2), torch.cat([past[2 * k + 1], value], 2)
                presents += [key, value]
                a = torch.nn.functional.scaled_dot_product_attention(q, key, value, attn_mask=bias)
                h = torch.nn.functional.layer_norm(h + self.o[k](a.transpose(1, 2).reshape(b, s, hidden)), (hidden,))
            return (self.head(h), *presents)

    torch.manual_seed(0)
    names = [f"past_key_values.{k}.{w}" for k in range(layers) for w in ("key", "value")]
    inputs = [("input_ids", [-1, -1]), ("attention_mask", [-1, -1]), ("position_ids", [-1, -1])] + \
             [(n, [-1, heads, -1, d]) for n in names]
    ex = (torch.ones(1, 2, dtype=torch.long), torch.ones(1, 5, dtype=torch.long), torch.arange(3, 5)[None],
          *[torch.zeros(1, heads, 3, d) for _ in names])
    with torch.no_grad():
        model = ov.convert_model(Decoder().eval(), example_input=ex, input=[ov.PartialShape(s) for _, s in inputs])
    for inp, (n, _) in zip(model.inputs, inputs):
        inp.get_tensor().set_names({n})
    for out, n in zip(model.outputs, ["logits"] + [n.replace("past_key_values", "present") for n in names]):
        out.get_tensor().set_names({n})
    # optimum-intel's fuse_cache_reorder
    beam = opset13.parameter(name="beam_idx", dtype=ov.Type.i32,
                             shape=ov.PartialShape([model.input("input_ids").get_partial_shape()[0]]))
    beam.output(0).get_tensor().add_names({"beam_idx"})
    model.add_parameters([beam])
    for n in names:
        port = model.input(n)
        consumers = port.get_target_inputs()  # before the Gather becomes one
        gather = opset13.gather(port, beam, opset13.constant(0))
        for consumer in consumers:
            consumer.replace_source_output(gather.output(0))
    model.validate_nodes_and_infer_types()
    apply_make_stateful_transformation(model, {n: n.replace("past_key_values", "present") for n in names})
    # optimum-intel's build_state_initializer
    batch = opset13.gather(opset13.shape_of(model.input("input_ids"), output_type="i64"), opset13.constant([0]),
                           opset13.constant(0))
    for op in model.get_ops():
        if op.get_type_name() == "ReadValue":
            dims = [dim.min_length for dim in op.get_output_partial_shape(0)]
            dims[0] = batch
            dims = [opset13.constant(np.array([x], np.int64)) if isinstance(x, int) else x for x in dims]
            zero = opset13.constant(0.0, dtype=op.get_output_element_type(0))
            op.set_arguments([opset13.broadcast(zero, opset13.concat(dims, axis=0))])
    model.validate_nodes_and_infer_types()
    ov.save_model(model, str(path))
    return path

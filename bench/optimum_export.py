"""Export a tiny random-weight causal LM with optimum-intel itself (run with optimum-intel's Python).

Not imported by hdp: ``bench/legality.py --optimum-python PY`` runs it in that interpreter (a venv
with ``optimum-intel[openvino]``, kept apart from hdp's) to cross-check that hdp's zoo exports have
the layout optimum-intel writes and that their placements behave alike. Nothing is downloaded: the
model is built from a transformers config with random weights (seed 0, the zoo's tiny sizes), saved
with ``save_pretrained`` to a temporary directory and exported from there, stateful::

    PY bench/optimum_export.py llama 2 f32 OUT_DIR     # writes OUT_DIR/openvino_model.xml

Architectures: llama, qwen2, phi3; layers: any; weights: f32 or int4 (optimum's NNCF config, group 16).
"""

from __future__ import annotations

import os
import sys
import tempfile

CONFIGS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=4, pad_token_id=0, bos_token_id=1,
                                                    eos_token_id=2)),
}


def main() -> int:
    if len(sys.argv) != 5 or sys.argv[1] not in CONFIGS or sys.argv[3] not in ("f32", "int4"):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    arch, layers, weights, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from optimum.intel import OVModelForCausalLM, OVWeightQuantizationConfig

    config_class, model_class, extra = CONFIGS[arch]
    config = getattr(transformers, config_class)(vocab_size=512, max_position_embeddings=128, hidden_size=64,
                                                 intermediate_size=128, num_hidden_layers=layers,
                                                 num_attention_heads=4, initializer_range=0.2, **extra)
    torch.manual_seed(0)
    quant = OVWeightQuantizationConfig(bits=4, group_size=16, sym=False, ratio=1.0) if weights == "int4" else None
    with tempfile.TemporaryDirectory() as d:
        getattr(transformers, model_class)(config).eval().save_pretrained(d)
        model = OVModelForCausalLM.from_pretrained(d, export=True, stateful=True, compile=False,
                                                   quantization_config=quant)
        model.save_pretrained(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

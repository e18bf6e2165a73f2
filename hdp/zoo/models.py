"""Benchmark and test models with random weights, exported as OpenVINO IR (``hdp zoo NAME -o MODEL.xml``).

Models come from well-kept definitions: ``keras.applications`` (Keras 3 on its torch backend) for the
CNNs and ``transformers`` configs for the transformers. Weights are random with a fixed seed and
nothing is downloaded. CNNs are built channels-first so the converted graph has no layout transposes
and batch norms fold into the convolutions.

A model is named ``MODEL[:OPTION,...]``, e.g. ``gpt2-tiny``, ``bert-tiny:dynamic``,
``llama-tiny:stateful,int4``. ``MODEL`` is one of :func:`names` (``*-tiny`` models build in seconds,
for tests; the others are real-sized, for benchmarks). Options (see :class:`Spec`):
- shape: ``static`` (default: batch 1 and, for text, a fixed sequence length), ``dynamic`` (batch and
  sequence left dynamic, as ``ov.convert_model`` gives from an example input without ``input=``
  shapes; batch only for image models), ``stateful`` (causal LMs: KV cache in ReadValue/Assign with a
  ``beam_idx`` input, the layout optimum-intel exports);
- weights: ``f32`` (default), ``fp16`` (OpenVINO's default on save: f16 Constant -> Convert),
  ``int8``/``int8-sym`` and ``int4``/``int4-sym`` (NNCF ``compress_weights``: u8/i8/u4/i4 Constant
  -> Convert -> [Subtract zero point] -> Multiply scale [-> Reshape groups] -> Convert);
- ``gN``: group size of int4 weights (default per model).

The same options can be given as keywords: ``export("llama-tiny", out, shape="stateful", weights="int4")``.

A generated model is cached under ``default_cache_dir() / "zoo"``, keyed by the canonical name,
:data:`ZOO_VERSION`, the seed and the versions of the packages that produced it; :func:`export` copies
the cached ``.xml``/``.bin`` to the requested path. :func:`generate` runs greedy decoding on a compiled
causal LM (stateful or not), for checking that a placed LLM generates like the original.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import io
import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from hdp.base.cache import default_cache_dir
from hdp.base.errors import InputError
from hdp.base.fsutil import clean_stale, commit_pair, temp_dir, temp_name
from hdp.zoo.common import SEED
from hdp.zoo.keras_models import build_cnn

ZOO_VERSION = 2  # bump when a model definition or the export recipe changes
BERT_SEQUENCE_LENGTH = 128
_BASE_PACKAGES = ("openvino", "torch")

SHAPES = ("static", "dynamic", "stateful")
WEIGHTS = ("f32", "fp16", "int8", "int8-sym", "int4", "int4-sym")
_NNCF_WEIGHTS = ("int8", "int8-sym", "int4", "int4-sym")


@dataclass(frozen=True)
class ZooModel:
    """One zoo model: how to build it, which shapes it comes in, which packages shape its IR."""

    name: str
    description: str
    packages: tuple[str, ...]  # distributions besides openvino/torch that shape the IR
    build: Callable[[str], Any]  # (shape) -> ov.Model with f32 weights
    shapes: tuple[str, ...] = ("static", "dynamic")
    group_size: int = 128  # default int4 group size (divides every compressed input dimension)
    size: str = "real"  # "tiny" (tests, seconds) or "real" (benchmarks)


@dataclass(frozen=True)
class Spec:
    """A model name with its variant; ``str(spec)`` is the canonical ``MODEL[:OPTION,...]`` name."""

    model: str
    shape: str = "static"
    weights: str = "f32"
    group_size: int | None = None  # int4 only; :func:`parse` fills in the model default

    def __str__(self) -> str:
        options = [o for o in (self.shape, self.weights) if o not in ("static", "f32")]
        if self.weights.startswith("int4") and self.group_size != MODELS[self.model].group_size:
            options.append(f"g{self.group_size}")
        return self.model + (":" + ",".join(options) if options else "")


def _lazy(module: str, function: str, *args: Any) -> Callable[[str], Any]:
    """A builder that imports its (heavy) module only when called."""

    def build(shape: str):
        return getattr(importlib.import_module(module), function)(*args, shape)

    return build


def _hf(kind: str, preset: str) -> Callable[[str], Any]:
    return _lazy("hdp.zoo.hf_models", "build", kind, preset)


def _keras(application: str, size: int, **kwargs: Any) -> Callable[[str], Any]:
    def build(shape: str):
        return build_cnn(application, size, shape, **kwargs)

    return build


_TRANSFORMERS = ("transformers",)
_KERAS = ("keras",)
_ALL_SHAPES = SHAPES

MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        # CNNs (keras.applications, channels-first)
        ZooModel("inception_v3", "keras.applications.InceptionV3, 1x3x299x299",
                 _KERAS, _keras("InceptionV3", 299)),
        ZooModel("resnet50", "keras.applications.ResNet50, 1x3x224x224", _KERAS, _keras("ResNet50", 224)),
        ZooModel("mobilenet_v2", "keras.applications.MobileNetV2, 1x3x224x224",
                 _KERAS, _keras("MobileNetV2", 224)),
        ZooModel("densenet121", "keras.applications.DenseNet121, 1x3x224x224",
                 _KERAS, _keras("DenseNet121", 224)),
        ZooModel("densenet201", "keras.applications.DenseNet201 recipe (blocks 6-12-48-32), 1x3x224x224",
                 _KERAS, _keras("DenseNet", 224, blocks=(6, 12, 48, 32))),
        ZooModel("mobilenet_v2-tiny", "keras.applications.MobileNetV2 alpha 0.35, 10 classes, 1x3x32x32",
                 _KERAS, _keras("MobileNetV2", 32, alpha=0.35, classes=10), group_size=16, size="tiny"),
        ZooModel("densenet-tiny", "keras DenseNet, blocks 1-2-2-1, 10 classes, 1x3x32x32",
                 _KERAS, _keras("DenseNet", 32, blocks=(1, 2, 2, 1), classes=10), group_size=16, size="tiny"),
        # transformers
        ZooModel("bert_base", f"transformers BertModel (bert-base, eager attention), sequence "
                 f"{BERT_SEQUENCE_LENGTH}", _TRANSFORMERS, _hf("bert", "base-eager")),
        ZooModel("bert_large", f"transformers BertModel (bert-large: 24 layers, hidden 1024, eager attention), "
                 f"sequence {BERT_SEQUENCE_LENGTH}", _TRANSFORMERS, _hf("bert", "large-eager")),
        ZooModel("bert", f"transformers BertModel (bert-base, SDPA attention), sequence {BERT_SEQUENCE_LENGTH}",
                 _TRANSFORMERS, _hf("bert", "base")),
        ZooModel("bert-tiny", "transformers BertModel, 2 layers, hidden 64, vocab 512, sequence 16",
                 _TRANSFORMERS, _hf("bert", "tiny"), group_size=16, size="tiny"),
        ZooModel("gpt2", "transformers GPT2LMHeadModel (GPT-2 small, 124M), sequence 128",
                 _TRANSFORMERS, _hf("gpt2", "small"), shapes=_ALL_SHAPES),
        ZooModel("gpt2-tiny", "transformers GPT2LMHeadModel, 2 layers, hidden 64, vocab 512, sequence 16",
                 _TRANSFORMERS, _hf("gpt2", "tiny"), shapes=_ALL_SHAPES, group_size=16, size="tiny"),
        ZooModel("llama", "transformers LlamaForCausalLM shaped like SmolLM-135M, sequence 128",
                 _TRANSFORMERS, _hf("llama", "smollm-135m"), shapes=_ALL_SHAPES, group_size=64),
        ZooModel("llama-32l", "transformers LlamaForCausalLM shaped like Llama-2-7B at 1/8 width: 32 layers, "
                 "hidden 512, 8 heads, vocab 32000, sequence 128", _TRANSFORMERS, _hf("llama", "llama2-32l"),
                 shapes=_ALL_SHAPES, group_size=64),
        ZooModel("llama-24l", "transformers LlamaForCausalLM shaped like SmolLM-135M with 24 layers, sequence 128",
                 _TRANSFORMERS, _hf("llama", "24l"), shapes=_ALL_SHAPES, group_size=64),
        ZooModel("llama-tiny", "transformers LlamaForCausalLM, 2 layers, hidden 64, GQA 4/2 heads, "
                 "vocab 512, sequence 16", _TRANSFORMERS, _hf("llama", "tiny"), shapes=_ALL_SHAPES,
                 group_size=16, size="tiny"),
        ZooModel("llama-tiny-8l", "transformers LlamaForCausalLM, 8 layers, hidden 64, GQA 4/2 heads, "
                 "vocab 512, sequence 16", _TRANSFORMERS, _hf("llama", "tiny-8l"), shapes=_ALL_SHAPES,
                 group_size=16, size="tiny"),
        ZooModel("phi3-tiny", "transformers Phi3ForCausalLM (fused qkv and gate/up projections), 2 layers, "
                 "hidden 64, 4 heads, vocab 512, sequence 16", _TRANSFORMERS, _hf("phi3", "tiny"),
                 shapes=_ALL_SHAPES, group_size=16, size="tiny"),
        ZooModel("phi3-tiny-8l", "transformers Phi3ForCausalLM (fused qkv and gate/up projections), 8 layers, "
                 "hidden 64, 4 heads, vocab 512, sequence 16", _TRANSFORMERS, _hf("phi3", "tiny-8l"),
                 shapes=_ALL_SHAPES, group_size=16, size="tiny"),
        ZooModel("qwen2", "transformers Qwen2ForCausalLM shaped like Qwen2.5-0.5B, sequence 128",
                 _TRANSFORMERS, _hf("qwen2", "qwen2.5-0.5b"), shapes=_ALL_SHAPES),
        ZooModel("qwen2-tiny", "transformers Qwen2ForCausalLM, 2 layers, hidden 64, GQA 4/2 heads, "
                 "vocab 512, sequence 16", _TRANSFORMERS, _hf("qwen2", "tiny"), shapes=_ALL_SHAPES,
                 group_size=16, size="tiny"),
        ZooModel("qwen2-tiny-8l", "transformers Qwen2ForCausalLM, 8 layers, hidden 64, GQA 4/2 heads, "
                 "vocab 512, sequence 16", _TRANSFORMERS, _hf("qwen2", "tiny-8l"), shapes=_ALL_SHAPES,
                 group_size=16, size="tiny"),
        ZooModel("qwen2-moe", "transformers Qwen2MoeForCausalLM with Qwen1.5-MoE-A2.7B's routing (60 experts, "
                 "top 4, a shared expert) at 1/8 width: 12 layers, hidden 256, vocab 32000, sequence 128",
                 _TRANSFORMERS, _hf("qwen2_moe", "a2.7b-small"), shapes=_ALL_SHAPES, group_size=16),
        ZooModel("qwen2-moe-tiny", "transformers Qwen2MoeForCausalLM, 2 layers, hidden 64, 8 experts (top 2) "
                 "and a shared expert, vocab 512, sequence 16", _TRANSFORMERS, _hf("qwen2_moe", "tiny"),
                 shapes=_ALL_SHAPES, group_size=16, size="tiny"),
        ZooModel("vit", "transformers ViTForImageClassification (ViT-B/16), 1x3x224x224",
                 _TRANSFORMERS, _hf("vit", "base")),
        ZooModel("vit-tiny", "transformers ViTForImageClassification, 2 layers, hidden 64, patch 8, "
                 "10 classes, 1x3x32x32", _TRANSFORMERS, _hf("vit", "tiny"), group_size=16, size="tiny"),
    )
}


def names() -> list[str]:
    """Names of the models :func:`export` knows, sorted (each also takes the variant options)."""
    return sorted(MODELS)


def catalog() -> list[dict[str, Any]]:
    """One row per model: name, size class, shapes and weight formats it comes in, description."""
    return [
        {"name": m.name, "size": m.size, "shapes": list(m.shapes), "weights": list(WEIGHTS),
         "int4_group_size": m.group_size, "description": m.description}
        for m in (MODELS[n] for n in names())
    ]


def parse(name: str, *, shape: str | None = None, weights: str | None = None,
          group_size: int | None = None) -> Spec:
    """Parse ``MODEL[:OPTION,...]`` (keywords override options) into a :class:`Spec` with defaults filled.

    Raises InputError naming the known models or options.
    """
    if isinstance(name, Spec):
        name = str(name)
    model_name, _, options = str(name).partition(":")
    model = _lookup(model_name)
    found: dict[str, Any] = {}
    for option in filter(None, (o.strip() for o in options.split(","))):
        if option in SHAPES:
            key, value = "shape", option
        elif option in WEIGHTS:
            key, value = "weights", option
        elif re.fullmatch(r"g[1-9][0-9]*", option):
            key, value = "group_size", int(option[1:])
        else:
            raise InputError(f"zoo model '{name}': unknown option '{option}'; options: "
                             f"{', '.join(SHAPES)}; {', '.join(WEIGHTS)}; gN (int4 group size)")
        if key in found and found[key] != value:
            raise InputError(f"zoo model '{name}': options '{found[key]}' and '{value}' conflict")
        found[key] = value
    for key, value in (("shape", shape), ("weights", weights), ("group_size", group_size)):
        if value is not None:
            found[key] = value
    spec_shape = found.get("shape", "static")
    spec_weights = found.get("weights", "f32")
    if spec_shape not in SHAPES:
        raise InputError(f"zoo model '{name}': unknown shape '{spec_shape}'; known: {', '.join(SHAPES)}")
    if spec_weights not in WEIGHTS:
        raise InputError(f"zoo model '{name}': unknown weights '{spec_weights}'; known: {', '.join(WEIGHTS)}")
    if spec_shape not in model.shapes:
        raise InputError(f"zoo model '{model.name}' comes in shapes {', '.join(model.shapes)}, "
                         f"not '{spec_shape}'")
    spec_group = found.get("group_size")
    if spec_weights.startswith("int4"):
        spec_group = model.group_size if spec_group is None else int(spec_group)
        if spec_group <= 0:
            raise InputError(f"zoo model '{name}': the int4 group size must be positive")
    elif spec_group is not None:
        raise InputError(f"zoo model '{name}': a group size (g{spec_group}) applies to int4 weights only")
    return Spec(model.name, spec_shape, spec_weights, spec_group)


def export(name: str, output: str | os.PathLike, *, cache_root: str | os.PathLike | None = None,
           use_cache: bool = True, **variant: Any) -> Path:
    """Write zoo model ``name`` (``MODEL[:OPTION,...]``) to ``output`` (an ``.xml``; weights go to ``.bin``).

    ``variant`` keywords (``shape``, ``weights``, ``group_size``) override the name's options. Generates
    the model on first use and reuses the cached IR afterwards, under ``<cache_root>/zoo`` (default: the
    hdp cache); ``use_cache=False`` generates it in a temporary directory and keeps nothing. Both files
    are replaced atomically, the ``.bin`` first, so a reader never pairs a new ``.xml`` with old
    weights. Raises InputError for an unknown name or option, a non-``.xml`` output or a missing
    optional dependency.
    """
    spec = parse(name, **variant)
    out = Path(output)
    if out.suffix.lower() != ".xml":
        raise InputError(f"{out}: the output of 'hdp zoo' must be an OpenVINO .xml path")
    if not use_cache:
        with tempfile.TemporaryDirectory(prefix="hdp-zoo-") as d:
            _copy_ir(cached(spec, d), out)
        return out
    root = None if cache_root is None else Path(cache_root) / "zoo"
    try:
        _copy_ir(cached(spec, root), out)
    except FileNotFoundError:  # pruned by another process between finding and copying it
        _copy_ir(cached(spec, root), out)
    return out


def cached(name: str | Spec, cache_dir: str | os.PathLike | None = None, **variant: Any) -> Path:
    """Path of the cached ``.xml`` of zoo model ``name``, generating it if it is not cached yet."""
    spec = parse(name, **variant)
    root = Path(cache_dir) if cache_dir is not None else _default_root()
    entry = root / f"{re.sub(r'[:,]', '_', str(spec))}-{cache_key(spec)}"
    xml = entry / "model.xml"
    if xml.is_file() and xml.with_suffix(".bin").is_file():
        try:
            os.utime(xml)  # recently used: `hdp cache prune` removes the least recently used first
        except OSError:
            pass
        return xml
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(root)  # generations killed half-way
    tmp = root / temp_name(entry.name)
    tmp.mkdir(mode=0o700)
    try:
        ov = _import_openvino()
        # build() already applied the weight format; f32 here keeps fp16/int weights as built
        ov.save_model(build(spec), str(tmp / "model.xml"), compress_to_fp16=False)
        if entry.exists():  # an incomplete entry (e.g. a deleted .bin)
            shutil.rmtree(entry, ignore_errors=True)
        try:
            os.replace(tmp, entry)
        except OSError:
            if not xml.is_file():  # not "another process finished first"
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return xml


def cache_key(name: str | Spec, **variant: Any) -> str:
    """Hex key of a zoo model and variant: changes with ZOO_VERSION, the seed and the producing packages."""
    spec = parse(name, **variant)
    versions = {dist: _version(dist, str(spec)) for dist in _BASE_PACKAGES + _packages(spec)}
    blob = json.dumps({"name": str(spec), "zoo": ZOO_VERSION, "seed": SEED, "versions": versions},
                      sort_keys=True)
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def build(name: str | Spec, **variant: Any):
    """Generate a zoo model as an in-memory ``ov.Model`` (no cache), weights already in their format."""
    spec = parse(name, **variant)
    model = MODELS[spec.model]
    for dist in _packages(spec):
        _version(dist, str(spec))
    _import_openvino()
    with _offline():
        ov_model = model.build(spec.shape)
    if spec.shape == "static":
        _fold_shape_computations(ov_model)
    _compress_weights(ov_model, spec)
    ov_model.set_rt_info(str(spec), ["hdp_zoo", "name"])
    ov_model.set_rt_info(spec.model, ["hdp_zoo", "model"])
    ov_model.set_rt_info(spec.shape, ["hdp_zoo", "shape"])
    ov_model.set_rt_info(spec.weights, ["hdp_zoo", "weights"])
    ov_model.set_rt_info(str(ZOO_VERSION), ["hdp_zoo", "version"])
    ov_model.set_rt_info(str(SEED), ["hdp_zoo", "seed"])
    ov_model.set_rt_info(model.description, ["hdp_zoo", "source"])
    return ov_model


# --- greedy generation on a compiled causal LM -------------------------------------------------------


@dataclass(frozen=True)
class Generation:
    """What :func:`generate` produced: ``logits[i]`` is ``[batch, vocab]`` (step 0 = the prefill's last
    position), ``tokens[:, i]`` its argmax; the prompt is not included."""

    tokens: Any  # np.ndarray [batch, steps + 1], int64
    logits: list  # steps + 1 arrays [batch, vocab], float32


def generate(compiled, input_ids, steps: int = 4, follow=None, decode=None) -> Generation:
    """Greedy decoding: a prefill of ``input_ids`` ([batch, prompt], int) then ``steps`` single-token steps.

    ``compiled`` is an ``ov.CompiledModel`` of a causal LM from the zoo or optimum-intel (inputs
    ``input_ids``, ``attention_mask``, optionally ``position_ids`` and ``beam_idx``; output ``logits``),
    compiled for any device, HETERO included. A stateful model carries its KV cache in its state: a new
    infer request, ``reset_state()`` first, ``beam_idx = arange(batch)``, then one token per step. A model
    without state recomputes the whole sequence each step (a reference to compare a stateful one with).
    Compile with ``KV_CACHE_PRECISION: f32`` for exact comparisons (the CPU plugin's default u8 KV cache
    moves the logits of a tiny Llama by ~0.03).

    ``follow`` (``[batch, >= steps]`` ints, e.g. another run's ``tokens``) feeds those tokens instead of
    this model's own argmax, so two compiles can be compared step by step on one sequence even where
    reduced precision flips a near-tie (greedy decoding diverges from there on).

    ``decode``, a second compiled model of the same stateful LM (its decode phase placed on its own,
    ``hdp compile --phases``), runs the steps while ``compiled`` runs the prefill: after the prefill
    every state variable's tensor (the KV cache) is set on ``decode``'s infer request, by variable name.
    """

    import numpy as np  # lazy: `hdp zoo` and the zoo's catalogue import nothing heavy (tests/test_zoo.py)

    ids = np.asarray(input_ids, dtype=np.int64)
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise InputError(f"generate: input_ids must be [batch, prompt] with a prompt; got shape {ids.shape}")
    batch = ids.shape[0]
    inputs = {n for port in compiled.inputs for n in port.get_names()}
    if "input_ids" not in inputs:
        raise InputError(f"generate: the model has no 'input_ids' input (inputs: {sorted(inputs)})")
    output = next((p for p in compiled.outputs if "logits" in p.get_names()), compiled.outputs[0])
    request = compiled.create_infer_request()
    stateful = bool(request.query_state())
    request.reset_state()
    stepper = request
    if decode is not None:
        if not stateful:
            raise InputError("generate: decode= hands the prefill's KV cache over; the model has no state")
        stepper = decode.create_infer_request()
        if {s.name for s in stepper.query_state()} != {s.name for s in request.query_state()}:
            raise InputError("generate: decode= must be the same stateful model (its state variables differ)")
        if {n for port in decode.inputs for n in port.get_names()} != inputs:
            raise InputError("generate: decode= must be the same model (its inputs differ)")
    if follow is not None:
        follow = np.asarray(follow, dtype=np.int64)
        if follow.ndim != 2 or follow.shape[0] != batch or follow.shape[1] < steps:
            raise InputError(f"generate: follow must be [batch={batch}, >= {steps}] tokens; got shape {follow.shape}")

    outputs = {id(request): output}
    if stepper is not request:
        outputs[id(stepper)] = next((p for p in decode.outputs if "logits" in p.get_names()), decode.outputs[0])

    def run(step_ids, past: int, request=request):
        total = past + step_ids.shape[1]
        feed = {"input_ids": step_ids, "attention_mask": np.ones((batch, total), np.int64)}
        if "position_ids" in inputs:
            feed["position_ids"] = np.broadcast_to(np.arange(past, total, dtype=np.int64),
                                                   (batch, step_ids.shape[1])).copy()
        if "beam_idx" in inputs:
            feed["beam_idx"] = np.arange(batch, dtype=np.int32)
        feed = {k: v for k, v in feed.items() if k in inputs}
        return np.array(request.infer(feed)[outputs[id(request)]][:, -1, :], dtype=np.float32)

    sequence = ids
    logits = [run(ids, 0)]
    if stepper is not request:  # the KV cache the prefill left, handed to decode's request
        held = {s.name: s.state for s in request.query_state()}
        for s in stepper.query_state():
            s.state = held[s.name]
    for i in range(steps):
        token = (logits[-1].argmax(-1) if follow is None else follow[:, i]).astype(np.int64)[:, None]
        if stateful:
            logits.append(run(token, sequence.shape[1], stepper))
        else:
            logits.append(run(np.concatenate([sequence, token], axis=1), 0))
        sequence = np.concatenate([sequence, token], axis=1)
    tokens = np.stack([step.argmax(-1) for step in logits], axis=1).astype(np.int64)
    return Generation(tokens=tokens, logits=logits)


# --- internals ---------------------------------------------------------------------------------------


def _lookup(name: str) -> ZooModel:
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(
            f"unknown zoo model '{name}'; known: {', '.join(names())} "
            f"(each takes options, e.g. '{name if name in MODELS else 'gpt2-tiny'}:dynamic,int4')"
        ) from None


def _packages(spec: Spec) -> tuple[str, ...]:
    extra = ("nncf",) if spec.weights in _NNCF_WEIGHTS else ()
    return MODELS[spec.model].packages + extra


def _default_root() -> Path:
    return default_cache_dir() / "zoo"


def _version(dist: str, name: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        raise InputError(
            f"zoo model '{name}' needs the '{dist}' package: pip install 'hdp[zoo]'"
        ) from None


@contextlib.contextmanager
def _offline() -> Iterator[None]:
    """Forbid Hugging Face hub downloads while building (the models are built from configs only).

    huggingface_hub reads these variables when first imported, so a first import in here stays offline.
    """
    keys = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: "1" for k in keys})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _import_openvino():
    """openvino, imported after :mod:`hdp` has disabled its converter's telemetry."""
    import openvino as ov

    return ov


def _compress_weights(ov_model, spec: Spec) -> None:
    """Put the weights in ``spec.weights``'s format, in place, as OpenVINO's save or NNCF would.

    fp16: OpenVINO's own save-time transformation (``compress_to_fp16=True``): f16 Constant -> Convert.
    int8/int4: ``nncf.compress_weights`` data-free, NNCF's defaults otherwise (int8 per output channel;
    int4 grouped with ratio 1.0, the embedding and the last MatMul kept in int8 asym as NNCF does).
    """
    if spec.weights == "f32":
        return
    if spec.weights == "fp16":
        from openvino._offline_transformations import compress_model_transformation

        compress_model_transformation(ov_model)
        return

    try:
        import nncf
    except ImportError as e:  # installed (metadata found) but broken
        raise InputError(f"zoo model '{spec}': cannot import nncf ({e}): pip install 'hdp[zoo]'") from None
    nncf.set_log_level(logging.ERROR)
    mode = {"int8": "INT8_ASYM", "int8-sym": "INT8_SYM", "int4": "INT4_ASYM", "int4-sym": "INT4_SYM"}
    kwargs: dict[str, Any] = {"mode": getattr(nncf.CompressWeightsMode, mode[spec.weights])}
    if spec.weights.startswith("int4"):
        kwargs.update(group_size=spec.group_size, ratio=1.0)
    with _quiet():
        compressed = nncf.compress_weights(ov_model, **kwargs)
    if compressed is not ov_model:  # NNCF transforms in place today; keep working if it ever copies
        raise RuntimeError("nncf.compress_weights returned a new model; update hdp.zoo.models._compress_weights")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence NNCF's progress bar (printed to stdout by rich)."""

    with redirect_stdout(io.StringIO()):
        yield


def _fold_shape_computations(ov_model) -> None:
    """Fold the shape arithmetic the converters keep for reshapability; static shapes only.

    The PyTorch frontend marks some ShapeOf nodes with a DisableConstantFolding rt_info entry.
    """
    from openvino.passes import ConstantFolding, Manager

    for op in ov_model.get_ordered_ops():
        rt = op.get_rt_info()
        for key in [k for k in rt.keys() if k.startswith("DisableConstantFolding")]:
            del rt[key]
    manager = Manager()
    manager.register_pass(ConstantFolding())
    manager.run_passes(ov_model)


def _copy_ir(src_xml: Path, out_xml: Path) -> None:
    """Copy a cached ``.xml``/``.bin`` pair to ``out_xml`` (see :func:`hdp.base.fsutil.commit_pair`)."""
    with temp_dir(out_xml.parent, out_xml.name) as tmp:
        t = tmp / "model.xml"
        if src_xml.with_suffix(".bin").exists():
            shutil.copyfile(src_xml.with_suffix(".bin"), t.with_suffix(".bin"))
        shutil.copyfile(src_xml, t)
        commit_pair(t, out_xml)

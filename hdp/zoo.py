"""Benchmark models with random weights, exported as OpenVINO IR (``hdp zoo NAME -o MODEL.xml``).

Models come from well-kept definitions: ``keras.applications`` (Keras 3 on its torch backend) for the
CNNs and ``transformers`` for BERT. Weights are random with a fixed seed and nothing is downloaded.
Shapes are static with batch 1. CNNs are built channels-first so the converted graph has no layout
transposes and batch norms fold into the convolutions.

A generated model is cached under ``default_cache_dir() / "zoo"``, keyed by the model name,
:data:`ZOO_VERSION`, the seed and the versions of the packages that produced it; :func:`export` copies
the cached ``.xml``/``.bin`` to the requested path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from hdp.errors import InputError
from hdp.fsutil import clean_stale, commit_pair, temp_dir, temp_name

ZOO_VERSION = 1  # bump when a model definition or the export recipe changes
SEED = 0
BERT_SEQUENCE_LENGTH = 128
_BASE_PACKAGES = ("openvino", "torch")


@dataclass(frozen=True)
class ZooModel:
    """One benchmark model: how to build it and which packages its IR depends on."""

    name: str
    description: str
    packages: tuple[str, ...]  # distributions besides openvino/torch that shape the IR
    build: Callable[[], Any]  # () -> ov.Model


def _keras_cnn(application: str, size: int) -> Callable[[], Any]:
    return lambda: _build_keras_cnn(application, size)


MODELS: dict[str, ZooModel] = {
    m.name: m
    for m in (
        ZooModel("inception_v3", "keras.applications.InceptionV3, 1x3x299x299",
                 ("keras",), _keras_cnn("InceptionV3", 299)),
        ZooModel("resnet50", "keras.applications.ResNet50, 1x3x224x224",
                 ("keras",), _keras_cnn("ResNet50", 224)),
        ZooModel("mobilenet_v2", "keras.applications.MobileNetV2, 1x3x224x224",
                 ("keras",), _keras_cnn("MobileNetV2", 224)),
        ZooModel("bert_base", f"transformers BertModel (bert-base), sequence {BERT_SEQUENCE_LENGTH}",
                 ("transformers",), lambda: _build_bert_base()),
    )
}


def names() -> list[str]:
    """Names of the models :func:`export` knows, sorted."""
    return sorted(MODELS)


def export(name: str, output: str | os.PathLike) -> Path:
    """Write zoo model ``name`` to ``output`` (an ``.xml``; the weights go next to it as ``.bin``).

    Generates the model on first use (tens of seconds) and reuses the cached IR afterwards. Both files
    are replaced atomically, the ``.bin`` first, so a reader never pairs a new ``.xml`` with old weights.
    Raises InputError for an unknown name, a non-``.xml`` output or a missing optional dependency.
    """
    model = _lookup(name)
    out = Path(output)
    if out.suffix.lower() != ".xml":
        raise InputError(f"{out}: the output of 'hdp zoo' must be an OpenVINO .xml path")
    xml = cached(model.name)
    _copy_ir(xml, out)
    return out


def cached(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Path of the cached ``.xml`` of zoo model ``name``, generating it if it is not cached yet."""
    model = _lookup(name)
    root = Path(cache_dir) if cache_dir is not None else _default_root()
    entry = root / f"{model.name}-{cache_key(model.name)}"
    xml = entry / "model.xml"
    if xml.is_file() and xml.with_suffix(".bin").is_file():
        return xml
    root.mkdir(parents=True, exist_ok=True)
    clean_stale(root)  # generations killed half-way
    tmp = root / temp_name(entry.name)
    tmp.mkdir(mode=0o700)
    try:
        ov = _import_openvino()
        ov.save_model(build(model.name), str(tmp / "model.xml"), compress_to_fp16=False)
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


def cache_key(name: str) -> str:
    """Hex key of zoo model ``name``: changes with ZOO_VERSION, the seed and the producing packages."""
    model = _lookup(name)
    versions = {dist: _version(dist, model.name) for dist in _BASE_PACKAGES + model.packages}
    blob = json.dumps({"name": model.name, "zoo": ZOO_VERSION, "seed": SEED, "versions": versions},
                      sort_keys=True)
    return hashlib.blake2b(blob.encode(), digest_size=8).hexdigest()


def build(name: str):
    """Generate zoo model ``name`` as an in-memory ``ov.Model`` (no cache). Slow: tens of seconds."""
    model = _lookup(name)
    for dist in model.packages:
        _version(dist, model.name)
    _import_openvino()
    with _offline():
        ov_model = model.build()
    _fold_shape_computations(ov_model)
    ov_model.set_rt_info(model.name, ["hdp_zoo", "name"])
    ov_model.set_rt_info(str(ZOO_VERSION), ["hdp_zoo", "version"])
    ov_model.set_rt_info(str(SEED), ["hdp_zoo", "seed"])
    ov_model.set_rt_info(model.description, ["hdp_zoo", "source"])
    return ov_model


def _lookup(name: str) -> ZooModel:
    try:
        return MODELS[name]
    except KeyError:
        raise InputError(f"unknown zoo model '{name}'; known: {', '.join(names())}") from None


def _default_root() -> Path:
    from hdp.passes.cache import default_cache_dir

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


def _import_keras():
    if "keras" not in sys.modules:
        # Keras picks its backend once, at import; tensorflow is not a dependency of hdp.
        saved = os.environ.get("KERAS_BACKEND")
        os.environ["KERAS_BACKEND"] = "torch"
        try:
            import keras  # noqa: F401
        except ImportError as e:
            raise InputError(f"cannot import keras ({e}): pip install 'hdp[zoo]'") from None
        finally:
            if saved is None:
                os.environ.pop("KERAS_BACKEND", None)
            else:
                os.environ["KERAS_BACKEND"] = saved
    import keras

    if keras.backend.backend() != "torch":
        raise InputError(
            f"keras is already loaded with the '{keras.backend.backend()}' backend; "
            "the zoo needs KERAS_BACKEND=torch"
        )
    return keras


def _build_keras_cnn(application: str, size: int):
    keras = _import_keras()
    import openvino as ov
    import torch

    shape = (1, 3, size, size)
    previous = keras.config.image_data_format()
    # Layers read the data format when built; channels-first avoids a transpose pair around every conv.
    keras.config.set_image_data_format("channels_first")
    try:
        keras.utils.set_random_seed(SEED)
        net = getattr(keras.applications, application)(weights=None, input_shape=shape[1:])
        _calibrate_batch_norms(keras, net, shape)
        net.eval()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(net, (torch.zeros(shape),), check_trace=False)
            ov_model = ov.convert_model(traced, input=[(list(shape), ov.Type.f32)])
    finally:
        keras.config.set_image_data_format(previous)
    _name_port(ov_model.inputs[0], "image")
    _name_port(ov_model.outputs[0], "predictions")
    return ov_model


def _calibrate_batch_norms(keras, net, shape: tuple[int, ...]) -> None:
    """Set every batch norm's moving statistics from one random batch, as a trained net would have.

    With the initial statistics (mean 0, variance 1) activations shrink layer after layer until the
    output no longer depends on the input (MobileNetV2 collapses to a constant), which would hide
    numerical differences between placements. In training mode each batch norm normalises with the
    statistics of its own input, so one pass with momentum 0 calibrates all of them in order.
    """
    import torch

    norms = [layer for layer in net.layers if isinstance(layer, keras.layers.BatchNormalization)]
    momenta = [layer.momentum for layer in norms]
    generator = torch.Generator().manual_seed(SEED)
    batch = torch.randn((2,) + tuple(shape[1:]), generator=generator)
    try:
        for layer in norms:
            layer.momentum = 0.0
        with torch.no_grad():
            net(batch, training=True)
    finally:
        for layer, momentum in zip(norms, momenta):
            layer.momentum = momentum


def _build_bert_base():
    try:
        import transformers
        from transformers import BertConfig, BertModel
    except ImportError as e:
        raise InputError(f"cannot import transformers ({e}): pip install 'hdp[zoo]'") from None
    import openvino as ov
    import torch

    config = BertConfig(
        vocab_size=30522,
        hidden_size=768,
        num_hidden_layers=12,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=512,
        type_vocab_size=2,
        # explicit MatMul/Softmax attention: plain ops every OpenVINO plugin supports
        attn_implementation="eager",
    )
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(SEED)
            net = BertModel(config).eval()
        inputs = ("input_ids", "attention_mask", "token_type_ids")
        shape = [1, BERT_SEQUENCE_LENGTH]
        example = {k: torch.ones(shape, dtype=torch.int64) for k in inputs}
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ov_model = ov.convert_model(net, example_input=example,
                                        input=[(k, shape, ov.Type.i64) for k in inputs])
    finally:
        transformers.logging.set_verbosity(verbosity)
    for port in ov_model.outputs:  # drop the tracer's numeric aliases next to last_hidden_state
        named = {n for n in port.get_names() if not n.isdigit()}
        if named:
            port.get_tensor().set_names(named)
    return ov_model


def _name_port(port, name: str) -> None:
    port.get_tensor().set_names({name})
    node = port.get_node()
    if node.get_type_name() == "Parameter":
        node.set_friendly_name(name)


def _fold_shape_computations(ov_model) -> None:
    """Fold the shape arithmetic the converters keep for reshapability; our shapes are static.

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
    """Copy a cached ``.xml``/``.bin`` pair to ``out_xml`` (see :func:`hdp.fsutil.commit_pair`)."""
    with temp_dir(out_xml.parent, out_xml.name) as tmp:
        t = tmp / "model.xml"
        if src_xml.with_suffix(".bin").exists():
            shutil.copyfile(src_xml.with_suffix(".bin"), t.with_suffix(".bin"))
        shutil.copyfile(src_xml, t)
        commit_pair(t, out_xml)

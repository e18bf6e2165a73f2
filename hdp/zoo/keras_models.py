"""Zoo CNNs from ``keras.applications`` (Keras 3 on its torch backend), channels-first, random weights.

Imported lazily by :mod:`hdp.zoo.models` (it imports keras and torch).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from hdp.base.errors import InputError
from hdp.zoo.common import SEED, name_port


def import_keras():
    """keras on its torch backend (tensorflow is not a dependency of hdp)."""
    if "keras" not in sys.modules:
        # Keras picks its backend once, at import.
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


def build_cnn(application: str, size: int, shape: str, **kwargs: Any):
    """``keras.applications.<application>`` at ``size``x``size``; batch 1 (static) or dynamic.

    ``application="DenseNet"`` takes ``blocks`` (the DenseNet-121 recipe with other block counts).
    """
    keras = import_keras()
    import openvino as ov
    import torch

    static = (1, 3, size, size)
    previous = keras.config.image_data_format()
    # Layers read the data format when built; channels-first avoids a transpose pair around every conv.
    keras.config.set_image_data_format("channels_first")
    try:
        keras.utils.set_random_seed(SEED)
        net = _application(keras, application)(weights=None, input_shape=static[1:], **kwargs)
        _calibrate_batch_norms(keras, net, static)
        net.eval()
        # trace with batch 2 for a dynamic batch, so no size-1 broadcast is baked into the trace
        example = torch.zeros((2,) + static[1:] if shape == "dynamic" else static)
        ov_shape = [-1, *static[1:]] if shape == "dynamic" else list(static)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(net, (example,), check_trace=False)
            ov_model = ov.convert_model(traced, input=[(ov_shape, ov.Type.f32)])
    finally:
        keras.config.set_image_data_format(previous)
    name_port(ov_model.inputs[0], "image")
    name_port(ov_model.outputs[0], "predictions")
    return ov_model


def _application(keras, application: str):
    if application == "DenseNet121":
        return lambda **kw: _densenet(keras, (6, 12, 24, 16), **kw)
    if application == "DenseNet":
        return lambda blocks, **kw: _densenet(keras, blocks, **kw)
    return getattr(keras.applications, application)


def _densenet(keras, blocks, *, weights=None, input_shape, classes: int = 1000):
    """keras.applications' DenseNet, channels-first (``blocks`` (6, 12, 24, 16) is DenseNet-121).

    ``keras.applications.DenseNet121`` refuses the channels-first format at its entry although its
    building blocks support it, so this assembles the same stem and head around keras' own
    ``dense_block``/``transition_block``, with keras' layer names and hyperparameters.
    """
    try:
        from keras.src.applications.densenet import dense_block, transition_block
    except ImportError as e:
        raise InputError(f"this keras has no keras.src.applications.densenet blocks ({e})") from None
    assert weights is None
    layers = keras.layers
    inputs = layers.Input(shape=input_shape)
    x = layers.ZeroPadding2D(padding=((3, 3), (3, 3)))(inputs)
    x = layers.Conv2D(64, 7, strides=2, use_bias=False, name="conv1_conv")(x)
    x = layers.BatchNormalization(axis=1, epsilon=1.001e-5, name="conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(padding=((1, 1), (1, 1)))(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1")(x)
    for stage, count in enumerate(blocks):
        x = dense_block(x, count, name=f"conv{stage + 2}")
        if stage < len(blocks) - 1:
            x = transition_block(x, 0.5, name=f"pool{stage + 2}")
    x = layers.BatchNormalization(axis=1, epsilon=1.001e-5, name="bn")(x)
    x = layers.Activation("relu", name="relu")(x)
    x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    x = layers.Dense(classes, activation="softmax", name="predictions")(x)
    return keras.Model(inputs, x, name=f"densenet{'-'.join(map(str, blocks))}")


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
    # Small images end in 1x1 feature maps: 2 samples would give 2 values per channel, and a variance
    # so small that other inputs saturate the softmax. 32 samples keep the statistics meaningful.
    samples = 2 if shape[-1] >= 224 else 32
    batch = torch.randn((samples,) + tuple(shape[1:]), generator=generator)
    try:
        for layer in norms:
            layer.momentum = 0.0
        with torch.no_grad():
            net(batch, training=True)
    finally:
        for layer, momentum in zip(norms, momenta):
            layer.momentum = momentum

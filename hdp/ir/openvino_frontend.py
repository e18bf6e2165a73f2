"""Frontend: an OpenVINO model (``model.xml`` + ``model.bin``, or ``.onnx``) lowered into an hdp Module.

:func:`lower` reads the file (:mod:`hdp.ir.openvino_read`), fixes the static shapes it is costed at
(:mod:`hdp.ir.specialise`: the model may be dynamic or stateful; the Module records the plan in
``meta["specialisation"]`` so every later reader rebuilds the same model) and lowers that
specialisation op by op, with each op's FLOPs estimated from its shapes. Ops are identified by
their topological position, checked structurally (:mod:`hdp.ir.op_identity`). The functions at
the end bring a Module back to its source model: checked unchanged, re-read, re-specialised.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from hdp.base.errors import InputError, StaleInput
from hdp.ir.build import graph_from_edges
from hdp.ir.op_identity import check_structure, op_structure, unique_names
from hdp.ir.openvino_legalize import fragile_ops, live_shapes, state_ties
from hdp.ir.openvino_read import file_digest, read_model
from hdp.ir.shapes import ShapeRequest, as_request
from hdp.ir.size_limits import check_input_sizes, check_tensor_sizes
from hdp.ir.specialise import Specialisation, defaulted, plan_specialisation, refine_for_devices, specialise
from hdp.ir.types import Module, Op

# --------------------------------------------------------------------------- FLOPs

_ELEMENTWISE = {
    "Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "Power", "SquaredDifference",
    "Relu", "Sigmoid", "Tanh", "Clamp", "Elu", "Exp", "Log", "Sqrt", "Abs", "Negative", "Erf",
    "Gelu", "Swish", "HSwish", "HSigmoid", "Mish", "SoftPlus", "PRelu", "Floor", "Ceiling",
    "Convert", "Select", "Equal", "Less", "Greater", "LogicalAnd", "LogicalOr", "LogicalNot",
    "Sin", "Cos", "FakeQuantize", "Round", "Sign", "Mod", "FloorMod", "LessEqual", "GreaterEqual",
    "NotEqual", "BitwiseAnd", "BitwiseOr",
}
_TRANSCENDENTAL = {"Sigmoid": 4, "Tanh": 4, "Exp": 4, "Log": 4, "Erf": 6, "Gelu": 8, "Swish": 5,
                   "Mish": 8, "SoftPlus": 5, "Elu": 4, "Power": 4, "Sqrt": 2, "Sin": 4, "Cos": 4}
_NORMS = {"MVN": 5, "NormalizeL2": 4, "BatchNormInference": 2, "LRN": 6, "RMS": 4,
          "GroupNormalization": 5, "Softmax": 5, "LogSoftmax": 6}
_POOLS = {"MaxPool", "AvgPool", "AdaptiveAvgPool", "AdaptiveMaxPool"}
_REDUCE = {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceL1"}


def _numel(shape) -> int:
    return math.prod(shape)


def static_shape(value) -> tuple[int, ...]:
    """The static shape of an OpenVINO output or input, from its text: iterating an ``ov.Shape``
    costs about 25 us an op, a fifth of lowering a 20,000-op model. Raises like ``get_shape()``
    for a dynamic one."""
    text = value.get_partial_shape().to_string()
    if "?" in text or "." in text:
        return tuple(int(d) for d in value.get_shape())  # raises: not static
    body = text[1:-1]
    return tuple(int(d) for d in body.split(",")) if body else ()


def estimate_flops(op, ins=None, outs=None) -> float:
    """Arithmetic work of one OpenVINO op with static shapes (multiply-add = 2 FLOPs); ``ins`` and
    ``outs`` are its input and output shapes when the caller has them."""
    t = op.get_type_name()
    outs = [static_shape(o) for o in op.outputs()] if outs is None else outs
    ins = [static_shape(i) for i in op.inputs()] if ins is None else ins
    out_n = _numel(outs[0]) if outs else 0
    if t in ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "DeformableConvolution",
             "BinaryConvolution"):
        w = ins[1]
        if t == "GroupConvolution":  # [G, Cout/G, Cin/G, k...]
            per_out = _numel(w[2:])
        elif t == "ConvolutionBackpropData":  # [Cin, Cout, k...]
            per_out = w[0] * _numel(w[2:])
        else:  # [Cout, Cin, k...]
            per_out = _numel(w[1:])
        return 2.0 * out_n * per_out
    if t in ("MatMul", "Einsum"):
        if t == "MatMul" and len(ins) == 2 and ins[0]:
            a = ins[0]
            ta = bool(op.get_attributes().get("transpose_a", False))
            k = a[-2] if (ta and len(a) >= 2) else a[-1]
            return 2.0 * out_n * k
        return 2.0 * out_n * (ins[0][-1] if ins and ins[0] else 1)
    if t == "ScaledDotProductAttention":
        q, k = ins[0], ins[1]
        lq, lk, d = q[-2], k[-2], q[-1]
        batch = _numel(q[:-2])
        return 2.0 * batch * lq * lk * d * 2 + 5.0 * batch * lq * lk
    if t in _POOLS:
        kern = op.get_attributes().get("kernel", [])
        return float(out_n * max(1, _numel(kern)))
    if t in _REDUCE:
        return float(_numel(ins[0])) if ins else 0.0
    if t in _NORMS:
        return float(_NORMS[t] * out_n)
    if t in _ELEMENTWISE:
        return float(_TRANSCENDENTAL.get(t, 1) * out_n)
    return 0.0


# --------------------------------------------------------------------------- lowering


def _et_name(et) -> str:
    return et.get_type_name()


def lower_model(model, *, source: str = "", extra_meta: dict[str, str] | None = None,
                fragile=None, ties=None, live=None) -> Module:
    """Lower a static-shaped ``ov.Model`` (such as :func:`specialise` returns) into a Module.
    ``fragile``, ``ties`` and ``live`` (per op position) come from the model as it will be written
    (:func:`~hdp.ir.openvino_legalize.fragile_ops`, :func:`~hdp.ir.openvino_legalize.state_ties`,
    :func:`~hdp.ir.openvino_legalize.live_shapes`); by default they are computed on ``model`` itself."""

    ov_ops = list(model.get_ordered_ops())
    names, renamed = unique_names(ov_ops)
    pos = {op: i for i, op in enumerate(ov_ops)}  # ov Nodes hash and compare by identity
    ops: list[Op] = []
    src, dst, eb, sp, dp = [], [], [], [], []
    out_bytes: list[tuple[int, ...]] = []  # per op, the bytes of each output (an input's edge reads it)
    sizes: dict[str, int] = {}
    for i, op in enumerate(ov_ops):
        outputs = op.outputs()
        shapes = tuple(static_shape(o) for o in outputs)
        ets = [o.get_element_type() for o in outputs]
        types = tuple(_et_name(et) for et in ets)
        for name, et in zip(types, ets):
            if name not in sizes:
                sizes[name] = et.size
        out_bytes.append(tuple(_numel(sh) * sizes[ty] for sh, ty in zip(shapes, types)))
        t = op.get_type_name()
        wbytes = 0
        if t == "Constant":
            wbytes = int(op.get_byte_size()) if hasattr(op, "get_byte_size") else 0
            if not wbytes and shapes:
                wbytes = _numel(shapes[0]) * op.get_output_element_type(0).size
        ins = []
        for j, inp in enumerate(op.inputs()):
            so = inp.get_source_output()
            p = pos[so.get_node()]
            port = so.get_index()
            src.append(p)
            dst.append(i)
            sp.append(port)
            dp.append(j)
            eb.append(out_bytes[p][port])
            ins.append(ops[p].out_shapes[port])
        ops.append(Op(name=names[i], type=t, out_shapes=shapes, out_types=types,
                      flops=estimate_flops(op, ins, list(shapes)), weight_bytes=wbytes))
    if fragile is None:
        fragile = fragile_ops(model)
    if ties is None:
        ties = state_ties(ov_ops)
    if live is None:
        live = live_shapes(ov_ops)
    graph = graph_from_edges(ops, src, dst, eb, sp, dp, renamed, fragile=fragile, ties=ties, live_shapes=live)
    meta = {"source": source, "model_name": model.get_friendly_name() or ""}
    meta.update(extra_meta or {})
    return Module(graph=graph, meta=meta)


def lower(xml: str | os.PathLike, request: ShapeRequest | dict | None = None) -> Module:
    """Read ``xml`` (+ ``.bin``), specialise it (``request``: a :class:`ShapeRequest`, or a
    ``{input: shape}`` dict) and lower the specialisation into a Module."""
    xml = Path(xml)
    return lower_file_model(read_model(xml), xml, request)


def lower_file_model(model, xml: str | os.PathLike, request: ShapeRequest | dict | None = None) -> Module:
    """Lower a specialisation of ``model``, read from ``xml`` by :func:`read_model` (and left
    unchanged), recording its source and the specialisation."""
    xml = Path(xml)

    spec = plan_specialisation(model, xml, as_request(request))
    check_input_sizes(spec, xml)
    fragile = fragile_ops(model)  # on the model as it will be written, dynamic shapes kept
    ties = state_ties(list(model.get_ordered_ops()))
    live = live_shapes(list(model.get_ordered_ops()))
    static = specialise(model, spec, xml)
    if op_structure(static.get_ordered_ops()) != op_structure(model.get_ordered_ops()):
        raise InputError(f"{xml}: specialising the model changed its graph (an OpenVINO shape inference "
                         f"side effect hdp does not handle); please report this model")
    meta = {"source_digest": file_digest(xml), "input_shapes": spec.input_shapes(),
            "specialisation": spec.to_json()}
    if spec.state:
        meta.update(state_shapes=spec.state_shapes(), phase=spec.phase)
    if spec.seq_len:
        meta["seq_len"] = str(spec.seq_len)
    fixed = defaulted(model, spec, as_request(request))
    if fixed:  # said by compile: the shapes hdp costs at that the user did not choose
        meta["defaulted"] = fixed
    module = lower_model(static, source=str(xml.resolve()), extra_meta=meta, fragile=fragile, ties=ties, live=live)
    check_tensor_sizes(module, xml, spec)
    return module


def module_specialisation(module: Module) -> Specialisation:
    """The specialisation a module was lowered with."""
    text = module.meta.get("specialisation")
    if not text:
        raise InputError("this module records no specialisation (lowered by an older hdp); lower it again")
    return Specialisation.from_json(text)


def checked_source(module: Module) -> tuple[Path, str]:
    """The module's source model path and its digest, after checking the file is still there and
    unchanged since lowering (InputError otherwise)."""
    src = module.meta.get("source", "")
    if not src:
        raise InputError("this module has no source model (it was not lowered from a model.xml)")
    xml = Path(src)
    if not xml.exists():
        raise InputError(f"{xml}: the module's source model is gone")
    digest = file_digest(xml)
    if module.meta.get("source_digest") and digest != module.meta["source_digest"]:
        raise StaleInput(f"{xml}: the source model changed since it was lowered; lower it again")
    return xml, digest


def reread_source(module: Module):
    """The module's source model, read fresh and checked to be the one it was lowered from:
    ``(ov.Model, ov_ops)`` with ``ov_ops[i]`` the op lowered as ``module.graph.ops[i]``. The
    model is the original (dynamic shapes, names, rt_info and weights as in the file), except
    that inputs of dynamic element type or rank get the specialisation's (see
    :func:`refine_for_devices`)."""
    xml, _ = checked_source(module)
    spec = module_specialisation(module)
    model = read_model(xml)
    ov_ops = list(model.get_ordered_ops())
    check_structure(ov_ops, module.graph, xml)
    refine_for_devices(model, spec, xml)
    return model, ov_ops


def read_specialised(module: Module, *, runnable: bool = True):
    """The module's source model specialised as it was lowered: ``(ov.Model, ov_ops)`` aligned
    with ``module.graph.ops`` (``runnable``: compilable, see :func:`specialise`)."""
    xml, _ = checked_source(module)
    spec = module_specialisation(module)
    model = specialise(read_model(xml), spec, xml, runnable=runnable)
    ov_ops = list(model.get_ordered_ops())
    check_structure(ov_ops, module.graph, xml)
    return model, ov_ops

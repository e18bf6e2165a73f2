"""Frontend: an OpenVINO model (``model.xml`` + ``model.bin``) lowered into an hdp Module.

The model is read with the openvino Python API, made static (``--input-shape``, or batch 1 where only
the batch is dynamic), and walked in ``get_ordered_ops()`` order, which is topological. Every op
becomes an :class:`~hdp.ir.types.Op` keyed by its friendly name (made unique if needed); every
consumer input becomes one edge carrying the producing output's bytes.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np

from hdp.errors import InputError
from hdp.ir.build import graph_from_edges
from hdp.ir.types import Module, Op

# --------------------------------------------------------------------------- input shapes


def parse_input_shapes(specs: tuple[str, ...] | list[str]) -> dict[str, list[int]]:
    """``["x:1,3,224,224", "mask:1,128"]`` -> {"x": [1,3,224,224], ...}. Several may also be
    separated by ``;`` in one string."""
    out: dict[str, list[int]] = {}
    for spec in specs:
        for part in filter(None, (s.strip() for s in spec.split(";"))):
            name, sep, dims = part.rpartition(":")
            if not sep or not name:
                raise InputError(f"--input-shape '{part}': expected NAME:D0,D1,... (e.g. x:1,3,224,224)")
            try:
                shape = [int(d) for d in dims.replace("x", ",").split(",") if d.strip()]
            except ValueError:
                raise InputError(f"--input-shape '{part}': dimensions must be integers") from None
            if not shape or any(d <= 0 for d in shape):
                raise InputError(f"--input-shape '{part}': dimensions must be positive integers")
            out[name] = shape
    return out


def format_input_shapes(shapes: dict[str, list[int]]) -> str:
    """The inverse of :func:`parse_input_shapes`. Scalar inputs are left out: they are static
    already, and ``NAME:`` would not parse back."""
    return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in sorted(shapes.items()) if v)


# --------------------------------------------------------------------------- reading


def _core():
    import openvino as ov

    return ov.Core()


_digests: dict[tuple, str] = {}


def file_digest(xml: Path) -> str:
    """blake2b of the xml and its weights (identifies the source model in cache keys).

    Several passes check that the source is unchanged; within one process a file whose path,
    size and modification time are the same is not hashed again (BERT's weights are 436 MB)."""
    xml = Path(xml)
    paths = (xml, xml.with_suffix(".bin"))
    stamp = tuple((str(p.resolve()), st.st_size, st.st_mtime_ns) for p in paths if p.exists()
                  for st in [p.stat()])
    if stamp in _digests:
        return _digests[stamp]
    h = hashlib.blake2b(digest_size=16)
    for p in paths:
        if p.exists():
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
    _digests[stamp] = h.hexdigest()
    return _digests[stamp]


def read_model(xml: str | os.PathLike, input_shapes: dict[str, list[int]] | None = None):
    """Read and validate an OpenVINO IR, returning a static-shaped ``ov.Model``.

    Raises InputError with the file and the reason for every user mistake.
    """
    xml = Path(xml)
    if not xml.exists():
        raise InputError(f"{xml}: no such file")
    if xml.is_dir():
        raise InputError(f"{xml}: is a directory, expected an OpenVINO model.xml")
    if xml.suffix.lower() != ".xml":
        raise InputError(f"{xml}: expected an OpenVINO IR .xml file")
    _check_xml(xml)
    try:
        model = _core().read_model(str(xml))
    except RuntimeError as e:
        raise InputError(f"{xml}: OpenVINO cannot read the model: {_first_line(e)}") from None
    if not model.get_ordered_ops():
        raise InputError(f"{xml}: the model has no operations")
    _make_static(model, xml, input_shapes or {})
    return model


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # OpenVINO messages start with a source location line; the last line has the reason
    msg = lines[-1] if lines else type(e).__name__
    return re.sub(r"^Exception from \S+:\s*", "", msg)


def _check_xml(xml: Path) -> None:
    """Catch malformed XML and missing/short weights before OpenVINO, for clearer messages."""
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(xml).getroot()
    except ET.ParseError as e:
        raise InputError(f"{xml}: malformed XML ({e})") from None
    if root.tag != "net":
        raise InputError(f"{xml}: not an OpenVINO IR (root element <{root.tag}>, expected <net>)")
    need = 0
    for data in root.iter("data"):
        off, size = data.get("offset"), data.get("size")
        if off is not None and size is not None:
            try:
                need = max(need, int(off) + int(size))
            except ValueError:
                raise InputError(f"{xml}: constant with non-integer offset/size") from None
    if need:
        bin_path = xml.with_suffix(".bin")
        if not bin_path.exists():
            raise InputError(f"{bin_path}: weights file missing (the model needs {need} bytes)")
        have = bin_path.stat().st_size
        if have < need:
            raise InputError(f"{bin_path}: weights file is truncated ({have} bytes, the model needs {need})")


def _make_static(model, xml: Path, shapes: dict[str, list[int]]) -> None:
    import openvino as ov

    names = {}
    for i, inp in enumerate(model.inputs):
        for n in inp.get_names() or {inp.get_node().get_friendly_name()}:
            names[n] = i
        names.setdefault(inp.get_node().get_friendly_name(), i)
    unknown = [n for n in shapes if n not in names]
    if unknown:
        raise InputError(f"--input-shape: model {xml} has no input '{unknown[0]}' "
                         f"(inputs: {', '.join(sorted(names))})")
    new = {}
    for i, inp in enumerate(model.inputs):
        given = [shapes[n] for n in shapes if names[n] == i]
        ps = inp.get_partial_shape()
        label = inp.get_any_name() if inp.get_names() else inp.get_node().get_friendly_name()
        if given:
            shape = given[0]
            if ps.rank.is_static and len(shape) != ps.rank.get_length():
                raise InputError(f"--input-shape {label}: rank {len(shape)} but the input has rank "
                                 f"{ps.rank.get_length()} ({ps})")
            new[i] = ov.PartialShape(shape)
        elif ps.is_dynamic:
            if ps.rank.is_dynamic:
                raise InputError(f"{xml}: input '{label}' has dynamic rank; give --input-shape {label}:D0,D1,...")
            dims = list(ps)
            if any(d.is_dynamic for d in dims[1:]):
                raise InputError(f"{xml}: input '{label}' has dynamic dimensions {ps} beyond the batch; "
                                 f"give --input-shape {label}:D0,D1,...")
            new[i] = ov.PartialShape([1] + [d.get_length() for d in dims[1:]])
    if new:
        try:
            model.reshape({model.inputs[i]: s for i, s in new.items()})
        except RuntimeError as e:
            raise InputError(f"{xml}: cannot reshape to the given input shapes: {_first_line(e)}") from None
    for op in model.get_ordered_ops():
        for out in op.outputs():
            et = out.get_element_type()
            if et.is_dynamic() or et.get_type_name() in ("dynamic", "undefined"):
                raise InputError(f"{xml}: op '{op.get_friendly_name()}' ({op.get_type_name()}) has no "
                                 f"concrete element type ('{et.get_type_name()}'); no device can run it")
            if out.get_partial_shape().is_dynamic:
                raise InputError(f"{xml}: op '{op.get_friendly_name()}' ({op.get_type_name()}) still has "
                                 f"a dynamic output shape {out.get_partial_shape()} after reshaping")


# --------------------------------------------------------------------------- names


def unique_names(ov_ops) -> tuple[list[str], dict[str, str]]:
    """Friendly names made unique by suffixing ``#k``; returns (names, unique -> original)."""
    seen: dict[str, int] = {}
    names, renamed = [], {}
    taken = set()
    for op in ov_ops:
        base = op.get_friendly_name()
        name = base
        if name in taken:
            k = seen.get(base, 1)
            while f"{base}#{k}" in taken:
                k += 1
            seen[base] = k + 1
            name = f"{base}#{k}"
            renamed[name] = base
        taken.add(name)
        names.append(name)
    return names, renamed


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
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def estimate_flops(op) -> float:
    """Arithmetic work of one OpenVINO op with static shapes (multiply-add = 2 FLOPs)."""
    t = op.get_type_name()
    outs = [list(o.get_shape()) for o in op.outputs()]
    ins = [list(i.get_shape()) for i in op.inputs()]
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


def lower_model(model, *, source: str = "", extra_meta: dict[str, str] | None = None) -> Module:
    """Lower a static-shaped ``ov.Model`` into a Module."""
    ov_ops = list(model.get_ordered_ops())
    names, renamed = unique_names(ov_ops)
    pos = {op: i for i, op in enumerate(ov_ops)}  # ov Nodes hash and compare by identity
    ops: list[Op] = []
    src, dst, eb, sp, dp = [], [], [], [], []
    for i, op in enumerate(ov_ops):
        shapes = tuple(tuple(int(d) for d in o.get_shape()) for o in op.outputs())
        types = tuple(_et_name(o.get_element_type()) for o in op.outputs())
        t = op.get_type_name()
        wbytes = 0
        if t == "Constant":
            wbytes = int(op.get_byte_size()) if hasattr(op, "get_byte_size") else 0
            if not wbytes and shapes:
                wbytes = _numel(shapes[0]) * op.get_output_element_type(0).size
        ops.append(Op(name=names[i], type=t, out_shapes=shapes, out_types=types,
                      flops=estimate_flops(op), weight_bytes=wbytes))
        for j, inp in enumerate(op.inputs()):
            so = inp.get_source_output()
            p = pos[so.get_node()]
            port = so.get_index()
            src.append(p)
            dst.append(i)
            sp.append(port)
            dp.append(j)
            eb.append(_numel(list(so.get_shape())) * so.get_element_type().size)
    graph = graph_from_edges(ops, src, dst, eb, sp, dp, renamed)
    meta = {"source": source, "model_name": model.get_friendly_name() or ""}
    meta.update(extra_meta or {})
    return Module(graph=graph, meta=meta)


def lower(xml: str | os.PathLike, input_shapes: dict[str, list[int]] | None = None) -> Module:
    """Read ``xml`` (+ ``.bin``), make it static and lower it into a Module."""
    xml = Path(xml)
    return lower_file_model(read_model(xml, input_shapes), xml)


def lower_file_model(model, xml: str | os.PathLike) -> Module:
    """Lower ``model``, already read from ``xml`` by :func:`read_model`, recording its source."""
    xml = Path(xml)
    actual = {}
    for inp in model.inputs:
        label = inp.get_any_name() if inp.get_names() else inp.get_node().get_friendly_name()
        actual[label] = [int(d) for d in inp.get_shape()]
    return lower_model(model, source=str(xml.resolve()), extra_meta={
        "source_digest": file_digest(xml),
        "input_shapes": format_input_shapes(actual),
    })


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
        raise InputError(f"{xml}: the source model changed since it was lowered; lower it again")
    return xml, digest


def reread_source(module: Module):
    """Read the module's source model again, with the shapes it was lowered with, and check it is
    unchanged. Returns ``(ov.Model, ov_ops aligned with module.graph.ops)``."""
    xml, _ = checked_source(module)
    shapes = parse_input_shapes([module.meta["input_shapes"]]) if module.meta.get("input_shapes") else {}
    model = read_model(xml, shapes)
    ov_ops = list(model.get_ordered_ops())
    names, _ = unique_names(ov_ops)
    if names != [op.name for op in module.graph.ops]:
        raise InputError(f"{xml}: ops do not match the lowered module; lower it again")
    return model, ov_ops


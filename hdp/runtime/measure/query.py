"""``query_model`` in time linear in the model: OpenVINO is asked once per distinct op signature.

OpenVINO's own ``query_model`` runs the plugin's whole transformation pipeline on the model, and
parts of it are quadratic: on the CPU plugin a chain of 2,000 Relu/Add ops sharing one Constant
took 22 s (snippets tokenization of the eltwise chain, then ``SharedOpOptimization`` comparing the
Constant's consumers pairwise), 20,000 ops over 100 s even with snippets off. A placement needs
one bit per op and device, and a plugin's answer about an op depends on what the op is, not on
where it sits: so each op is described by a **signature**, one op per signature is cut out of the
model, and only those are asked.

A signature is what a plugin's answer about one op can depend on when the op stands alone: its
type and opset version, its attributes, its rt_info keys, each output's element type and shape,
and each input's element type and shape and where it comes from: a Constant (with its value when it
has at most :data:`SMALL` elements: axes, shapes, indices), a value OpenVINO's bound evaluation
knows statically (shape arithmetic on static shapes, which the plugin's constant folding sees as a
Constant too), or data. An op with a body (TensorIterator, Loop, If) is a signature of its own.

An op is cut out of a copy of the model compiled (for a stateful model the runnable specialisation):
its Constant inputs kept, Constants for its known inputs and Parameters of the signature's static
shapes for the others, a Result per output (an Assign is a sink), the op named ``hdp_sig<k>``; up
to :data:`BATCH` such ops (disjoint but for shared Constants) make one small model, asked once per
device. An op whose copy infers output types or shapes the original cannot have, or that cannot
be copied, is asked in context instead: the whole model, once, for those positions only.

Parameters, Constants and Results are not asked: the support pass marks them supported on every
device (HETERO places them with their neighbours). The answer for the others equals whole-model
``query_model`` on every model we compared (``tests/test_query.py``, ``bench/support_scale.py``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

import msgspec
import numpy as np

#: Bump when the meaning of a signature or of its memoised answer changes.
SIG_VERSION = 1
#: A Constant (or statically known) input with at most this many elements is part of the signature
#: by value; larger ones (weights) by element type and shape only.
SMALL = 64
#: Cut-out ops per query (bounds the plugin's superlinear work per query).
BATCH = 256
#: Types asked about nowhere: supported on every device.
ANYWHERE = frozenset({"Parameter", "Constant", "Result"})
#: Types cut out with their model's sinks (an Assign is a sink, not reached from a Result).
SINKS = frozenset({"Assign"})
#: Types with bodies: a signature per op.
WITH_BODY = frozenset({"TensorIterator", "Loop", "If"})

_ENC = msgspec.msgpack.Encoder(order="deterministic")


class Signatures(msgspec.Struct, frozen=True):
    """Per op position: the index of its signature in ``digests`` (-1: a Parameter, Constant or
    Result, not asked; -2: asked in the whole model). ``reps[k]`` is the position of the op cut out
    for signature ``k``."""

    sig_of: list[int]
    digests: list[str]
    reps: list[int]

    def asked(self) -> int:
        return len(self.digests)


def _plain(v):
    """Attribute values as msgpack-able builtins."""
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    if isinstance(v, np.ndarray):
        return [str(v.dtype), list(v.shape), v.tobytes()]
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in sorted(v.items())}
    return str(v)


def _dims(text: str) -> tuple[int, ...]:
    """``"[1,16]"`` (a static shape's text; iterating an ov.Shape costs 25 us an op) -> (1, 16)."""
    body = text[1:-1]
    return tuple(int(d) for d in body.split(",")) if body else ()


def known_value(src, dims: tuple[int, ...]) -> np.ndarray | None:
    """The statically known value of a small integer output (shape arithmetic), or None."""
    import openvino as ov

    et = src.get_element_type()
    if et.is_dynamic() or not et.is_integral_number() or math.prod(dims) > SMALL:
        return None
    try:
        lo, hi = ov.experimental.evaluate_both_bounds(src)
        a, b = lo.data, hi.data
    except (RuntimeError, AttributeError, TypeError):  # no bounds: an uninitialised tensor
        return None
    if a.shape != b.shape or not np.array_equal(a, b):
        return None
    return np.array(a, copy=True)


class _Input(msgspec.Struct, frozen=True, array_like=True):
    kind: str  # "const", "known" or "data"
    type: str
    shape: str  # static shape as OpenVINO prints it: "[1,16]"
    value: bytes | None = None  # small constant or known values


def _inputs(op) -> list[tuple[_Input, object]]:
    """Each input's description and, for a known value, the value the cut-out copy gets.
    Raises ValueError for an input of dynamic shape."""
    out = []
    for inp in op.inputs():
        src = inp.get_source_output()
        ps = src.get_partial_shape()
        if ps.is_dynamic:
            raise ValueError("dynamic input shape")
        text = ps.to_string()
        node = src.get_node()
        et = src.get_element_type().get_type_name()
        if node.get_type_name() == "Constant":
            value = None
            if math.prod(_dims(text)) <= SMALL:
                try:
                    value = np.ascontiguousarray(node.get_data()).tobytes()
                except (RuntimeError, TypeError, ValueError):
                    value = None
            out.append((_Input("const", et, text, value), None))
            continue
        known = known_value(src, _dims(text))
        if known is not None:
            out.append((_Input("known", et, text, known.tobytes()), known))
        else:
            out.append((_Input("data", et, text), None))
    return out


def op_signature(op, position: int) -> tuple[bytes | None, list]:
    """(digest, input feeds) of one op of a static model; digest None for an op asked in context."""
    t = op.get_type_name()
    outs = []
    for o in op.outputs():
        ps = o.get_partial_shape()
        if ps.is_dynamic:
            return None, []
        outs.append((o.get_element_type().get_type_name(), ps.to_string()))
    try:
        feeds = _inputs(op)
    except ValueError:  # a dynamic input shape: cannot stand alone
        return None, []
    rt_info = op.get_rt_info()
    rt = sorted(k for k in rt_info.keys() if "name" not in k.lower()) if len(rt_info) else []
    doc = [SIG_VERSION, t, op.get_type_info().version_id, _plain(op.get_attributes()), rt,
           [d for d, _ in feeds], outs]
    if t in WITH_BODY:
        doc.append(position)  # bodies are not compared: one signature per op
    return hashlib.blake2b(_ENC.encode(doc), digest_size=16).digest(), feeds


def signatures(ops: Sequence) -> tuple[Signatures, list[list]]:
    """The :class:`Signatures` of ``ops`` (a static model's ``get_ordered_ops()``), and the input
    feeds of each representative."""
    index: dict[bytes, int] = {}
    sig_of: list[int] = []
    reps: list[int] = []
    feeds: list[list] = []
    for i, op in enumerate(ops):
        if op.get_type_name() in ANYWHERE:
            sig_of.append(-1)
            continue
        digest, f = op_signature(op, i)
        if digest is None:
            sig_of.append(-2)
            continue
        k = index.get(digest)
        if k is None:
            k = index[digest] = len(reps)
            reps.append(i)
            feeds.append(f)
        sig_of.append(k)
    digests = [""] * len(reps)
    for d, k in index.items():
        digests[k] = d.hex()
    return Signatures(sig_of, digests, reps), feeds


def _cut_out(op, original, feeds, k: int):
    """Cut ``op`` (of a copy of the model, which this changes) out for signature ``k``: its
    non-Constant inputs become Parameters of the signature's static shapes (known values:
    Constants); returns (results, parameters, sinks), or None when it then infers output types
    or shapes that ``original`` (the op in the model cut from) cannot have."""
    from openvino import opset13 as ops

    params = []
    try:
        for j, (desc, feed) in enumerate(feeds):
            inp = op.input(j)
            if desc.kind == "known":
                inp.replace_source_output(ops.constant(feed, dtype=inp.get_element_type()).output(0))
            elif desc.kind == "data":
                p = ops.parameter(list(_dims(desc.shape)), inp.get_element_type(), name=f"hdp_sig{k}_in{j}")
                params.append(p)
                inp.replace_source_output(p.output(0))
        op.validate_and_infer_types()
    except (RuntimeError, TypeError, ValueError):
        return None
    outs = op.outputs()
    if any(a.get_element_type() != b.get_element_type() or not b.get_partial_shape().compatible(a.get_partial_shape())
           or a.get_partial_shape().rank != b.get_partial_shape().rank for a, b in zip(outs, original.outputs())):
        return None
    op.set_friendly_name(f"hdp_sig{k}")
    sinks = [op] if op.get_type_name() in SINKS else []
    results = [ops.result(o, name=f"hdp_sig{k}_out{j}") for j, o in enumerate(outs)]
    if not results and not sinks:
        return None
    return results, params, sinks


class Plan(msgspec.Struct):
    """What to ask a device: small models of cut-out ops, and what only the whole model answers."""

    models: list  # [(ov.Model, [signature index, ...]), ...]
    context: list[int]  # signatures that could not be cut out
    alone: list[int]  # op positions with no signature of their own (-2)


def plan(model, sigs: Signatures, feeds: list[list], wanted: Sequence[int] | None = None,
         batch: int = BATCH) -> Plan:
    """The small models holding the representatives of the signatures ``wanted`` (default: all;
    at most ``batch`` per model), cut out of a copy of ``model``, the model compiled (for a
    stateful model the runnable specialisation, whose states stay dynamic)."""
    import openvino as ov

    wanted = list(range(sigs.asked())) if wanted is None else list(wanted)
    alone = [i for i, s in enumerate(sigs.sig_of) if s == -2]
    if not wanted:
        return Plan([], [], alone)
    original = model.get_ordered_ops()
    copy_ops = model.clone().get_ordered_ops()
    models, context = [], []
    results, params, sinks, ks = [], [], [], []

    def flush():
        if ks:
            if not results:  # only Assigns: a model needs a Result
                from openvino import opset13 as ops

                results.append(ops.result(params[0], name="hdp_sig_sink_result"))
            models.append((ov.Model(results, sinks, params, "hdp_signatures"), list(ks)))

    for k in wanted:
        pos = sigs.reps[k]
        cut = _cut_out(copy_ops[pos], original[pos], feeds[k], k)
        if cut is None:
            context.append(k)
            continue
        results += cut[0]
        params += cut[1]
        sinks += cut[2]
        ks.append(k)
        if len(ks) >= batch:
            flush()
            results, params, sinks, ks = [], [], [], []
    flush()
    return Plan(models, context, alone)


def answer(model, sigs: Signatures, p: Plan, ask: Callable[[object], set]) -> tuple[dict[int, bool], dict]:
    """One device's answer to a :class:`Plan` of ``model``: ``ask(m)`` is the device's
    ``query_model`` (the supported names). Returns ({signature index: supported}, what it cost:
    ``queries``, ``in_context``). Signatures that could not be cut out and the ops without a
    signature are answered by the whole model's ``query_model``, asked at most once; an op without
    a signature comes back under ``-(position + 1)``."""
    out: dict[int, bool] = {}
    queries = 0
    for m, ks in p.models:
        names = ask(m)
        queries += 1
        for k in ks:
            out[k] = f"hdp_sig{k}" in names
    if p.context or p.alone:
        ops = model.get_ordered_ops()
        names = ask(model)
        queries += 1
        for k in p.context:
            out[k] = ops[sigs.reps[k]].get_friendly_name() in names
        for i in p.alone:
            out[-(i + 1)] = ops[i].get_friendly_name() in names
    return out, {"queries": queries, "in_context": len(p.context) + len(p.alone)}


def mask(n: int, sigs: Signatures, answers: dict[int, bool]) -> np.ndarray:
    """A bool per op position from per-signature ``answers`` (see :func:`answer`); Parameters,
    Constants and Results are True."""
    sig_of = np.asarray(sigs.sig_of, np.int64)
    out = np.ones(n, bool)
    if sigs.asked():
        table = np.array([answers.get(k, False) for k in range(sigs.asked())], bool)
        asked = sig_of >= 0
        out[asked] = table[sig_of[asked]]
    for i in np.flatnonzero(sig_of == -2):
        out[i] = answers.get(-(int(i) + 1), False)
    return out

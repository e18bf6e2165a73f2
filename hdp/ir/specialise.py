"""Specialisations: the static shapes hdp costs a (possibly dynamic, possibly stateful) model at.

**Place on a specialisation, write onto the original.** The user's model may have dynamic shapes
(a batch, a sequence length, a KV-cache state); costs need static ones. :func:`plan_specialisation`
fixes every input shape (``--input-shape``, else the documented defaults below) and, for a
stateful model, the shape of every state; :func:`specialise` applies that plan to a *clone* of the
model, without graph transformations (no ``ov.Model.reshape``, whose SmartReshape rewrites the
graph and mints auto-named ``Constant_N`` ops), so the clone has exactly the original's ops. The
Module records the plan in ``meta["specialisation"]`` so every later reader (support, the
measuring worker, the backend) rebuilds the same model. The backend annotates the **original**
model, read fresh: its dynamic shapes, names, rt_info and weights stay as the user wrote them.

Defaults of the specialisation (each overridable with ``--input-shape NAME:D0,D1,...[:TYPE]``):

- batch 1: a dynamic first dimension is 1;
- transformer-style inputs, matched by name and checked by rank and element type
  (``input_ids``, ``attention_mask``, ``token_type_ids``: rank 2, ``[batch, seq]``;
  ``position_ids``: rank 2, or 3 with the sequence last; ``beam_idx``: rank 1, ``[batch]``;
  integer element types, any for ``attention_mask``): a dynamic sequence dimension is
  ``--seq-len`` (default 128). A ``dynamic`` element type becomes i64 (``beam_idx``: i32) and a
  dynamic rank the rank above;
- stateful models (ReadValue/Assign variables, such as optimum-intel's KV cache):
  ``--phase prefill`` (default) costs the first inference of a sequence: ``seq_len`` new tokens,
  past length 0, every state as it starts -- the shape of its ReadValue's initialising subgraph
  (optimum-intel's zeros of ``[batch, heads, 0, head_dim]``), or without one the variable's shape
  with each dynamic dimension at its lower bound (0), which is what the CPU plugin starts from.
  ``--phase decode`` costs one generation step after a ``seq_len``-token prefill: one new token
  (``attention_mask`` ``seq_len + 1`` long) and every state the shape its Assign stores after that
  prefill. A state may also be given by its variable id with ``--input-shape``.
- anything else dynamic (a dynamic dimension beyond the batch of another input, a dynamic rank or
  element type of another input) has no default: one error lists every such input with an example.

OpenVINO's devices cannot compile an input of ``dynamic`` rank or element type, so for those
inputs only the written model takes the rank (dimensions left dynamic) and element type of the
specialisation; everything else in it is the original.

:mod:`hdp.ir.size_limits` refuses, before any device sees them, specialisations whose tensors a
plugin could not allocate.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import msgspec
import numpy as np
from msgspec import Meta

from hdp.base.errors import InputError, StaleInput
from hdp.base.validation import MAX_COUNT
from hdp.ir.openvino_read import ov_error_line
from hdp.ir.shapes import MAX_DIM, ShapeRequest, as_request

#: Transformer-style inputs whose dynamic sequence dimension ``--seq-len`` fills.
TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids", "token_type_ids", "beam_idx")
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH = 1

# --------------------------------------------------------------------------- the specialisation


#: A dimension as a record holds it (a placed model's or a module's specialisation, read back).
Dim = Annotated[int, Meta(ge=0, le=MAX_DIM)]


class InputSpec(msgspec.Struct, frozen=True, array_like=True):
    name: str  # the input's label (first tensor name, else its Parameter's friendly name)
    shape: tuple[Dim, ...]
    type: str  # element type name ("f32", "i64", ...)


class StateSpec(msgspec.Struct, frozen=True, array_like=True):
    variable: str  # variable id
    shape: tuple[Dim, ...]  # the state an inference starts from
    type: str


class Specialisation(msgspec.Struct, frozen=True, kw_only=True):
    """Static shapes for every input (in ``model.inputs`` order) and every state: what hdp costs.

    ``phase`` is ``prefill``/``decode`` for a stateful model, else empty; ``seq_len`` is the
    sequence length used for transformer-style inputs (0: none had a dynamic one)."""

    inputs: tuple[InputSpec, ...]
    state: tuple[StateSpec, ...] = ()
    phase: str = ""
    seq_len: Annotated[int, Meta(ge=0, le=MAX_COUNT)] = 0

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    @staticmethod
    def from_json(text: str, source: str = "module") -> "Specialisation":
        try:
            return msgspec.json.decode(text, type=Specialisation)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise InputError(f"{source}: invalid specialisation record ({e}); lower the model again") from None

    def input_shapes(self) -> str:
        """``x:1,3,224,224;ids:1,128`` (for people)."""
        return ";".join(f"{i.name}:{','.join(map(str, i.shape))}" for i in self.inputs)

    def state_shapes(self) -> str:
        return ";".join(f"{s.variable}:{','.join(map(str, s.shape))}" for s in self.state)


def input_label(inp) -> str:
    return inp.get_any_name() if inp.get_names() else inp.get_node().get_friendly_name()


def _all_names(inp) -> list[str]:
    return sorted(inp.get_names()) + [inp.get_node().get_friendly_name()]


def element_type_name(et) -> str:
    return et.get_type_name()


def ov_type(name: str):
    import openvino as ov

    return getattr(ov.Type, name)


def _token_role(inp) -> str:
    """The transformer-style role of an input (``input_ids`` ...), or "" if its name, rank or
    element type does not fit one."""
    names = {n.lower() for n in _all_names(inp)}
    role = next((r for r in TOKEN_INPUTS if r in names), "")
    if not role:
        return ""
    ps, et = inp.get_partial_shape(), inp.get_element_type()
    if ps.rank.is_static:
        r = ps.rank.get_length()
        if role == "beam_idx" and r != 1 or role == "position_ids" and r not in (2, 3) \
                or role not in ("beam_idx", "position_ids") and r != 2:
            return ""
    if not et.is_dynamic() and role != "attention_mask" and not et.is_integral_number():
        return ""
    return role


def _token_shape(role: str, ps, phase: str, seq_len: int, batch: int) -> tuple[int, ...]:
    """Static shape of a transformer-style input (dynamic rank: its usual rank)."""
    if ps.rank.is_dynamic:
        dims = [None] if role == "beam_idx" else [None, None]
    else:
        dims = [d.get_length() if d.is_static else None for d in ps]
    if role == "beam_idx":
        return tuple(batch if d is None else d for d in dims)
    if phase == "decode":
        seq = seq_len + 1 if role == "attention_mask" else 1
    else:
        seq = seq_len
    if dims[-1] is None:
        dims[-1] = seq
    return tuple(batch if d is None else d for d in dims)


def _example(label: str, ps, et) -> str:
    if ps.rank.is_dynamic:
        dims = "D0,D1,..."
    else:
        dims = ",".join(str(d.get_length()) if d.is_static else ("1" if k == 0 else f"D{k}")
                        for k, d in enumerate(ps))
    suffix = ":f32" if et.is_dynamic() else ""
    return f"--input-shape {_quote(label + ':' + dims + suffix)}"


def _quote(s: str) -> str:
    return s if re.fullmatch(r"[\w.:,/-]+", s) else f"'{s}'"


def _fits(ps, shape: tuple[int, ...]) -> bool:
    import openvino as ov

    if ps.rank.is_dynamic:
        return True
    if ps.rank.get_length() != len(shape):
        return False
    return all(d.get_min_length() <= s and (d.get_max_length() < 0 or s <= d.get_max_length())
               for d, s in zip(ps, shape)) and ps.compatible(ov.PartialShape(list(shape)))


def defaulted(model, spec: Specialisation, request: ShapeRequest | None = None) -> str:
    """What the specialisation fixed without being asked: ``x: dynamic batch fixed to 1; input_ids:
    dynamic sequence fixed to 128`` (empty when every dynamic dimension was given), for the
    compile to say so."""
    req = as_request(request)
    given = set(req.shapes)
    notes = []
    for inp, ins in zip(model.inputs, spec.inputs):
        if given & set(_all_names(inp)):
            continue
        ps = inp.get_partial_shape()
        if ps.rank.is_dynamic:
            continue
        dims = list(ps)
        fixed = []
        if dims and dims[0].is_dynamic:
            fixed.append(f"dynamic batch fixed to {ins.shape[0]}")
        if len(dims) > 1 and _token_role(inp) and dims[-1].is_dynamic and req.seq_len is None:
            fixed.append(f"dynamic sequence fixed to {ins.shape[-1]} (--seq-len)")
        if fixed:
            notes.append(f"{ins.name}: {', '.join(fixed)}")
    return "; ".join(notes)


def plan_specialisation(model, xml: str | os.PathLike, request: ShapeRequest | None = None) -> Specialisation:
    """Static input and state shapes for ``model`` (the original, not modified) from ``request``
    and the defaults in this module's docstring. One InputError lists every input that needs a
    shape or type the defaults cannot give."""
    req = as_request(request)
    xml = Path(xml)
    if not model.get_ordered_ops():
        raise InputError(f"{xml}: the model has no ops")
    if not model.inputs:
        raise InputError(f"{xml}: the model has no inputs (hdp places models that take inputs)")
    # sorted: get_variables() has no stable order, and the specialisation must be the same bytes every read
    variables = dict(sorted((v.get_info().variable_id, v) for v in model.get_variables()))
    index: dict[str, int] = {}
    for i, inp in enumerate(model.inputs):
        for n in _all_names(inp):
            index.setdefault(n, i)
    unknown = [n for n in list(req.shapes) + list(req.types) if n not in index and n not in variables]
    if unknown:
        have = ", ".join(sorted({input_label(i) for i in model.inputs}))
        vs = f"; variables: {', '.join(sorted(variables))}" if variables else ""
        raise InputError(f"--input-shape: model {xml} has no input '{unknown[0]}' (inputs: {have}{vs})")
    if req.phase == "decode" and not variables:
        raise InputError(f"--phase decode: {xml} is not stateful (no ReadValue/Assign variables); "
                         f"a decode step needs the KV cache in the model's state")
    seq_len = req.seq_len if req.seq_len is not None else DEFAULT_SEQ_LEN
    phase = req.phase if variables else ""

    inputs: list[InputSpec] = []
    missing: list[str] = []
    examples: list[str] = []
    seq_used = False
    for i, inp in enumerate(model.inputs):
        label, ps, et = input_label(inp), inp.get_partial_shape(), inp.get_element_type()
        given = [n for n in req.shapes if index.get(n) == i]
        gtype = [req.types[n] for n in req.types if index.get(n) == i]
        role = _token_role(inp)
        problems = []
        # element type
        if gtype:
            etype = gtype[0]
            if not et.is_dynamic() and element_type_name(et) != etype:
                raise InputError(f"--input-shape {label}: element type {etype}, but the input is "
                                 f"{element_type_name(et)} (a type can only be given for a 'dynamic' one)")
        elif et.is_dynamic():
            etype = ("i32" if role == "beam_idx" else "i64") if role else ""
            if not etype:
                problems.append("a dynamic element type")
        else:
            etype = element_type_name(et)
        # shape
        shape = None
        if given:
            shape = tuple(req.shapes[given[0]])
            if not _fits(ps, shape):
                if ps.rank.is_static and ps.rank.get_length() != len(shape):
                    raise InputError(f"--input-shape {label}: rank {len(shape)} but the input has rank "
                                     f"{ps.rank.get_length()} ({ps})")
                raise InputError(f"--input-shape {label}:{','.join(map(str, shape))} does not fit the input's "
                                 f"shape {ps}; hdp keeps the model's shapes (reshape and save the model "
                                 f"first to change a static dimension)")
        elif role:
            shape = _token_shape(role, ps, phase or "prefill", seq_len, DEFAULT_BATCH)
            seq_used = seq_used or role != "beam_idx" and (ps.rank.is_dynamic or ps[ps.rank.get_length() - 1].is_dynamic)
        elif ps.rank.is_dynamic:
            problems.append("a dynamic rank")
        else:
            dims = list(ps)
            if any(d.is_dynamic for d in dims[1:]):
                problems.append(f"dynamic dimensions {ps} beyond the batch")
            else:
                shape = tuple(DEFAULT_BATCH if d.is_dynamic else d.get_length() for d in dims)
        if problems:
            missing.append(f"'{label}' ({' and '.join(problems)})")
            examples.append(_example(label, ps, et))
            continue
        inputs.append(InputSpec(label, shape, etype))
    if missing:
        raise InputError(f"{xml}: no shape for {len(missing)} input{'s' if len(missing) > 1 else ''}: "
                         f"{', '.join(missing)}; give each with --input-shape NAME:D0,D1,...[:TYPE], e.g. "
                         f"hdp compile {_quote(str(xml))} -o placed.xml {' '.join(examples)}")
    if req.seq_len is not None and not seq_used and not variables:
        raise InputError(f"--seq-len {req.seq_len}: {xml} has no transformer-style input with a dynamic "
                         f"sequence dimension ({', '.join(TOKEN_INPUTS)}); give --input-shape instead")
    spec = Specialisation(inputs=tuple(inputs), phase=phase, seq_len=seq_len if (seq_used or variables) else 0)
    if variables:
        spec = _plan_state(model, xml, spec, req, variables)
    return spec


def _plan_state(model, xml: Path, spec: Specialisation, req: ShapeRequest, variables) -> Specialisation:
    """The state shapes of a stateful model's specialisation (see the module docstring)."""
    clone = _with_inputs(model, spec, xml)
    start: dict[str, tuple[int, ...]] = {}
    for op in clone.get_ordered_ops():
        if op.get_type_name() != "ReadValue":
            continue
        vid = op.get_attributes()["variable_id"]
        if op.get_input_size() and op.get_input_partial_shape(0).is_static:
            start[vid] = tuple(int(d) for d in op.get_input_shape(0))
    state = []
    for vid, var in variables.items():
        info = var.get_info()
        if vid in req.shapes:
            shape = tuple(req.shapes[vid])
            if not _fits(info.data_shape, shape):
                raise InputError(f"--input-shape {vid}:{','.join(map(str, shape))} does not fit variable "
                                 f"'{vid}' of shape {info.data_shape}")
        elif vid in start:
            shape = start[vid]
        elif info.data_shape.rank.is_static:
            shape = tuple(d.get_min_length() if d.is_dynamic else d.get_length() for d in info.data_shape)
        else:
            raise InputError(f"{xml}: variable '{vid}' has a dynamic rank; give its state shape with "
                             f"--input-shape {vid}:D0,D1,...")
        state.append(StateSpec(vid, shape, element_type_name(info.data_type)))
    spec = msgspec.structs.replace(spec, state=tuple(state))
    if spec.phase != "decode":
        return spec
    # decode: the state a seq_len-token prefill leaves behind, and one new token
    inputs_only = {k: v for k, v in req.shapes.items() if k not in variables}
    prefill = plan_specialisation(model, xml, msgspec.structs.replace(req, phase="prefill", shapes=inputs_only))
    after = _assigned_state(specialise(model, prefill, xml))
    state = tuple(s if s.variable in req.shapes else StateSpec(s.variable, after.get(s.variable, s.shape), s.type)
                  for s in spec.state)
    return msgspec.structs.replace(spec, state=state)


def _assigned_state(static_model) -> dict[str, tuple[int, ...]]:
    return {op.get_attributes()["variable_id"]: tuple(int(d) for d in op.get_input_shape(0))
            for op in static_model.get_ordered_ops() if op.get_type_name() == "Assign"}


def _check_inputs(model, spec: Specialisation, xml) -> None:
    labels = [input_label(i) for i in model.inputs]
    if labels != [i.name for i in spec.inputs]:
        raise StaleInput(f"{xml}: the model's inputs ({', '.join(labels)}) are not those it was lowered with "
                         f"({', '.join(i.name for i in spec.inputs)}): model.xml changed since it was lowered; "
                         f"lower it again")


def _with_inputs(model, spec: Specialisation, xml):
    """A clone of ``model`` with every input at its specialised type and shape, shapes inferred
    (states as the variables declare them)."""
    import openvino as ov

    _check_inputs(model, spec, xml)
    clone = model.clone()
    for p, ins in zip(clone.get_parameters(), spec.inputs):
        if p.get_element_type().is_dynamic():
            p.set_element_type(ov_type(ins.type))
        p.set_partial_shape(ov.PartialShape(list(ins.shape)))
    try:
        clone.validate_nodes_and_infer_types()
    except RuntimeError as e:
        raise InputError(f"{xml}: shapes {spec.input_shapes()} do not fit the model: {ov_error_line(e)}") from None
    return clone


class CheckRun(msgspec.Struct, frozen=True):
    """One inference of a placement check: the input shapes, and whether the state carries over
    from the run before (a generation step) rather than starting fresh."""

    spec: Specialisation
    keep_state: bool = False


def check_runs(model, spec: Specialisation, xml: str | os.PathLike = "<model>") -> list[CheckRun]:
    """The inferences that check a placed model against the original (``model``, unchanged):

    - the specialisation hdp placed for;
    - a dynamic model also at a second shape: batch 2 and, for transformer-style inputs, about half
      the sequence length (when the model accepts it);
    - a stateful model: the prefill, then two single-token steps with the state carried.
    """
    runs = [CheckRun(spec)]
    if spec.state:
        L = spec.seq_len or DEFAULT_SEQ_LEN
        for k in (0, 1):
            try:
                step = plan_specialisation(model, xml, ShapeRequest(seq_len=L + k, phase="decode"))
            except InputError:
                break
            runs.append(CheckRun(step, keep_state=True))
        return runs
    ps = [inp.get_partial_shape() for inp in model.inputs]
    if all(p.is_static for p in ps):
        return runs
    new = []
    for ins, p, inp in zip(spec.inputs, ps, model.inputs):
        shape = list(ins.shape)
        if p.rank.is_static:
            token = bool(_token_role(inp))
            for k, d in enumerate(p):
                if d.is_static:
                    continue
                if k == 0:
                    shape[k] = 2
                elif token and shape[k] > 1:
                    shape[k] = shape[k] // 2 + 1
        new.append(InputSpec(ins.name, tuple(shape), ins.type))
    alt = msgspec.structs.replace(spec, inputs=tuple(new))
    if alt.inputs != spec.inputs:
        try:
            specialise(model, alt, xml, runnable=True)
        except InputError:
            return runs
        runs.append(CheckRun(alt))
    return runs


def specialise(model, spec: Specialisation, xml: str | os.PathLike = "<model>", *, runnable: bool = False):
    """A clone of ``model`` (the original, left as it is) with the static shapes of ``spec``.

    By default every op's shapes are static, states included (what hdp lowers and costs); the
    clone is then for shape inference only, since an Assign of a growing KV cache stores a larger
    state than its variable's. ``runnable=True`` keeps the variables as declared, so the clone
    compiles; its states are set before each inference (see :func:`state_tensors`).
    """
    clone = _with_inputs(model, spec, xml)
    if spec.state and not runnable:
        _static_state(clone, spec, xml)
    for op in clone.get_ordered_ops():
        for out in op.outputs():
            et = out.get_element_type()
            if et.is_dynamic() or et.get_type_name() in ("dynamic", "undefined"):
                raise InputError(f"{xml}: op '{op.get_friendly_name()}' ({op.get_type_name()}) has no "
                                 f"concrete element type ('{et.get_type_name()}'); no device can run it")
    if not runnable or not spec.state:
        for op in clone.get_ordered_ops():
            for out in op.outputs():
                if out.get_partial_shape().is_dynamic:
                    raise InputError(f"{xml}: op '{op.get_friendly_name()}' ({op.get_type_name()}) has a dynamic "
                                     f"output shape {out.get_partial_shape()} even with static inputs "
                                     f"({spec.input_shapes()}); hdp cannot cost data-dependent shapes")
    return clone


def _static_state(clone, spec: Specialisation, xml) -> None:
    """Infer every shape with each variable's state at its specialised static shape.

    OpenVINO checks that a ReadValue's initialising subgraph fits its variable and that an Assign's
    input fits it too; a KV cache that grows from 0 to ``seq_len`` fails both with a static
    variable shape. While shapes are inferred, each initialiser is swapped for zeros of the state
    shape and each Assign is taken out of the sinks (its input kept alive by a temporary Result);
    everything is put back afterwards, so the clone has the original's ops in the original order.
    """
    import openvino as ov
    from openvino import opset13

    states = {s.variable: s for s in spec.state}
    for var in clone.get_variables():
        info = var.get_info()
        s = states.get(info.variable_id)
        if s is None:
            raise InputError(f"{xml}: variable '{info.variable_id}' is not in the specialisation; lower it again")
        info.data_shape = ov.PartialShape(list(s.shape))
        var.update(info)
    extra, swapped = [], []
    for op in clone.get_ordered_ops():
        if op.get_type_name() == "ReadValue" and op.get_input_size() == 1:
            s = states[op.get_attributes()["variable_id"]]
            init = op.input(0).get_source_output()
            zero = opset13.convert(opset13.constant(np.zeros((), np.float32)), ov_type(s.type))
            fill = opset13.broadcast(zero, opset13.constant(np.array(s.shape, np.int64)))
            swapped.append((op, init))
            extra.append(opset13.result(init))
            op.input(0).replace_source_output(fill.output(0))
    sinks = list(clone.get_sinks())
    for s in sinks:
        extra.append(opset13.result(s.input(0).get_source_output()))
        clone.remove_sink(s)
    clone.add_results(extra)
    try:
        clone.validate_nodes_and_infer_types()
    except RuntimeError as e:
        raise InputError(f"{xml}: states {spec.state_shapes()} do not fit the model: {ov_error_line(e)}") from None
    finally:
        for r in extra:
            clone.remove_result(r)
        for op, init in swapped:
            op.input(0).replace_source_output(init)
        clone.add_sinks(sinks)
    for s in sinks:
        for k in range(s.get_output_size()):
            s.set_output_type(k, s.get_input_element_type(0), s.get_input_partial_shape(0))


def state_tensors(spec: Specialisation) -> dict[str, np.ndarray]:
    """Zeros of each state's specialised shape, by variable id: what a runnable specialisation's
    infer request is given before each inference (``VariableState.state``)."""
    return {s.variable: np.zeros(s.shape, ov_type(s.type).to_dtype()) for s in spec.state}


def refine_for_devices(model, spec: Specialisation, xml="<model>") -> None:
    """In place: give inputs of ``dynamic`` element type or rank the specialisation's type and rank
    (dimensions left dynamic). OpenVINO devices compile neither, so the written model needs them;
    nothing else of the original changes."""
    import openvino as ov

    _check_inputs(model, spec, xml)
    changed = False
    for p, ins in zip(model.get_parameters(), spec.inputs):
        if p.get_element_type().is_dynamic():
            p.set_element_type(ov_type(ins.type))
            changed = True
        if p.get_partial_shape().rank.is_dynamic:
            p.set_partial_shape(ov.PartialShape.dynamic(len(ins.shape)))
            changed = True
    if changed:
        try:
            model.validate_nodes_and_infer_types()
        except RuntimeError as e:
            raise InputError(f"{xml}: cannot give the inputs types/ranks {spec.input_shapes()}: {ov_error_line(e)}") from None

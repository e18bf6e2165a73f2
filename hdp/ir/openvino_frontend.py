"""Frontend: an OpenVINO model (``model.xml`` + ``model.bin``) lowered into an hdp Module.

**Place on a specialisation, write onto the original.** The user's model may have dynamic shapes
(a batch, a sequence length, a KV-cache state); costs need static ones. :func:`plan_specialisation`
fixes every input shape (``--input-shape``, else the documented defaults below) and, for a
stateful model, the shape of every state; :func:`specialise` applies that plan to a *clone* of the
model, without graph transformations (no ``ov.Model.reshape``, whose SmartReshape rewrites the
graph and mints auto-named ``Constant_N`` ops), so the clone has exactly the original's ops. The
Module records the plan in ``meta["specialisation"]`` so every later reader (support, the
measuring worker, the backend) rebuilds the same model. The backend annotates the **original**
model, read fresh: its dynamic shapes, names, rt_info and weights stay as the user wrote them.

**Op identity** between the original, a specialisation and any re-read is the topological position
in ``get_ordered_ops()``, checked structurally (type, input count, each input's source position
and port; :func:`op_structure`) -- never friendly names, which OpenVINO may generate. Names stay
in the IR (``Op.name``) for people; where an OpenVINO answer comes back by name (``query_model``,
a runtime graph's ``originalLayersNames``) it is mapped to positions inside the process that holds
the model it asked about (:func:`name_positions`, :func:`names_to_positions`).

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
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from pathlib import Path

import msgspec
import numpy as np

from hdp.errors import InputError, StaleInput
from hdp.ir.build import graph_from_edges
from hdp.ir.types import Graph, Module, Op

#: Transformer-style inputs whose dynamic sequence dimension ``--seq-len`` fills.
TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids", "token_type_ids", "beam_idx")
DEFAULT_SEQ_LEN = 128
DEFAULT_BATCH = 1
PHASES = ("prefill", "decode")
#: Element type names accepted as the ``:TYPE`` suffix of ``--input-shape``.
ELEMENT_TYPES = ("f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u64", "u32", "u16", "u8",
                 "boolean")

# --------------------------------------------------------------------------- what the user asked for


class ShapeRequest(msgspec.Struct, frozen=True, kw_only=True):
    """The specialisation options of a command: ``--input-shape`` (input names or variable ids
    to shapes, and element types), ``--seq-len`` (None: the default, not given) and ``--phase``."""

    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, str] = {}
    seq_len: int | None = None
    phase: str = "prefill"


def parse_input_shapes(specs: tuple[str, ...] | list[str]) -> dict[str, list[int]]:
    """``["x:1,3,224,224", "mask:1,128"]`` -> {"x": [1,3,224,224], ...}. Several may also be
    separated by ``;`` in one string. ``s:`` is a scalar; a ``:TYPE`` suffix is dropped here
    (see :func:`parse_request`)."""
    return {k: list(v) for k, v in _parse_specs(specs)[0].items()}


def _parse_specs(specs) -> tuple[dict[str, tuple[int, ...]], dict[str, str]]:
    shapes: dict[str, tuple[int, ...]] = {}
    types: dict[str, str] = {}
    for spec in specs:
        for part in filter(None, (s.strip() for s in spec.split(";"))):
            body, et = part, ""
            head, sep, last = part.rpartition(":")
            if sep and last.strip().lower() in ELEMENT_TYPES + ("bool",):
                body, et = head, ("boolean" if last.strip().lower() == "bool" else last.strip().lower())
            name, sep, dims = body.rpartition(":")
            if not sep or not name:
                raise InputError(f"--input-shape '{part}': expected NAME:D0,D1,...[:TYPE] "
                                 f"(e.g. x:1,3,224,224 or ids:1,128:i64; NAME: for a scalar)")
            try:
                shape = tuple(int(d) for d in dims.replace("x", ",").split(",") if d.strip())
            except ValueError:
                raise InputError(f"--input-shape '{part}': dimensions must be integers") from None
            if any(d < 0 for d in shape):
                raise InputError(f"--input-shape '{part}': dimensions must be non-negative integers")
            shapes[name] = shape
            if et:
                types[name] = et
    return shapes, types


def parse_request(specs=(), seq_len: int | None = None, phase: str | None = None) -> ShapeRequest:
    """A :class:`ShapeRequest` from the command-line options."""
    shapes, types = _parse_specs(specs)
    if seq_len is not None and seq_len < 1:
        raise InputError(f"--seq-len {seq_len}: must be at least 1")
    phase = phase or "prefill"
    if phase not in PHASES:
        raise InputError(f"--phase {phase}: expected one of {', '.join(PHASES)}")
    return ShapeRequest(shapes=shapes, types=types, seq_len=seq_len, phase=phase)


def as_request(shapes) -> ShapeRequest:
    """Accept a ShapeRequest, a ``{name: shape}`` dict (older callers) or None."""
    if shapes is None:
        return ShapeRequest()
    if isinstance(shapes, ShapeRequest):
        return shapes
    return ShapeRequest(shapes={k: tuple(int(d) for d in v) for k, v in dict(shapes).items()})


def format_input_shapes(shapes: dict[str, list[int]]) -> str:
    """The inverse of :func:`parse_input_shapes`. Scalar inputs are left out: they are static
    already, and ``NAME:`` would not parse back."""
    return ";".join(f"{k}:{','.join(map(str, v))}" for k, v in sorted(shapes.items()) if v)


# --------------------------------------------------------------------------- the specialisation


class InputSpec(msgspec.Struct, frozen=True, array_like=True):
    name: str  # the input's label (first tensor name, else its Parameter's friendly name)
    shape: tuple[int, ...]
    type: str  # element type name ("f32", "i64", ...)


class StateSpec(msgspec.Struct, frozen=True, array_like=True):
    variable: str  # variable id
    shape: tuple[int, ...]  # the state an inference starts from
    type: str


class Specialisation(msgspec.Struct, frozen=True, kw_only=True):
    """Static shapes for every input (in ``model.inputs`` order) and every state: what hdp costs.

    ``phase`` is ``prefill``/``decode`` for a stateful model, else empty; ``seq_len`` is the
    sequence length used for transformer-style inputs (0: none had a dynamic one)."""

    inputs: tuple[InputSpec, ...]
    state: tuple[StateSpec, ...] = ()
    phase: str = ""
    seq_len: int = 0

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


def _label(inp) -> str:
    return inp.get_any_name() if inp.get_names() else inp.get_node().get_friendly_name()


def _all_names(inp) -> list[str]:
    return sorted(inp.get_names()) + [inp.get_node().get_friendly_name()]


def _type_name(et) -> str:
    return et.get_type_name()


def _ov_type(name: str):
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
        have = ", ".join(sorted({_label(i) for i in model.inputs}))
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
        label, ps, et = _label(inp), inp.get_partial_shape(), inp.get_element_type()
        given = [n for n in req.shapes if index.get(n) == i]
        gtype = [req.types[n] for n in req.types if index.get(n) == i]
        role = _token_role(inp)
        problems = []
        # element type
        if gtype:
            etype = gtype[0]
            if not et.is_dynamic() and _type_name(et) != etype:
                raise InputError(f"--input-shape {label}: element type {etype}, but the input is "
                                 f"{_type_name(et)} (a type can only be given for a 'dynamic' one)")
        elif et.is_dynamic():
            etype = ("i32" if role == "beam_idx" else "i64") if role else ""
            if not etype:
                problems.append("a dynamic element type")
        else:
            etype = _type_name(et)
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
        state.append(StateSpec(vid, shape, _type_name(info.data_type)))
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
    labels = [_label(i) for i in model.inputs]
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
            p.set_element_type(_ov_type(ins.type))
        p.set_partial_shape(ov.PartialShape(list(ins.shape)))
    try:
        clone.validate_nodes_and_infer_types()
    except RuntimeError as e:
        raise InputError(f"{xml}: shapes {spec.input_shapes()} do not fit the model: {_first_line(e)}") from None
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
            zero = opset13.convert(opset13.constant(np.zeros((), np.float32)), _ov_type(s.type))
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
        raise InputError(f"{xml}: states {spec.state_shapes()} do not fit the model: {_first_line(e)}") from None
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
    return {s.variable: np.zeros(s.shape, _ov_type(s.type).to_dtype()) for s in spec.state}


def refine_for_devices(model, spec: Specialisation, xml="<model>") -> None:
    """In place: give inputs of ``dynamic`` element type or rank the specialisation's type and rank
    (dimensions left dynamic). OpenVINO devices compile neither, so the written model needs them;
    nothing else of the original changes."""
    import openvino as ov

    _check_inputs(model, spec, xml)
    changed = False
    for p, ins in zip(model.get_parameters(), spec.inputs):
        if p.get_element_type().is_dynamic():
            p.set_element_type(_ov_type(ins.type))
            changed = True
        if p.get_partial_shape().rank.is_dynamic:
            p.set_partial_shape(ov.PartialShape.dynamic(len(ins.shape)))
            changed = True
    if changed:
        try:
            model.validate_nodes_and_infer_types()
        except RuntimeError as e:
            raise InputError(f"{xml}: cannot give the inputs types/ranks {spec.input_shapes()}: {_first_line(e)}") from None

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


#: Model files hdp reads: OpenVINO IR, and ONNX (read by OpenVINO's ONNX frontend; what hdp writes
#: is always IR).
MODEL_SUFFIXES = (".xml", ".onnx")


def read_model(xml: str | os.PathLike):
    """Read and validate an OpenVINO IR (``.xml`` + ``.bin``) or an ONNX model (``.onnx``),
    returning the ``ov.Model`` as the file has it (dynamic shapes and all; see :func:`specialise`).

    Raises InputError with the file and the reason for every user mistake.
    """
    xml = Path(xml)
    if not xml.exists():
        raise InputError(f"{xml}: no such file")
    if xml.is_dir():
        raise InputError(f"{xml}: is a directory, expected an OpenVINO model.xml or an .onnx file")
    suffix = xml.suffix.lower()
    if suffix not in MODEL_SUFFIXES:
        raise InputError(f"{xml}: expected an OpenVINO IR .xml or an ONNX .onnx file")
    if not xml.is_file():
        raise InputError(f"{xml}: is not a regular file (a FIFO, socket or device); expected a model file")
    if suffix == ".onnx":
        return _read_onnx(xml)
    _check_xml(xml)
    try:
        return _core().read_model(str(xml))
    except RuntimeError as e:
        raise InputError(f"{xml}: OpenVINO cannot read the model: {_first_line(e)}") from None


def _read_onnx(path: Path):
    """An ONNX file through OpenVINO's ONNX frontend alone (``read_model`` would try every
    frontend on a file that is not ONNX, and the TensorFlow one prints parser noise)."""
    from openvino.frontend import FrontEndManager

    fe = FrontEndManager().load_by_framework("onnx")
    if not fe.supported(str(path)):
        raise InputError(f"{path}: not an ONNX model, or a truncated one (OpenVINO's ONNX frontend cannot parse it)")
    try:
        return fe.convert(fe.load(str(path)))
    except Exception as e:  # noqa: BLE001 - the frontend raises its own GeneralFailure/OpConversionFailure
        raise InputError(f"{path}: OpenVINO cannot convert this ONNX model: {_first_line(e)}") from None


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # OpenVINO messages start with a source location line; the last line has the reason
    msg = lines[-1] if lines else type(e).__name__
    return re.sub(r"^Exception from \S+:\s*", "", msg)


#: Deepest element nesting :func:`read_model` accepts. An OpenVINO IR nests a few levels (a layer's
#: rt_info, a TensorIterator's body: tens); OpenVINO's writer indents every element by its depth, so
#: a saved model grows with the square of the depth (3,000 levels in the model's rt_info: 9 MB;
#: 100,000 levels in a layer's rt_info took 100 s and 9.7 GB).
MAX_XML_DEPTH = 1000
#: The indentation OpenVINO would write for the whole document (the sum of every element's
#: depth) that :func:`read_model` accepts: many elements each nested just under the limit.
MAX_XML_INDENT = 1 << 28


class _TooDeep(Exception):
    pass


_checked: set[tuple] = set()


def _check_xml(xml: Path) -> None:
    """Catch malformed XML, nesting deeper than :data:`MAX_XML_DEPTH` and missing/short weights
    before OpenVINO, for clearer messages. One streaming pass (expat): the document is never
    held in memory as a tree. A file checked before in this process (same path, size, times,
    and the same for its .bin) is not parsed again (a second of a 20,000-op model's reads)."""
    from xml.parsers import expat

    try:
        stamp = tuple((str(p.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                      for p in (xml, xml.with_suffix(".bin")) if p.exists() for st in [p.stat()])
    except OSError:
        stamp = None
    if stamp is not None and stamp in _checked:
        return
    _check_xml_text(xml, expat)
    if stamp is not None:
        _checked.add(stamp)


def _check_xml_text(xml: Path, expat) -> None:
    parser = expat.ParserCreate()
    state = {"depth": 0, "root": None, "need": 0, "indent": 0}

    def start(tag, attrs):
        depth = state["depth"] = state["depth"] + 1
        state["indent"] += depth
        if depth == 1:
            state["root"] = tag
        elif depth > MAX_XML_DEPTH:
            raise _TooDeep(f"{xml}: element <{tag}> at line {parser.CurrentLineNumber} is nested "
                           f"{depth} levels deep, deeper than the {MAX_XML_DEPTH} hdp accepts in a model")
        elif state["indent"] > MAX_XML_INDENT:
            raise _TooDeep(f"{xml}: element <{tag}> at line {parser.CurrentLineNumber}: the elements so far are "
                           f"nested so deeply that saving the model would write over {MAX_XML_INDENT >> 20} MB "
                           f"of indentation alone; hdp refuses models nested like this")
        if tag == "data":
            off, size = attrs.get("offset"), attrs.get("size")
            if off is not None and size is not None:
                try:
                    state["need"] = max(state["need"], int(off) + int(size))
                except ValueError:
                    raise InputError(f"{xml}: constant with non-integer offset/size") from None

    def end(tag):
        state["depth"] -= 1

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        with open(xml, "rb") as f:
            parser.ParseFile(f)
    except expat.ExpatError as e:
        raise InputError(f"{xml}: malformed XML ({e})") from None
    except _TooDeep as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise InputError(f"{xml}: cannot read it ({e.strerror or e})") from None
    if state["root"] != "net":
        raise InputError(f"{xml}: not an OpenVINO IR (root element <{state['root']}>, expected <net>)")
    need = state["need"]
    if need:
        bin_path = xml.with_suffix(".bin")
        if not bin_path.exists():
            raise InputError(f"{bin_path}: weights file missing (the model needs {need} bytes)")
        have = bin_path.stat().st_size
        if have < need:
            raise InputError(f"{bin_path}: weights file is truncated ({have} bytes, the model needs {need})")


# --------------------------------------------------------------------------- op identity


class OpStructure(msgspec.Struct, frozen=True):
    """The shape of a DAG independent of names: per op its type and input count, per input (in
    op order, then port order) the producing op's position and output port."""

    types: tuple[str, ...]
    n_inputs: tuple[int, ...]
    src: tuple[int, ...]
    port: tuple[int, ...]

    def digest(self) -> str:
        return hashlib.blake2b(msgspec.msgpack.encode(self), digest_size=16).hexdigest()


def op_structure(ov_ops) -> OpStructure:
    """The :class:`OpStructure` of OpenVINO ops in ``get_ordered_ops()`` order."""
    pos = {op: i for i, op in enumerate(ov_ops)}  # ov Nodes hash and compare by identity
    types, n_in, src, port = [], [], [], []
    for op in ov_ops:
        types.append(op.get_type_name())
        ins = op.inputs()
        n_in.append(len(ins))
        for inp in ins:
            so = inp.get_source_output()
            src.append(pos.get(so.get_node(), -1))
            port.append(so.get_index())
    return OpStructure(tuple(types), tuple(n_in), tuple(src), tuple(port))


def graph_structure(graph: Graph) -> OpStructure:
    """The :class:`OpStructure` of a lowered graph (equal to its source model's)."""
    n = graph.n_ops
    indptr = graph.indptr.numpy()
    srcs = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    dst = graph.indices.numpy().astype(np.int64)
    dp = graph.dst_port.numpy()
    order = np.lexsort((dp, dst))
    return OpStructure(tuple(op.type for op in graph.ops), tuple(int(c) for c in np.bincount(dst, minlength=n)),
                     tuple(int(s) for s in srcs[order]), tuple(int(p) for p in graph.src_port.numpy()[order]))


def check_structure(ov_ops, graph: Graph, xml) -> None:
    """InputError naming the first op where ``ov_ops`` and the lowered ``graph`` differ."""
    a, b = op_structure(ov_ops), graph_structure(graph)
    if a == b:
        return
    where = _first_difference(a, b)
    what = (f"op #{where} is '{ov_ops[where].get_friendly_name()}' ({a.types[where]}), the module has "
            f"'{graph.ops[where].name}' ({b.types[where]}) with other inputs" if where < min(len(a.types), len(b.types))
            else f"{len(a.types)} ops, the module has {len(b.types)}")
    raise StaleInput(f"{xml}: model.xml changed since it was lowered ({what}); lower it again")


def _first_difference(a: OpStructure, b: OpStructure) -> int:
    ia = ib = 0
    for k in range(min(len(a.types), len(b.types))):
        na, nb = a.n_inputs[k], b.n_inputs[k]
        if a.types[k] != b.types[k] or na != nb or a.src[ia:ia + na] != b.src[ib:ib + nb] \
                or a.port[ia:ia + na] != b.port[ib:ib + nb]:
            return k
        ia, ib = ia + na, ib + nb
    return min(len(a.types), len(b.types))


def name_positions(ov_ops) -> dict[str, list[int]]:
    """Friendly name -> positions of the ops carrying it (usually one), for mapping an OpenVINO
    answer given by name (``query_model``, ``originalLayersNames``) back to op positions. Only
    meaningful for the very model object that answered."""
    out: dict[str, list[int]] = {}
    for i, op in enumerate(ov_ops):
        out.setdefault(op.get_friendly_name(), []).append(i)
    return out


def names_to_positions(names, index: dict[str, list[int]]) -> list[int]:
    """Positions of the ops named in ``names`` (unknown names are ignored)."""
    return sorted({i for n in names for i in index.get(n, ())})


def layer_names_to_positions(original: str, index: dict[str, list[int]]) -> list[int]:
    """Positions of the ops listed in a runtime node's ``originalLayersNames`` (comma separated;
    a name that itself contains commas is rejoined)."""
    parts = original.split(",") if original else []
    out, i = set(), 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            cand = ",".join(parts[i:j])
            if cand in index:
                out.update(index[cand])
                i = j
                break
        else:
            i += 1
    return sorted(out)


def supported_mask(ov_ops, supported_names) -> np.ndarray:
    """Bool per op position: whether ``query_model`` (asked about these very ops) named it."""
    mask = np.zeros(len(ov_ops), bool)
    mask[names_to_positions(supported_names, name_positions(ov_ops))] = True
    return mask


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
    from hdp.ir.openvino_legalize import fragile_ops, live_shapes, state_ties

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
    from hdp.ir.openvino_legalize import fragile_ops, live_shapes, state_ties

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
    module = lower_model(static, source=str(xml.resolve()), extra_meta=meta, fragile=fragile, ties=ties, live=live)
    check_tensor_sizes(module, xml, spec)
    return module


# --------------------------------------------------------------------------- tensor sizes


def tensor_limit() -> int:
    """The largest tensor, in bytes, hdp accepts in a specialisation: a quarter of this host's
    memory (the smaller of the physical memory and a cgroup limit). Profiling holds a copy of
    every input and output per device at once, and a plugin asked about a larger tensor ends in
    ``std::bad_alloc`` or the kernel's out-of-memory killer. ``HDP_MAX_TENSOR_BYTES`` overrides it."""
    env = os.environ.get("HDP_MAX_TENSOR_BYTES", "")
    if env:
        from hdp.cache import parse_size

        try:
            return parse_size(env)
        except ValueError:
            raise InputError(f"HDP_MAX_TENSOR_BYTES={env!r} is not a size (e.g. 4G)") from None
    return host_memory() // 4


def host_memory() -> int:
    """Bytes of memory this process may use: physical memory, or a smaller cgroup limit."""
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (OSError, ValueError):
        mem = 1 << 40
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            mem = min(mem, int(Path(f).read_text().split()[0]))
        except (OSError, ValueError, IndexError):
            continue
    return mem


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


_TYPE_SIZES: dict[str, float] = {}


def _type_size(name: str) -> float:
    if name not in _TYPE_SIZES:
        try:
            t = _ov_type(name)
            _TYPE_SIZES[name] = t.bitwidth / 8 if hasattr(t, "bitwidth") else t.size
        except (AttributeError, RuntimeError, TypeError):
            _TYPE_SIZES[name] = 1
    return _TYPE_SIZES[name]


def _too_big(what: str, shape, type_name: str, limit: int) -> str | None:
    import math

    nbytes = int(math.prod(shape) * _type_size(type_name)) if shape else 0
    if nbytes <= limit:
        return None
    k = max(range(len(shape)), key=lambda i: shape[i])
    return (f"{what} has shape [{','.join(map(str, shape))}] (dimension {k} is {shape[k]}): one {type_name} tensor "
            f"of {_gib(nbytes)}, over hdp's limit of {_gib(limit)} per tensor (a quarter of this host's memory; "
            f"HDP_MAX_TENSOR_BYTES overrides it)")


def check_input_sizes(spec: Specialisation, xml) -> None:
    """InputError naming the input (or state) and its largest dimension when one tensor of the
    specialisation is larger than :func:`tensor_limit`."""
    limit = tensor_limit()
    for i in spec.inputs:
        why = _too_big(f"input '{i.name}'", i.shape, i.type, limit)
        if why:
            raise InputError(f"{xml}: {why}")
    for st in spec.state:
        why = _too_big(f"state '{st.variable}'", st.shape, st.type, limit)
        if why:
            raise InputError(f"{xml}: {why}; give a smaller state shape with --input-shape or --seq-len")


def check_tensor_sizes(module: Module, xml, spec: Specialisation) -> None:
    """InputError naming the op when one output of the specialised model is larger than
    :func:`tensor_limit` (the inputs fit, but an op makes something much larger of them)."""
    limit = tensor_limit()
    for op in module.graph.ops:
        for shape, t in zip(op.out_shapes, op.out_types):
            why = _too_big(f"op '{op.name}' ({op.type}) at inputs {spec.input_shapes()}", shape, t, limit)
            if why:
                raise InputError(f"{xml}: {why}")


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

"""A serving plan in the IR: how a model is served, not only where each op runs (``plan.json``).

A :class:`ServingPlan` cuts a model into *stages* (each a set of tie groups: one sub-model, in a
topological order of the stages, every tensor from an earlier stage to a later one), gives every
stage one or more *replicas* (each on a device, with its streams; ``host`` is where it runs, None:
this process's host), and says which stage output feeds which stage input (:attr:`PlanStage.inputs`,
:attr:`ServingPlan.outputs`, the edges derived from them by :meth:`ServingPlan.edges`) and how many
requests in flight it was planned for. Its shape is named: ``single`` (one stage on one device,
``S`` streams), ``replicas`` (the whole model on several devices), ``pipeline`` (stages with one
replica and one stream each: what HETERO runs from a placed model) and ``mixed`` (a pipeline with
a replicated or multi-stream stage).

On disk a plan is a directory: ``plan.json`` and, for every stage and every device one of its
replicas runs on, the compiled stage (``stage<i>.<device>.blob``, :class:`PlanBlob`: its size and
digest; imported with ``core.import_model`` on the OpenVINO version that wrote it). A pipeline's
directory holds ``placed.xml`` (today's placed model, :attr:`ServingPlan.placed`) instead of blobs.
The plan records every device it needs (:class:`PlanDevice`: what an importer registers and
configures). Nothing here imports openvino or names a placement rule: writing and running a plan
is :mod:`hdp.runtime.serve.plan_write` and :mod:`hdp.runtime.serve.plan_run`.

The format is versioned (``format``, ``version``); :func:`read_plan` refuses another, and every
error is one line naming the file and the field (``plan.json: stages[1].replicas[0].streams: must
be an integer >= 1, got 0``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import msgspec
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import convert

PLAN_FORMAT = "hdp-plan"
PLAN_VERSION = 1
PLAN_FILE = "plan.json"
Shape = Literal["single", "replicas", "pipeline", "mixed"]
_NAME = r"^[A-Za-z0-9_.\-]{1,64}$"
DeviceName = Annotated[str, Meta(pattern=_NAME, description="1 to 64 letters, digits, '_', '.', '-'")]
FileName = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.\-]{1,200}$", description="a file name in the plan's directory")]


class PlanReplica(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One copy of a stage: its device, its streams, and the host it runs on (None: this one)."""

    device: DeviceName
    streams: Annotated[int, Meta(ge=1, le=64)] = 1
    host: str | None = None


class PlanBlob(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A stage compiled for one device: the file beside ``plan.json``, its size and digest."""

    device: DeviceName
    file: FileName
    bytes: Annotated[int, Meta(ge=0)]
    digest: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")]


class PlanPort(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Where a stage input (or a model output) comes from: the model's input ``index``
    (``source="input"``), or output ``output`` of stage ``index`` (``source="stage"``)."""

    source: Literal["input", "stage"]
    index: Annotated[int, Meta(ge=0)]
    output: Annotated[int, Meta(ge=0)] = 0


class PlanStage(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One stage: its tie groups (of hdp's placement structure of the model), its ops, replicas,
    inputs (in the sub-model's input order), its outputs' names and the compiled blobs."""

    groups: list[Annotated[int, Meta(ge=0)]] = []
    ops: Annotated[int, Meta(ge=0)] = 0
    replicas: Annotated[list[PlanReplica], Meta(min_length=1)]
    inputs: list[PlanPort] = []
    outputs: list[str] = []
    blobs: list[PlanBlob] = []

    def blob(self, device: str) -> PlanBlob | None:
        return next((b for b in self.blobs if b.device == device), None)


class PlanDevice(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A device the plan runs on, as an importer must provide it (see :mod:`hdp.runtime.serve.blob`)."""

    name: DeviceName
    plugin: str
    alias: bool = False
    library: str = ""
    config: dict[str, str] = {}


class PlanSimulated(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the planner's model said of the plan: seconds per request, one request's latency, the
    proven lower bound of the space searched and the gap, what bounds the period."""

    period: Annotated[float, Meta(ge=0)]
    latency: Annotated[float, Meta(ge=0)] = 0.0
    bound: Annotated[float, Meta(ge=0)] = 0.0
    gap: float | None = None
    bound_by: str = ""
    exact: bool = False


class ServingPlan(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """See the module docstring."""

    format: Literal["hdp-plan"] = PLAN_FORMAT
    version: Literal[1] = PLAN_VERSION
    shape: Shape
    requests: Annotated[int, Meta(ge=1, le=4096, description="requests in flight, at least 1")]
    stages: Annotated[list[PlanStage], Meta(min_length=1)]
    outputs: list[PlanPort] = []
    devices: list[PlanDevice] = []
    placed: str = ""  # a pipeline: the placed model beside plan.json that HETERO runs
    model: str = ""  # the model it was planned from
    target: str = ""
    method: str = ""
    openvino: str = ""  # the version that compiled the blobs (an import needs the same)
    specialisation: str = ""  # JSON: the input (and state) shapes it was planned for
    inputs: list[str] = []  # name type[shape], for people
    output_names: list[str] = []
    simulated: PlanSimulated | None = None
    notes: list[str] = []  # what writing it found (what AUTO would run instead, ...)

    def edges(self) -> list[tuple[int, int, int]]:
        """(producer stage, consumer stage, tensors) of every pair of stages one feeds the other."""
        count: dict[tuple[int, int], int] = {}
        for s, st in enumerate(self.stages):
            for p in st.inputs:
                if p.source == "stage":
                    count[(p.index, s)] = count.get((p.index, s), 0) + 1
        return [(a, b, n) for (a, b), n in sorted(count.items())]

    def device_names(self) -> list[str]:
        """Every device a replica runs on, in first-use order."""
        return list(dict.fromkeys(r.device for st in self.stages for r in st.replicas))

    def describe(self) -> str:
        """``CPU x2 | GPU.0+GPU.1``: each stage's replicas (``xS``: streams), stages left to right."""
        return " | ".join("+".join(r.device + (f" x{r.streams}" if r.streams > 1 else "") for r in st.replicas)
                          for st in self.stages)


def plan_shape(stages) -> str:
    """The shape a list of stages (each with ``replicas``) has (see the module docstring)."""
    if len(stages) == 1:
        return "single" if len(stages[0].replicas) == 1 else "replicas"
    if all(len(s.replicas) == 1 and s.replicas[0].streams == 1 for s in stages):
        return "pipeline"
    return "mixed"


def check_plan(plan: ServingPlan, source: str) -> ServingPlan:
    """The rules between fields (the bounds of each are declared): the shape matches the stages, a
    stage reads the model's inputs or earlier stages' outputs only, every port exists, every device
    is described once, and (but for a pipeline written as a placed model) every device of a
    stage's replicas has its blob. InputError naming the field."""
    where = f"{source}:"
    want = plan_shape(plan.stages)
    if plan.shape != want:
        raise InputError(f"{where} shape: '{plan.shape}' does not match its stages (a {want} plan)")
    names = [d.name for d in plan.devices]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise InputError(f"{where} devices[{i}].name: '{n}' described twice")
    for s, st in enumerate(plan.stages):
        for j, r in enumerate(st.replicas):
            if r.device not in names:
                raise InputError(f"{where} stages[{s}].replicas[{j}].device: '{r.device}' is not in the plan's devices "
                                 f"({', '.join(names) or 'none'})")
        seen = [r.device for r in st.replicas if r.host is None]
        for j, d in enumerate(seen):
            if d in seen[:j]:
                raise InputError(f"{where} stages[{s}].replicas[{j}].device: '{d}' holds this stage twice "
                                 f"(give it streams instead)")
        for j, port in enumerate(st.inputs):
            if port.source == "stage" and port.index >= s:
                raise InputError(f"{where} stages[{s}].inputs[{j}].index: stage {port.index} is not before stage {s}")
            if port.source == "stage" and port.output >= len(plan.stages[port.index].outputs):
                raise InputError(f"{where} stages[{s}].inputs[{j}].output: stage {port.index} has "
                                 f"{len(plan.stages[port.index].outputs)} outputs")
        if not plan.placed:
            for j, r in enumerate(st.replicas):
                if st.blob(r.device) is None:
                    raise InputError(f"{where} stages[{s}].blobs: no blob for device '{r.device}' "
                                     f"(replicas[{j}])")
    for j, port in enumerate(plan.outputs):
        if port.source == "stage" and (port.index >= len(plan.stages)
                                       or port.output >= len(plan.stages[port.index].outputs)):
            raise InputError(f"{where} outputs[{j}]: no output {port.output} of stage {port.index}")
    if plan.shape == "pipeline" and not plan.placed and any(not s.blobs for s in plan.stages):
        raise InputError(f"{where} placed: a pipeline plan names its placed model or has a blob per stage")
    return plan


def _message(source: str):
    return lambda path, what: f"{source}: {path}: {what}" if path else f"{source}: {what}"


def plan_file(path: str | os.PathLike) -> Path:
    """``plan.json`` of a plan given as the file or its directory."""
    p = Path(path)
    return p / PLAN_FILE if p.is_dir() else p


def read_plan(path: str | os.PathLike) -> ServingPlan:
    """The plan in ``path`` (``plan.json`` or its directory), checked (:func:`check_plan`);
    InputError naming the file and the field otherwise."""
    f = plan_file(path)
    try:
        data = f.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{f}: no such file") from None
    except OSError as e:
        raise InputError(f"{f}: cannot read it ({e.strerror or e})") from None
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as e:
        raise InputError(f"{f}: not JSON ({e})") from None
    if not isinstance(raw, dict) or raw.get("format") != PLAN_FORMAT:
        got = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise InputError(f"{f}: format: not an hdp serving plan (format {got!r}, expected {PLAN_FORMAT!r})")
    if raw.get("version") != PLAN_VERSION:
        raise InputError(f"{f}: version: an hdp plan of version {raw.get('version')!r}, this hdp reads version "
                         f"{PLAN_VERSION}")
    return check_plan(convert(raw, ServingPlan, _message(str(f))), str(f))


def encode_plan(plan: ServingPlan) -> bytes:
    """``plan.json``'s bytes (indented, a newline at the end)."""
    return msgspec.json.format(msgspec.json.encode(plan), indent=2) + b"\n"


def is_plan_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a plan (a ``plan.json``, a ``.json`` holding one, or a directory with one)."""
    p = Path(path)
    if p.is_dir():
        return (p / PLAN_FILE).is_file()
    if p.suffix.lower() != ".json" or not p.is_file():
        return False
    try:
        with open(p, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return b'"hdp-plan"' in head

"""The messages between a measuring worker (:mod:`hdp.runtime.measure.worker`) and its client
(:mod:`hdp.runtime.measure.worker_client`): typed requests and replies.

Every message is a msgspec Struct encoded as msgpack and framed by its length (4 bytes,
little-endian): requests on the worker's stdin, replies on a duplicate of its original stdout (the
worker points fd 1 at stderr so that anything a plugin prints cannot corrupt the protocol). The
``op`` field tags each message, so a :data:`Request` and a :data:`Reply` decode to their classes
in one step. Each request has one reply, in order; any request may be answered by :class:`Failed`.

========================  =========================  ==============================================================
request                   reply                      what the worker does
========================  =========================  ==============================================================
:class:`Load`             :class:`Loaded`            read (or take the preloaded) model and hold it
:class:`Preload`          :class:`Done`              read and specialise a model ahead of its ``Load``
:class:`Query`            :class:`Supported`         whole-model ``query_model`` on each device, in parallel threads
:class:`Signatures`       :class:`SignatureTable`    each op's signature (:mod:`hdp.runtime.measure.query`)
:class:`QuerySignatures`  :class:`SignatureAnswers`  ``query_model`` per signature, on small cut-out models
:class:`Measure`          :class:`Timed`             compile a placement with HETERO and time ``runs`` runs
:class:`Unplaced`            :class:`Timed`             compile the unplaced model on one device and time it
:class:`Profile`          :class:`Profiled`          per-node counters of the unplaced model on each device
:class:`Prepare`          :class:`Prepared`          compile and warm up a head-to-head candidate; keep it
:class:`Rounds`           :class:`RoundTimes`        run prepared candidates in interleaved rounds
:class:`Release`          :class:`Done`              drop prepared candidates
:class:`Check`            :class:`Checked`           run a placement against the original on plain CPU
:class:`Blob`             :class:`Timed`             import an exported placement and time it (no ``Load``)
========================  =========================  ==============================================================

Ops are identified by their position in the loaded model's ``get_ordered_ops()``; a placement is
a :class:`Placement` (device names and an int16 index into them per op position).
"""

from __future__ import annotations

import struct
from typing import Literal, Union

import msgspec

from hdp.ir.shapes import ShapeRequest
from hdp.target.target import Target

#: Test hook: ``crash`` (SIGSEGV), ``hang`` or ``raise`` in every request that compiles or queries
#: (see :mod:`hdp.runtime.measure.worker`) of a worker started with it.
FAULT_ENV = "HDP_MEASURE_FAULT"
#: The client's pid, for the worker to die with it.
PARENT_ENV = "HDP_WORKER_PARENT"


class _Message(msgspec.Struct, frozen=True, kw_only=True, tag_field="op", forbid_unknown_fields=True):
    pass


#: How a placement runs: under HETERO, one subgraph after another, or by hdp's concurrent executor
#: (:mod:`hdp.runtime.placed.executor`), every device at once.
Execution = Literal["sequential", "concurrent"]


class Placement(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A device per op position: ``devices[device_of[i]]`` (``device_of``: int16 bytes)."""

    devices: list[str]
    device_of: bytes


# --------------------------------------------------------------------------- requests


class Load(_Message, tag="load"):
    """Read ``xml`` and hold it for the requests that follow.

    ``spec``: the JSON :class:`~hdp.ir.specialise.Specialisation` to run at (empty: the one
    a placed model records, else the frontend's defaults); ``structure``: the digest of the
    caller's :func:`~hdp.ir.op_identity.graph_structure` (None: not checked); ``roles``: int8
    per op (:func:`hdp.placement.structure.roles`), with which a placement over several devices is
    legalized as the backend does. Support queries and profiles compile the runnable
    specialisation (static inputs); measurements and checks compile the model as hdp writes it
    (the file's own graph, dynamic shapes kept), every inference fed the specialisation's inputs
    (and a stateful model's states, set before each one): a placement is timed as it was checked
    and written."""

    xml: str
    target: Target
    spec: str = ""
    structure: str | None = None
    roles: bytes | None = None


class Preload(_Message, tag="preload"):
    """Read and specialise ``xml`` for ``request`` as lowering will, sent ahead (the client does not
    wait), so that the next ``Load`` of that file at that specialisation takes it from here."""

    xml: str
    request: ShapeRequest | None = None


class Query(_Message, tag="query"):
    """OpenVINO's ``query_model`` of the loaded model on each device, the devices in parallel
    threads. It runs in the worker because a plugin answering it may allocate whatever the model's
    shapes ask for (``std::bad_alloc``) or crash."""

    devices: list[str]


class Signatures(_Message, tag="signatures"):
    """Each op's signature in the loaded model (:mod:`hdp.runtime.measure.query`): whole-model
    ``query_model`` is superlinear in the model, so the support pass asks per op signature."""


class QuerySignatures(_Message, tag="query_signatures"):
    """Each device's ``query_model`` answer about the signatures listed for it in ``ask``
    ({device: [signature index, ...]}), on small models cut out of the loaded one, the devices in
    parallel threads."""

    ask: dict[str, list[int]]


class Measure(_Message, tag="measure"):
    """Compile ``placement`` with HETERO over the devices it uses; ``runs`` timed runs after
    ``warmup``."""

    placement: Placement
    runs: int
    warmup: int
    execution: Execution = "sequential"


class Unplaced(_Message, tag="unplaced"):
    """Compile the unplaced model (as written) on ``device``; ``runs`` timed runs after ``warmup``."""

    device: str
    runs: int
    warmup: int


class Profile(_Message, tag="profile"):
    """Each device compiles the unplaced model with ``PERF_COUNT`` and runs ``warmup`` times (at
    least 1), the devices in parallel threads (nothing is timed yet); then the timed runs go in
    rounds, one run per device per round in alternating order: ``min_runs`` rounds, then more
    while another round (as long as the last) keeps the timed runs within ``seconds`` (0: no
    budget), at most ``runs`` rounds."""

    devices: list[str]
    runs: int
    warmup: int
    seconds: float = 0.0
    min_runs: int = 1
    #: a model of more than ``whole_max`` ops is profiled in chunks of ``chunk`` ops
    #: (:mod:`hdp.runtime.measure.chunks`; 0: always whole)
    chunk: int = 0
    whole_max: int = 0


class Prepare(_Message, tag="prepare"):
    """Compile one head-to-head candidate, create an infer request with the inputs set, run the
    warm-up, and keep both until released. Exactly one of ``unplaced_on`` (a device: the unplaced
    model), ``placement`` (as for :class:`Measure`) or ``xml`` (a placed model file of the loaded
    model: the same inputs, compiled as the file has it)."""

    unplaced_on: str | None = None
    placement: Placement | None = None
    xml: str | None = None
    warmup: int = 0
    execution: Execution = "sequential"  # of a placement or a file
    #: with ``unplaced_on``: compile on a Core of OpenVINO's own defaults (no target config, no
    #: aliases), with ``config`` only: the host's default plain compile
    defaults: bool = False
    config: dict[str, str] = {}
    #: with ``xml``: compile it on this target's devices, not the loaded one's (``hdp evaluate
    #: --across-targets``: each file on the target it was placed for)
    target: Target | None = None


class Rounds(_Message, tag="rounds"):
    """Run prepared candidates: one round per entry of ``orders`` (positions into ``handles``, in
    the order they run)."""

    handles: list[int]
    orders: list[list[int]]


class Release(_Message, tag="release"):
    """Free prepared candidates (unknown handles are ignored)."""

    handles: list[int] = []


class Check(_Message, tag="check"):
    """Compile a placement as hdp writes it (``placement``, legalized on a copy of the original,
    dynamic shapes kept; or the placed model file ``xml``) with HETERO, run every check run
    (:func:`hdp.ir.specialise.check_runs`) and compare each output with the original on the
    plain CPU plugin in f32. ``rename`` maps device names to the devices that stand in for them
    (modeled devices run on CPU instances). When the largest error is above ``tolerance`` (the
    caller's base tolerance), the reply also gives each used device's own error running the
    original alone (``device_errors``), which the caller may hold the placement to instead."""

    placement: Placement | None = None
    xml: str | None = None
    rename: dict[str, str] = {}
    execution: Execution = "sequential"
    tolerance: float = 0.0


class Blob(_Message, tag="blob"):
    """Import an exported placement (:mod:`hdp.runtime.serve.blob`; no model loaded first) as an OpenVINO
    application would, its devices registered and configured from ``target``, and time ``runs``
    inferences after ``warmup`` on seeded inputs at the shapes of ``spec`` (from its record)."""

    blob: str
    device: str
    target: Target
    runs: int
    warmup: int
    spec: str = ""


class Serve(_Message, tag="serve"):
    """Throughput: compile ``placement`` with HETERO over the devices it uses (or, with ``unplaced_on``,
    the unplaced model on that device with ``unplaced_config``) and keep ``requests`` inferences in
    flight (an ``AsyncInferQueue``): ``warmup`` × ``requests`` inferences, then ``batches`` windows
    of ``per_batch`` inferences each (0: as many as take about a quarter second, judged by the
    warm-up), each timed in steady state: between completions, with ``requests`` in flight, the
    pipeline's fill and drain left out (``Worker._serving``). A CPU-plugin device the target
    pins (``ENABLE_CPU_PINNING=YES``) is compiled unpinned here: the plugin pins one-thread
    instances to one and the same core, which would serialise the pipeline's stages.

    ``plain_on`` (with a ``placement``): also that device's plain compile with ``plain_config``,
    compiled first, the windows of the two alternating (ABBA), so that both see the same host."""

    requests: int
    batches: int
    per_batch: int
    warmup: int
    placement: Placement | None = None
    unplaced_on: str | None = None
    unplaced_config: dict[str, str] = {}
    plain_on: str | None = None
    plain_config: dict[str, str] = {}
    #: the plain compile (``unplaced_on`` or ``plain_on``) on a Core of OpenVINO's own defaults
    #: with its config only (the host's default plain compile), not the target's device
    plain_defaults: bool = False


Request = Union[Load, Preload, Query, Signatures, QuerySignatures, Measure, Unplaced, Profile, Prepare, Rounds, Release,
                Check, Blob, Serve]


# --------------------------------------------------------------------------- replies


class Failed(_Message, tag="failed"):
    """The request failed: ``input`` when it is the user's mistake (a device this host lacks, a
    model that changed since lowering: then also ``stale``, see :func:`hdp.base.errors.is_stale`), else
    a failure of the compile, run or query (one error sample; an allocation failure names the
    input shapes that asked for the memory). ``device``: the device whose query failed, if one
    did."""

    error: str
    input: bool = False
    stale: bool = False
    device: str = ""


class Done(_Message, tag="done"):
    """The request was carried out; nothing to report."""


class Loaded(_Message, tag="loaded"):
    """The loaded model: ``n_ops``, each op's unique ``names`` and recorded ``affinity`` ("" if
    none), the ``spec`` it runs at, and whether it came from a ``Preload`` (``read_ahead``)."""

    n_ops: int
    names: list[str]
    affinity: list[str]
    spec: str
    read_ahead: bool = False


class Supported(_Message, tag="supported"):
    """Per device, whether ``query_model`` supports each op position."""

    supported: dict[str, list[bool]]


class SignatureTable(_Message, tag="signature_table"):
    """``sig_of``: int32 bytes, one per op position: an index into ``digests`` (hex), -1 for
    Parameter/Constant/Result, -2 for an op asked in its model."""

    sig_of: bytes
    digests: list[str]


class SignatureAnswers(_Message, tag="signature_answers"):
    """Per device: ``answers`` ([signature index, supported] pairs; an op asked in its model under
    ``-(position + 1)``), ``in_context`` (signature indices answered by the whole model, not to be
    memoised), ``queries`` (``query_model`` calls made); ``seconds`` of the whole request."""

    answers: dict[str, list[tuple[int, bool]]]
    in_context: dict[str, list[int]]
    queries: dict[str, int]
    seconds: float


class Timed(_Message, tag="timed"):
    """Seconds of each timed run, of the compile (of the import, for a blob), and HETERO's
    ``HETERO_NUMBER_OF_SUBMODELS`` (0: a plain compile, or not known)."""

    times: list[float]
    compile_seconds: float
    submodels: int = 0


class RuntimeNode(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A node of a device's compiled (runtime) graph: ``original`` is its ``originalLayersNames``,
    ``ops`` the positions of those ops (mapped where the names are those of the model compiled),
    ``preds`` node indices; ``avg_warm``/``avg_all`` the ``PERF_COUNT`` counter (a running average
    over every inference since compile) read after the warm-up and after the timed runs;
    ``avg_runs`` the same counter read after the warm-up and after every timed run (for per-run
    times); ``executed`` false for fused/in-place nodes."""

    name: str
    type: str
    exec_type: str
    original: str
    ops: list[int]
    preds: list[int]
    avg_warm: float
    avg_all: float
    avg_runs: list[float]
    executed: bool


class DeviceProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One device's profile: run ``times``, their ``starts`` (seconds after the warm-ups),
    ``compile_seconds``, the warm-up runs, the runtime graph's ``nodes``, and ``properties``: what
    its compiled model says it runs with (``INFERENCE_PRECISION_HINT``, ``INFERENCE_NUM_THREADS``,
    ``NUM_STREAMS`` ... and the plugin's ``FULL_DEVICE_NAME``), to tell devices of one kind apart
    from devices that differ."""

    device: str
    times: list[float]
    starts: list[float]
    compile_seconds: float
    warmup: int
    nodes: list[RuntimeNode]
    properties: dict[str, str] = {}
    chunks: int = 0  # the chunks it was profiled in (0: whole)
    measured_chunks: int = 0  # ... of which compiled and timed (the others are repeats)


class ProfileSeconds(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Wall time of a profile's stages: the compiles and warm-ups, the timed rounds, reading the
    runtime graphs, and running the check's inferences on the compiled devices (``outputs``: kept
    for a later :class:`Check` of the same loaded model, which then compiles no reference of its
    own; 0 when the model is not one they serve, see :meth:`hdp.runtime.measure.worker.Worker.profile`)."""

    prepare: float
    timed: float
    nodes: float
    outputs: float = 0.0


class Profiled(_Message, tag="profiled"):
    """One entry per device, in the order asked."""

    devices: list[DeviceProfile]
    seconds: ProfileSeconds


class Prepared(_Message, tag="prepared"):
    """A handle for :class:`Rounds` and :class:`Release`; ``submodels`` 0 for a plain compile;
    ``properties``: what a default plain compile chose (precision, threads, streams, hint)."""

    handle: int
    compile_seconds: float
    submodels: int = 0
    properties: dict[str, str] = {}


class RoundTimes(_Message, tag="round_times"):
    """Per round, one time per handle (in ``handles`` order); over the request, the host's busy
    CPU seconds (``busy``, summed over its cores, from ``/proc/stat``; -1: unknown), the worker's
    own (``own``) and the ``wall`` seconds: what other processes did meanwhile."""

    times: list[list[float]]
    busy: float = -1.0
    own: float = 0.0
    wall: float = 0.0


class Checked(_Message, tag="checked"):
    """The check's verdict: ``passed`` and ``error`` (the HETERO compile or run failed, or an output
    has another shape), or ``max_error`` (relative L2 against the original on plain CPU f32) at
    ``where``, over ``runs`` runs on ``devices``; ``stateful`` for a model with states;
    ``device_errors`` (when ``max_error`` is above the request's ``tolerance``): the same error of
    the original on each used device alone."""

    passed: bool
    error: str = ""
    max_error: float = 0.0
    where: str = ""
    devices: list[str] = []
    runs: int = 0
    stateful: bool = False
    seconds: float = 0.0
    device_errors: dict[str, float] = {}


class Served(_Message, tag="served"):
    """Inferences per second of each window of a :class:`Serve`, the compile seconds and HETERO's
    number of submodels (0: a plain compile)."""

    rates: list[float]
    compile_seconds: float
    submodels: int = 0
    per_batch: int = 0
    plain_rates: list[float] = []  # of ``Serve.plain_on``, window by window beside ``rates``
    plain_per_batch: int = 0
    plain_compile_seconds: float = 0.0
    pinning: str = ""  # how a placement's CPU devices ran: "unpinned" (the target pins them) or ""
    busy: float = -1.0  # over the windows, as in RoundTimes
    own: float = 0.0
    wall: float = 0.0
    plain_properties: dict[str, str] = {}  # what a default plain compile beside it chose


Reply = Union[Failed, Done, Loaded, Supported, SignatureTable, SignatureAnswers, Timed, Profiled, Prepared, RoundTimes,
              Checked, Served]

#: The reply each request type gets (or :class:`Failed`).
REPLY_TO: dict[type, type] = {Load: Loaded, Preload: Done, Query: Supported, Signatures: SignatureTable,
                              QuerySignatures: SignatureAnswers, Measure: Timed, Unplaced: Timed,
                              Profile: Profiled, Prepare: Prepared, Rounds: RoundTimes, Release: Done,
                              Check: Checked, Blob: Timed, Serve: Served}


def op_of(msg) -> str:
    """A message's tag (its ``op``)."""
    return msg.__struct_config__.tag


# --------------------------------------------------------------------------- framing

_HEAD = struct.Struct("<I")
_ENCODER = msgspec.msgpack.Encoder()
_REQUESTS = msgspec.msgpack.Decoder(Request)
_REPLIES = msgspec.msgpack.Decoder(Reply)


def encode(msg) -> bytes:
    """A message's msgpack bytes (unframed)."""
    return _ENCODER.encode(msg)


def frame(data: bytes) -> bytes:
    """``data`` preceded by its length."""
    return _HEAD.pack(len(data)) + data


def write_msg(f, msg) -> None:
    """Encode and frame ``msg`` onto the binary stream ``f`` and flush it."""
    f.write(frame(encode(msg)))
    f.flush()


def frame_length(head: bytes) -> int:
    """The payload length a frame's first 4 bytes announce."""
    return _HEAD.unpack(head[:4])[0]


def read_frame(f) -> bytes | None:
    """One frame's payload from a binary stream, or None at the end of the stream."""
    head = f.read(4)
    if len(head) < 4:
        return None
    n = frame_length(head)
    data = f.read(n)
    return data if len(data) == n else None


def decode_request(data: bytes) -> Request:
    """A request from its bytes; raises msgspec.DecodeError/ValidationError if it is none."""
    return _REQUESTS.decode(data)


def decode_reply(data: bytes) -> Reply:
    """A reply from its bytes; raises msgspec.DecodeError/ValidationError if it is none."""
    return _REPLIES.decode(data)

"""The measuring process: ``python -m hdp.runtime.measure.worker``.

:mod:`hdp.runtime.measure.worker_client` starts one of these per model and sends it requests; a compile
that crashes (segfault), hangs or raises costs one error sample, not the caller's process. The
messages are the typed requests and replies of :mod:`hdp.runtime.measure.protocol` (what each request does
is documented there); :class:`Worker` holds the loaded model and answers each request with the
handler its type maps to (:data:`HANDLERS`). Any exception in a handler becomes a
:class:`~hdp.runtime.measure.protocol.Failed` reply: ``input`` for an :class:`~hdp.base.errors.InputError`
(the user's mistake, such as a device absent from this host), else a failure sample.

The worker dies with its parent: on Linux it asks the kernel for SIGKILL when the parent goes
(``prctl(PR_SET_PDEATHSIG)``), and on every platform a watchdog thread exits the process as soon as
its parent process id changes (the parent's pid is passed in ``HDP_WORKER_PARENT``), so a worker
stuck in a device compile never outlives a killed ``hdp``.

Test hook: ``HDP_MEASURE_FAULT`` = ``crash`` (SIGSEGV), ``hang`` or ``raise``, applied to every
request that compiles or queries (all but ``Load``, ``Preload``, ``Rounds`` and ``Release``: see
:data:`HANDLERS`) of a worker started with it.

This module is over 600 lines because one class holds the loaded model (its specialisation, the
model as written, the compiled candidates, the check's reference outputs) and every handler reads
that state; the module-level helpers below it are what the handlers share.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable

import msgspec
import numpy as np

from hdp.base.errors import InputError, StaleInput, is_stale
from hdp.ir import op_identity as oi
from hdp.ir import openvino_read as ovr
from hdp.ir import specialise as sp
from hdp.ir.op_identity import layer_names_to_positions, most_name_parts, supported_mask
from hdp.ir.openvino_legalize import legalize
from hdp.placement.structure import PLACED
from hdp.runtime.measure import chunks, query
from hdp.runtime.measure import protocol as P
from hdp.runtime.measure.chunks import chunk_times, op_name, spread_nodes
from hdp.runtime.measure.load import Sampler
from hdp.runtime.measure.protocol import FAULT_ENV, PARENT_ENV
from hdp.runtime.placed.executor import compile_concurrent
from hdp.runtime.placed.model import restore_affinity
from hdp.target.devices import hetero_config, hetero_name, make_core

_PR_SET_PDEATHSIG = 1


def ov_message(e: BaseException) -> str:
    """The reason line of an OpenVINO exception (its first lines are source locations)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    msg = lines[-1] if lines else type(e).__name__
    return re.sub(r"^(Exception from \S+:\s*|\[ GENERAL_ERROR \]\s*)", "", msg)


def _in_thread(fn, name: str):
    """Start ``fn()`` in a thread; returns a function that waits for it and gives its result (or
    raises its exception). The check compiles the original for reference while it compiles the
    placement: both are the plugins' own work, outside the GIL, 10+ s each on a 20,000-op model.

    pybind11 initialises its numpy bridge on first use under a lock that two threads reaching it
    at once can deadlock on (seen: both threads in ``Type.to_dtype``); it is initialised here,
    in the calling thread, before the other starts."""

    import openvino as ov

    np.asarray(ov.Tensor(np.zeros(1, np.float32)).data)
    ov.Type.f32.to_dtype()
    box: dict = {}

    def run() -> None:
        try:
            box["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised in the waiting thread
            box["error"] = e

    t = threading.Thread(target=run, name=name, daemon=True)
    t.start()

    def wait():
        t.join()
        if "error" in box:
            raise box["error"]
        return box["result"]

    return wait


def random_inputs(model, seed: int = 0, shapes=None) -> list:
    """Fixed random data of each input's element type and (static) shape, or of ``shapes`` (one
    per input) for a dynamic model (an ``attention_mask`` of ones and a ``beam_idx`` that keeps
    every beam, as a generation loop feeds them)."""

    rng = np.random.default_rng(seed)
    out = []
    for i, inp in enumerate(model.inputs):
        shape = [int(d) for d in (inp.get_shape() if shapes is None else shapes[i])]
        et = inp.get_element_type()
        dtype = et.to_dtype()
        names = inp.get_names()
        if "beam_idx" in names and len(shape) == 1:
            a = np.arange(shape[0]).astype(dtype)
        elif "attention_mask" in names:
            a = np.ones(shape, dtype)
        elif et.is_real():
            a = rng.standard_normal(shape).astype(dtype)
        elif dtype == np.bool_:
            a = rng.integers(0, 2, shape).astype(np.bool_)
        else:  # small integers stay valid as indices, token ids and masks
            a = rng.integers(0, 2, shape).astype(dtype)
        out.append(a)
    return out


def _fault() -> None:
    fault = os.environ.get(FAULT_ENV, "")
    if fault == "crash":
        ctypes.string_at(0)  # SIGSEGV, as a crashing plugin would
    elif fault == "hang":
        time.sleep(1e6)
    elif fault == "raise":
        raise RuntimeError("injected fault (HDP_MEASURE_FAULT=raise)")


def steady_window(queue, requests: int, per_batch: int, done: list[float]):
    """A callable running one window on ``queue`` (an ``AsyncInferQueue`` whose callback appends
    each completion's ``time.perf_counter()`` to ``done``) and returning its rate in steady state:
    ``per_batch + 2 * requests`` inferences are submitted and the ``per_batch`` completions after the
    first ``requests`` are timed between completions (see :meth:`Worker._serving`)."""

    def window() -> float:
        done.clear()
        for _ in range(per_batch + 2 * requests):
            queue.start_async()
        queue.wait_all()
        stamps = sorted(done)[requests:requests + per_batch + 1]
        return per_batch / max(stamps[-1] - stamps[0], 1e-12)
    return window


class Worker:
    """Holds one model and answers requests about it."""

    def __init__(self):
        self.model = None  # the runnable specialisation: queried, profiled, the inputs' shapes
        self._as_written = None  # the original as hdp writes it: measured (see _written)
        self.ops = []  # its ops; an op's id is its position here
        self.index: dict[str, list[int]] = {}  # friendly name -> positions, for plugin answers
        self.states: dict = {}  # variable id -> the state each inference starts from
        self.target = None
        self.cores: dict[tuple[str, ...], object] = {}
        self._default_core = None  # OpenVINO's defaults, no target config (default_core)
        self.preloaded: dict[tuple, tuple] = {}  # read ahead by ``preload``, for the next ``load``
        self.inputs = []
        self.prepared: dict[int, tuple[object, object]] = {}  # handle -> (compiled model, infer request)
        self._next_handle = 0
        self.sigs = None  # (Signatures, input feeds) of the loaded model, made by ``signatures``
        self._static = None  # a stateful model at static shapes (see _static_model)

    def handle(self, req: P.Request) -> P.Reply:
        """The reply to ``req``: its handler's (:data:`HANDLERS`), or :class:`~hdp.runtime.measure.protocol.Failed`."""

        try:
            route = HANDLERS[type(req)]
            if route.needs_model and self.model is None:
                raise InputError("worker: no model loaded")
            if route.faulty:
                _fault()
            return route.handler(self, req)
        except InputError as e:
            return P.Failed(error=str(e), input=True, stale=is_stale(e))
        except Exception as e:  # noqa: BLE001 - every failure becomes an error sample
            return P.Failed(error=self._explain(f"{type(e).__name__}: {ov_message(e)}"))

    def _explain(self, message: str) -> str:
        """``message``, and for an allocation failure the shapes that asked for the memory."""
        spec = getattr(self, "spec", None)
        if "bad_alloc" in message and spec is not None:
            return f"{message} (out of memory at the inputs {spec.input_shapes()})"
        return message

    @staticmethod
    def _read_key(xml: str, spec: str) -> tuple | None:
        try:
            st = os.stat(xml)
        except OSError:  # gone: the load reads it and says so
            return None
        return os.path.realpath(xml), st.st_mtime_ns, st.st_size, spec

    def preload(self, req: P.Preload) -> P.Done:
        """Read and specialise ``xml`` for ``request`` (a ShapeRequest, as lowering does) ahead of
        its ``load``, which then takes it from here (matched by file and specialisation)."""

        xml = req.xml
        original = ovr.read_model(xml)
        spec = sp.plan_specialisation(original, xml, req.request)
        text = spec.to_json()
        self.preloaded = {self._read_key(xml, text): (original, sp.specialise(original, spec, xml, runnable=True))}
        return P.Done()

    def load(self, req: P.Load) -> P.Loaded:
        self.target = req.target
        xml = req.xml
        text = req.spec
        ahead = self.preloaded.pop(self._read_key(xml, text), None) if text and self.preloaded else None
        self.preloaded = {}
        if ahead is not None:
            original, self.model = ahead
            spec = sp.Specialisation.from_json(text, xml)
        else:
            original = ovr.read_model(xml)
            text = text or _recorded_spec(original)
            spec = sp.Specialisation.from_json(text, xml) if text else sp.plan_specialisation(original, xml)
            self.model = sp.specialise(original, spec, xml, runnable=True)
        self.ops = list(self.model.get_ordered_ops())
        self.original, self.spec, self.xml = original, spec, xml
        self._as_written = None
        self.reference = {}
        self.sigs = None
        self._static = None
        self.alone = {}  # (runs, device) -> relative error of the original on that device alone
        self.profiled = {}  # (runs, device) -> the check's outputs on the device as the profile compiled it
        want = req.structure
        if want is not None and oi.op_structure(self.ops).digest() != want:
            raise StaleInput(f"{xml}: model.xml changed since it was lowered (its ops differ from the "
                             f"module's); lower it again")
        self.roles = np.frombuffer(req.roles, np.int8) if req.roles else None
        if self.roles is not None and self.roles.shape[0] != len(self.ops):
            raise StaleInput(f"{xml}: the placement roles cover {self.roles.shape[0]} ops, the model has "
                             f"{len(self.ops)}; lower it again")
        self.index = oi.name_positions(self.ops)
        self.states = sp.state_tensors(spec)
        self.inputs = None  # made on the first run: a query must not allocate the model's inputs
        aff = []
        for op in original.get_ordered_ops():
            rt = op.get_rt_info()
            key = "user_dataaffinity" if "user_dataaffinity" in rt else "affinity"
            aff.append(rt[key].astype(str) if key in rt else "")
        names, _ = oi.unique_names(self.ops)
        return P.Loaded(n_ops=len(self.ops), names=names, affinity=aff, spec=spec.to_json(),
                        read_ahead=ahead is not None)

    def core(self, devices: tuple[str, ...], target=None):
        """A Core with ``devices`` of the loaded target (or of ``target``: a file placed for another
        one, compared across targets) registered and configured."""
        if target is None or target == self.target:
            if devices not in self.cores:
                self.cores[devices] = make_core(self.target, list(devices))
            return self.cores[devices]
        key = (msgspec.json.encode(target).decode(), *devices)
        if key not in self.cores:
            self.cores[key] = make_core(target, list(devices))
        return self.cores[key]

    def default_core(self):
        """A Core with OpenVINO's own defaults (no target config, no aliases): the host's default
        plain compile, what a user gets without hdp."""
        import openvino as ov

        if self._default_core is None:
            self._default_core = ov.Core()
        return self._default_core

    def _ready(self, req, inputs=None):
        """Set the fixed inputs (``inputs``, default the model's) on an infer request; returns
        ``start()``, which puts a stateful model back to the specialised state (every timed
        inference starts from it)."""
        import openvino as ov

        if inputs is None:
            if self.inputs is None:
                self.inputs = random_inputs(self.model)
            inputs = self.inputs
        for i, a in enumerate(inputs):
            req.set_input_tensor(i, ov.Tensor(a))
        states = [(st, ov.Tensor(self.states[st.name])) for st in req.query_state() if st.name in self.states]

        def start() -> None:
            for st, t in states:
                st.state = t

        return start

    def _time(self, compiled, runs: int, warmup: int) -> list[float]:
        """Wall seconds of ``runs`` inferences after ``warmup``."""
        req = compiled.create_infer_request()
        start = self._ready(req)
        for _ in range(warmup):
            start()
            req.infer()
        times = []
        for _ in range(runs):
            start()
            t0 = time.perf_counter()
            req.infer()
            times.append(time.perf_counter() - t0)
        return times

    def _written(self):
        """The file's model as hdp writes it (dynamic shapes kept; only inputs of dynamic element
        type or rank refined, see :func:`hdp.ir.specialise.refine_for_devices`), made once:
        what a plain compile and a placement needing no rewrite compile. Inference feeds it the
        specialisation's inputs and states, so what is measured is what a user of the file runs."""

        if self._as_written is None:
            model = self.original.clone()
            sp.refine_for_devices(model, self.spec, self.xml)
            self._as_written = model
        return self._as_written

    def _placed_model(self, devices: list[str], dev_of: np.ndarray):
        """The placement (a device name per op position, ``devices[dev_of[i]]``) as hdp writes it:
        with the roles of the caller's module and several devices, legalized
        (:func:`hdp.ir.openvino_legalize.legalize`) on a clone of the original model, dynamic shapes
        kept; otherwise the affinities set on :meth:`_written` (a placed file is already legal).
        Every op carries ``user_dataaffinity``; :func:`_set_affinity` makes it HETERO's. One path
        for ``measure``, ``prepare`` and ``check``: what is timed is what was checked and written."""

        if dev_of.shape[0] != len(self.ops):
            raise InputError(f"placement has {dev_of.shape[0]} ops, the model has {len(self.ops)}")
        names = [devices[int(k)] for k in dev_of]
        if self.roles is not None and len(set(names)) > 1:
            model = self.original.clone()
            ops = list(model.get_ordered_ops())
            sp.refine_for_devices(model, self.spec, self.xml)
            legalize(model, ops, self.roles == PLACED, names)
            return model
        model = self._written()
        for op, d in zip(model.get_ordered_ops(), names):
            op.get_rt_info()["user_dataaffinity"] = d
        return model

    def _placed_file(self, xml: str):
        """A placed model file (another placement of the loaded model), affinities restored: it
        must take the loaded model's inputs (names, element types, the specialisation's shapes)
        and give as many outputs, since it runs on the same inputs and is checked against it."""

        model = ovr.read_model(xml)
        if (len(model.inputs), len(model.outputs)) != (len(self.original.inputs), len(self.original.outputs)):
            raise InputError(f"{xml}: its inputs and outputs are not those of {self.xml}")
        for inp, ins in zip(model.inputs, self.spec.inputs):
            et = inp.get_element_type()
            if sp.input_label(inp) != ins.name or (not et.is_dynamic() and sp.element_type_name(et) != ins.type) \
                    or not inp.get_partial_shape().compatible(_ov_shape(ins.shape)):
                raise InputError(f"{xml}: input '{sp.input_label(inp)}' ({et.get_type_name()}{inp.get_partial_shape()}) "
                                 f"does not take {self.xml}'s '{ins.name}' ({ins.type}{list(ins.shape)})")
        restore_affinity(model, xml)
        return model

    def _compile_placed(self, placement: P.Placement | None, xml: str | None = None, execution: str = "sequential",
                        target=None):
        """(compiled model, compile seconds) of ``placement`` (built by :meth:`_placed_model`) or of
        the placed file ``xml`` (:meth:`_placed_file`), compiled with HETERO over the devices used,
        or (``execution="concurrent"``) by hdp's concurrent executor; on ``target``'s devices (a
        file placed for another target), else the loaded one's."""
        if xml:
            model = self._placed_file(xml)
            used = _set_affinity(model)
        else:
            devices = list(placement.devices)
            model = self._placed_model(devices, np.frombuffer(placement.device_of, np.int16))
            used = sorted(_set_affinity(model), key=devices.index)  # HETERO's device list in target order
        return self._compile_as(model, used, execution, target)

    def _compile_as(self, model, used: list[str], execution: str, target=None):
        tgt = target or self.target
        core = self.core(tuple(used), target)
        t0 = time.perf_counter()
        if execution == "concurrent":
            compiled = compile_concurrent(model, tgt, core, used, source=self.xml)
        elif execution == "unpinned":  # HETERO with the CPU plugin's own pinning off (see serve)
            pinned = [d for d in used if tgt.device(d).plugin_name.startswith("CPU")
                      and str(tgt.device(d).config.get("ENABLE_CPU_PINNING", "")).upper() == "YES"]
            for d in pinned:
                core.set_property(d, {"ENABLE_CPU_PINNING": "NO"})
            try:
                compiled = core.compile_model(model, hetero_name(used), hetero_config(tgt, used))
            finally:
                for d in pinned:
                    core.set_property(d, {"ENABLE_CPU_PINNING": "YES"})
        else:
            compiled = core.compile_model(model, hetero_name(used), hetero_config(tgt, used))
        return compiled, time.perf_counter() - t0

    def measure(self, req: P.Measure) -> P.Timed:
        compiled, compile_s = self._compile_placed(req.placement, execution=req.execution)
        times = self._time(compiled, req.runs, req.warmup)
        return P.Timed(times=times, compile_seconds=compile_s, submodels=_submodels(compiled))

    def serve(self, req: P.Serve) -> P.Served:
        if (req.unplaced_on is None) == (req.placement is None):
            raise InputError("worker: serve one of a plain device or a placement")
        if req.plain_on is not None and req.placement is None:
            raise InputError("worker: a plain compile beside another only with a placement")
        pinning = ""
        plain = None
        if req.plain_on is not None:  # both compiled, then both alive while their windows alternate
            plain = self._serve_plain(req.plain_on, req.plain_config, req.plain_defaults)
        if req.unplaced_on is not None:
            compiled, compile_s = self._serve_plain(req.unplaced_on, req.unplaced_config, req.plain_defaults)
            submodels = 0
        else:
            compiled, compile_s, pinning = self._serve_placed(req.placement)
            submodels = _submodels(compiled)
        runs = [self._serving(compiled, req)]
        if plain is not None:
            runs.append(self._serving(plain[0], req))
        rates: list[list[float]] = [[] for _ in runs]
        with Sampler() as load:
            for b in range(req.batches):  # ABBA: each window of one beside one of the other
                for j in (range(len(runs)) if b % 2 == 0 else reversed(range(len(runs)))):
                    rates[j].append(runs[j]())
        got = load.result
        out = dict(rates=rates[0], compile_seconds=compile_s, submodels=submodels, per_batch=runs[0].per_batch,
                   pinning=pinning, busy=got.busy, own=got.own, wall=got.wall)
        if plain is not None:
            out.update(plain_rates=rates[1], plain_per_batch=runs[1].per_batch, plain_compile_seconds=plain[1],
                       plain_properties=compiled_properties(plain[0]) if req.plain_defaults else {})
        return P.Served(**out)

    def _serve_plain(self, device: str, config: dict, defaults: bool = False):
        core = self.default_core() if defaults else self.core((device,))
        t0 = time.perf_counter()
        compiled = core.compile_model(self._written(), device, dict(config))
        return compiled, time.perf_counter() - t0

    def _serve_placed(self, placement):
        """(compiled, seconds, pinning) of a placement to serve: the target's pinned CPU devices
        unpinned (the plugin pins every pinned one-thread instance to the same core, which would run
        the pipeline's stages on one core: the OS places them instead). With
        ``ENABLE_CPU_RESERVATION=YES`` each of two submodels would get a core of its own, but the CPU
        plugin (2026.4) keeps the cores reserved after the compiled model is gone (every later compile
        in the process fails, "No CPU resources available"), and in one process, windows side by side,
        a two-stage ResNet-50 pipeline on reserved cores served 52.7/s against 51.8/s unpinned and
        52.2/s for a three-stage one (the plain CPU with two streams 55.0/s): not worth a poisoned
        worker."""
        devices = list(placement.devices)
        pinned = [d for d in devices if self.target.device(d).plugin_name.startswith("CPU")
                  and str(self.target.device(d).config.get("ENABLE_CPU_PINNING", "")).upper() == "YES"]
        compiled, secs = self._compile_placed(placement, execution="unpinned" if pinned else "sequential")
        return compiled, secs, "unpinned" if pinned else ""

    def _serving(self, compiled, req: P.Serve):
        """A callable running one window of ``compiled`` with ``req.requests`` in flight and
        returning its steady-state rate; warmed up, and its window size (``per_batch``) fixed, when
        made.

        A window submits ``per_batch + 2 N`` inferences (``N = req.requests``) and times the
        ``per_batch`` completions after the first ``N``, between two completions: each of them came
        with ``N`` inferences in flight. Timing from the first start to the last completion would
        count the pipeline's fill and drain, when its later (earlier) stages wait for the first (last)
        inferences: a two-stage ResNet-50 pipeline read 48.4/s that way against 52.1/s in steady
        state (the plain compile with two streams 56.7 and 57.9, one 1-thread device 29.6 and 29.5;
        14 inferences a window, medians of 12 windows side by side in one process)."""
        import openvino as ov

        n = int(req.requests)
        queue = ov.AsyncInferQueue(compiled, n)
        for ireq in queue:
            self._ready(ireq)  # inputs set once per request; states (if any) are left to run on
        done: list[float] = []
        queue.set_callback(lambda _req, _data: done.append(time.perf_counter()))
        n_warm = max(n, min(max(req.warmup, 1) * n, 64))  # each request once at least; no more than 64 beyond
        for _ in range(2):  # the first inferences are slow (allocation): size windows by the second pass
            t0 = time.perf_counter()
            for _ in range(n_warm):
                queue.start_async()
            queue.wait_all()
        per_batch = req.per_batch
        if per_batch <= 0:  # windows of about SERVE_WINDOW seconds, judged by the warm-up: at least
            # 4 N completions, unless those take more than 4 windows' time (many requests in flight)
            timed = max(1, int(SERVE_WINDOW * n_warm / max(time.perf_counter() - t0, 1e-9)))
            per_batch = max(min(4 * n, 4 * timed), timed)

        window = steady_window(queue, n, per_batch, done)
        window.per_batch = per_batch
        window.queue = queue  # kept alive with the callable
        return window

    def prepare(self, req: P.Prepare) -> P.Prepared:
        if (req.unplaced_on is not None) + (req.placement is not None) + (req.xml is not None) != 1:
            raise InputError("worker: prepare one of a plain device, a placement or a placed file")
        submodels = 0
        properties: dict[str, str] = {}
        if req.unplaced_on is not None:
            core = self.default_core() if req.defaults else self.core((req.unplaced_on,))
            t0 = time.perf_counter()
            compiled = core.compile_model(self._written(), req.unplaced_on, dict(req.config))
            compile_s = time.perf_counter() - t0
            if req.defaults:
                properties = compiled_properties(compiled)
        else:
            compiled, compile_s = self._compile_placed(req.placement, req.xml, req.execution, req.target)
            submodels = _submodels(compiled)
        ireq = compiled.create_infer_request()
        start = self._ready(ireq)
        for _ in range(req.warmup):
            start()
            ireq.infer()
        handle = self._next_handle
        self._next_handle += 1
        self.prepared[handle] = (compiled, ireq, start)
        return P.Prepared(handle=handle, compile_seconds=compile_s, submodels=submodels, properties=properties)

    def rounds(self, req: P.Rounds) -> P.RoundTimes:
        handles = req.handles
        missing = [h for h in handles if h not in self.prepared]
        if missing:
            raise InputError(f"worker: no prepared candidate {missing[0]}")
        reqs = [self.prepared[h][1:] for h in handles]
        clock = time.perf_counter
        out = []
        with Sampler() as load:
            for order in req.orders:
                row = [0.0] * len(reqs)
                for j in order:
                    r, start = reqs[j]
                    start()
                    t0 = clock()
                    r.infer()
                    row[j] = clock() - t0
                out.append(row)
        got = load.result
        return P.RoundTimes(times=out, busy=got.busy, own=got.own, wall=got.wall)

    def release(self, req: P.Release) -> P.Done:
        for h in req.handles:
            self.prepared.pop(h, None)
        return P.Done()

    # ---- checking a placement against the original

    def _reference_outputs(self, runs) -> list:
        """Outputs of the original model compiled on the plain CPU plugin in f32, per run: those a
        profiled device that computes the same gave (:meth:`_keep_outputs`), else compiled here."""

        key = msgspec.json.encode(runs)
        if key not in self.reference:
            same = [d for (k, d) in self.profiled if k == key and self._computes_reference(d)]
            outs = self.profiled[(key, same[0])] if same else self._run_all(self._compile_reference(), runs)
            self.reference = {key: outs}
        return self.reference[key]

    def _compile_reference(self):
        import openvino as ov

        return ov.Core().compile_model(self.original, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                              "KV_CACHE_PRECISION": "f32"})

    def _computes_reference(self, device: str) -> bool:
        """Whether ``device`` of the target computes what the check's reference does: the CPU plugin
        (or an alias of it) in f32, every other setting of its config one that changes no result
        (:data:`SAME_RESULTS`)."""
        d = self.target.device(device)
        config = {k.upper(): str(v).lower() for k, v in d.config.items()}
        return (d.plugin_name == "CPU" and config.pop("INFERENCE_PRECISION_HINT", "") == "f32"
                and config.pop("KV_CACHE_PRECISION", "f32") == "f32" and set(config) <= SAME_RESULTS)

    def _profiled_is_written(self) -> bool:
        """Whether the model the profile compiles whole (the runnable specialisation) is the model
        as written, so that its outputs are the check's: no state, and every input of the file
        already static (one check run, at those shapes; :func:`hdp.ir.specialise.check_runs`)."""
        return not self.spec.state and all(p.get_partial_shape().is_static and not p.get_element_type().is_dynamic()
                                           for p in self.original.inputs)

    def _keep_outputs(self, devices: list[str], compiled: list) -> None:
        """Run the check's inferences on each device's profiled compile of the whole model and keep
        the outputs: the check of a placement of this model then takes its reference from a device
        that computes it (:meth:`_computes_reference`) and each device's own error from them, instead
        of compiling the model once more per device (on a compile-bound model, the check's reference
        compile was as long as OpenVINO's compile of the model). Untimed: after the timed rounds and
        the counters are read, on infer requests of their own."""
        runs = msgspec.to_builtins(sp.check_runs(self.original, self.spec, self.xml))
        key = msgspec.json.encode(runs)
        for d, c in zip(devices, compiled):
            self.profiled[(key, d)] = self._run_all(c, runs)

    def _run_all(self, compiled, runs) -> list:
        import openvino as ov

        req = compiled.create_infer_request()
        outs = []
        for k, run in enumerate(runs):
            spec = run["spec"]
            if not run.get("keep_state"):
                req.reset_state()
            shapes = [i[1] for i in spec["inputs"]]
            for i, a in enumerate(random_inputs(self.original, seed=k, shapes=shapes)):
                req.set_input_tensor(i, ov.Tensor(a))
            req.infer()
            outs.append([np.array(req.get_output_tensor(j).data, copy=True) for j in range(len(compiled.outputs))])
        return outs

    def _device_errors(self, runs, devices) -> dict[str, float]:
        """The relative error of the original compiled on each of ``devices`` alone (as the target
        configures it) over ``runs``: the precision no split over those devices can be held to
        beat. A device that cannot run the whole model gives none (0)."""
        reference = self._reference_outputs(runs)
        key = msgspec.json.encode(runs)
        out = {}
        for d in devices:
            if (key, d) not in self.alone:
                try:
                    got = self.profiled.get((key, d))
                    if got is None:
                        got = self._run_all(self.core(tuple(devices)).compile_model(self._written(), d, {}), runs)
                    err = max((_relative_error(a, b) for ra, rb in zip(got, reference) for a, b in zip(ra, rb)),
                              default=0.0)
                except Exception:  # noqa: BLE001 - no floor from a device that cannot run it all
                    err = 0.0
                self.alone[(key, d)] = err if np.isfinite(err) else 0.0
            out[d] = self.alone[(key, d)]
        return out

    def check(self, req: P.Check) -> P.Checked:
        """Compile a placement as hdp writes it (``placement`` legalized on a copy of the original
        model, or the placed model file ``xml``) with HETERO, run every check run, and compare each
        output with the original on the plain CPU plugin (see :class:`~hdp.runtime.measure.protocol.Check`)."""

        if (req.placement is None) == (req.xml is None):
            raise InputError("worker: check a placement or a placed file")
        runs = msgspec.to_builtins(sp.check_runs(self.original, self.spec, self.xml))
        if req.xml is not None:
            model = self._placed_file(req.xml)
        else:
            model = self._placed_model(list(req.placement.devices), np.frombuffer(req.placement.device_of, np.int16))
        used = _set_affinity(model, req.rename)
        t0 = time.perf_counter()
        reference = _in_thread(lambda: self._reference_outputs(runs), "hdp-check-reference")
        try:
            compiled, _ = self._compile_as(model, used, req.execution)
            got = self._run_all(compiled, runs)
        except Exception as e:  # noqa: BLE001 - the check's verdict, not a worker failure
            reference()  # (its own failure, if any, is the worker's)
            return P.Checked(passed=False, error=ov_message(e), seconds=time.perf_counter() - t0)
        reference = reference()
        worst, where = 0.0, ""
        for k, (a_run, b_run) in enumerate(zip(got, reference)):
            for j, (a, b) in enumerate(zip(a_run, b_run)):
                if a.shape != b.shape:
                    return P.Checked(passed=False, seconds=time.perf_counter() - t0,
                                     error=f"run {k}, output {j}: shape {a.shape}, the original gives {b.shape}")
                err = _relative_error(a, b)
                if err > worst:
                    worst, where = err, f"run {k}, output {j}"
        # the devices' own precision, asked for only when the placement is off by more than the caller's
        # base; a placement on one device is that device running the model alone, so its error is the
        # device's own (compiling the model on it again, the 20,000-op chain's third compile, would
        # give the same outputs)
        alone = {}
        if worst > req.tolerance:
            alone = {used[0]: worst if np.isfinite(worst) else 0.0} if len(used) == 1 else \
                self._device_errors(runs, used)
        return P.Checked(passed=True, max_error=worst, where=where, devices=used, runs=len(runs),
                         stateful=bool(self.spec.state), seconds=time.perf_counter() - t0,
                         device_errors=alone)

    def blob(self, req: P.Blob) -> P.Timed:
        """Import an exported placement (``blob``, with the ``device`` string, the ``target`` of its
        devices and the ``spec`` its record holds, :class:`hdp.runtime.serve.blob.BlobRecord`) as an
        OpenVINO application would, its devices registered and configured as recorded, and time
        ``runs`` inferences after ``warmup`` on seeded inputs at the recorded shapes (a stateful
        model from its initial state each time)."""
        import openvino as ov


        target = req.target
        core = make_core(target, list(target.device_names))  # InputError: absent here
        t0 = time.perf_counter()
        with open(req.blob, "rb") as f:
            used = req.device.partition(":")[2].split(",") if req.device.startswith("HETERO:") else []
            compiled = core.import_model(f.read(), req.device, hetero_config(target, used))
        import_s = time.perf_counter() - t0
        spec = sp.Specialisation.from_json(req.spec, req.blob) if req.spec else None
        ireq = compiled.create_infer_request()
        shapes = [i.shape for i in spec.inputs] if spec is not None else None
        for i, a in enumerate(random_inputs(compiled, shapes=shapes)):
            ireq.set_input_tensor(i, ov.Tensor(a))
        states = sp.state_tensors(spec) if spec is not None else {}
        held = [(st, ov.Tensor(states[st.name])) for st in ireq.query_state() if st.name in states]
        times = []
        for k in range(req.warmup + req.runs):
            for st, t in held:
                st.state = t
            t0 = time.perf_counter()
            ireq.infer()
            if k >= req.warmup:
                times.append(time.perf_counter() - t0)
        return P.Timed(times=times, compile_seconds=import_s, submodels=_submodels(compiled))

    def query(self, req: P.Query) -> P.Supported | P.Failed:
        """``query_model`` on the specialisation, every device in its own thread (a query is
        mostly the plugin's own work, outside the GIL): a bool per op position per device."""


        devices = list(req.devices)
        answers: dict[str, object] = {}

        def ask(device: str) -> None:
            try:
                answers[device] = self.core((device,)).query_model(self.model, device)
            except Exception as e:  # noqa: BLE001 - reported below, in the caller's thread
                answers[device] = e

        threads = [threading.Thread(target=ask, args=(d,), name=f"hdp-query-{d}") for d in devices[1:]]
        for t in threads:
            t.start()
        if devices:
            ask(devices[0])
        for t in threads:
            t.join()
        for d in devices:
            if isinstance(answers[d], InputError):  # the user's mistake (a device absent): its own words
                return P.Failed(error=str(answers[d]), input=True, device=d)
            if isinstance(answers[d], Exception):
                e = answers[d]
                return P.Failed(error=self._explain(f"{type(e).__name__}: {ov_message(e)}"), device=d)
        return P.Supported(supported={d: supported_mask(self.ops, answers[d]).tolist() for d in devices})

    def _signatures(self):
        if self.sigs is None:
            self.sigs = query.signatures(self._static_model().get_ordered_ops())
        return self.sigs

    def _static_model(self):
        """The model at the static shapes hdp costs: the runnable specialisation, or for a stateful
        model (whose runnable specialisation keeps its states dynamic) the specialisation with
        static states, made once."""

        if not self.spec.state:
            return self.model
        if self._static is None:
            self._static = sp.specialise(self.original, self.spec, self.xml)
        return self._static

    def signatures(self, req: P.Signatures) -> P.SignatureTable:
        """Each op's signature (see :mod:`hdp.runtime.measure.query`)."""
        sigs, _ = self._signatures()
        return P.SignatureTable(sig_of=np.asarray(sigs.sig_of, np.int32).tobytes(), digests=list(sigs.digests))

    def query_signatures(self, req: P.QuerySignatures) -> P.SignatureAnswers | P.Failed:
        """Each device's ``query_model`` answer about the signatures it is asked (``ask``), on
        small cut-out models, the devices in parallel threads."""


        t0 = time.perf_counter()
        sigs, feeds = self._signatures()
        ask = req.ask
        wanted = sorted(set().union(*ask.values())) if ask else []
        plan = query.plan(self.model, sigs, feeds, wanted)
        answers: dict[str, object] = {}

        def run(device: str) -> None:
            try:
                core = self.core((device,))
                answers[device] = query.answer(self.model, sigs, plan,
                                               lambda m: set(core.query_model(m, device)))
            except Exception as e:  # noqa: BLE001 - reported below, in the caller's thread
                answers[device] = e

        devices = list(ask)
        threads = [threading.Thread(target=run, args=(d,), name=f"hdp-query-{d}") for d in devices[1:]]
        for t in threads:
            t.start()
        if devices:
            run(devices[0])
        for t in threads:
            t.join()
        for d in devices:
            if isinstance(answers[d], InputError):  # the user's mistake (a device absent): its own words
                return P.Failed(error=str(answers[d]), input=True, device=d)
            if isinstance(answers[d], Exception):
                e = answers[d]
                return P.Failed(error=self._explain(f"{type(e).__name__}: {ov_message(e)}"), device=d)
        return P.SignatureAnswers(answers={d: list(answers[d][0].items()) for d in devices},
                                  in_context={d: list(plan.context) for d in devices},
                                  queries={d: answers[d][1]["queries"] for d in devices},
                                  seconds=time.perf_counter() - t0)

    def unplaced(self, req: P.Unplaced) -> P.Timed:
        core = self.core((req.device,))
        t0 = time.perf_counter()
        compiled = core.compile_model(self._written(), req.device, {})
        compile_s = time.perf_counter() - t0
        times = self._time(compiled, req.runs, req.warmup)
        return P.Timed(times=times, compile_seconds=compile_s)

    def profile(self, req: P.Profile) -> P.Profiled:
        """Per-node counters of the unplaced model on each device (see :class:`~hdp.runtime.measure.protocol.Profile`):
        of the model whole, or of its chunks (:mod:`hdp.runtime.measure.chunks`) beside a one-op model
        that measures what one inference request costs by itself; a model whose chunks do not all
        compile alone is profiled whole. The devices compile in parallel threads (untimed); a static,
        stateless model profiled whole then also runs the check's inferences on every device's
        compile, after the timed rounds and the counters (:meth:`_keep_outputs`)."""
        t_start = time.perf_counter()
        devices = list(req.devices)
        runs, warmup = req.runs, max(req.warmup, 1)
        min_runs = min(max(req.min_runs, 1), runs)
        budget = req.seconds or float("inf")  # 0: no budget, every round
        cores = [self.core((d,)) for d in devices]  # made here: registering plugins is not for threads
        if self.inputs is None:  # made once, before the threads share them
            self.inputs = random_inputs(self.model)
        units, plan = self._profile_units(req.chunk, req.whole_max)
        ready, failed = self._prepare(units, devices, cores, warmup)
        if plan is not None and any(e is not None for e in failed):  # a chunk that does not compile alone
            units, plan = [(self.model, self.inputs)], None
            ready, failed = self._prepare(units, devices, cores, warmup)
        for d, e in zip(devices, failed):
            if e is not None:
                raise RuntimeError(f"{d}: {ov_message(e)}") from e
        t_prepared = time.perf_counter()
        before = [[_counters(r) for _, r, _ in got] for got, _ in ready]
        after_run: list[list[list[dict]]] = [[] for _ in devices]  # per device, per timed run: counters per unit
        unit_times: list[list[list[float]]] = [[] for _ in devices]  # per device, per timed run: seconds per unit
        starts: list[list[float]] = [[] for _ in devices]  # seconds after the warm-ups
        clock, spent, last, done = time.perf_counter, 0.0, 0.0, 0
        # another round only if it fits the budget, judged by the last one (min_runs regardless)
        while done < runs and (done < min_runs or spent + last <= budget):
            order = range(len(devices)) if done % 2 == 0 else range(len(devices) - 1, -1, -1)
            last = 0.0
            for j in order:
                got, _ = ready[j]
                row = []
                starts[j].append(clock() - t_prepared)
                for _, ireq, start in got:
                    start()
                    t0 = clock()
                    ireq.infer()
                    row.append(clock() - t0)
                unit_times[j].append(row)
                last += sum(row)
                after_run[j].append([_counters(ireq) for _, ireq, _ in got])  # ~1 ms for 500 nodes, untimed
            spent += last
            done += 1
        t_timed = time.perf_counter()
        out = []
        index = self._unit_index(plan)
        for j, (got, compile_s) in enumerate(ready):
            nodes = [_runtime_nodes(c, index, before[j][u], _counters(r), [a[u] for a in after_run[j]])
                     for u, (c, r, _) in enumerate(got[:len(got) - (plan is not None)])]
            if plan is None:
                times, nodes = [row[0] for row in unit_times[j]], nodes[0]
            else:
                times = chunk_times(plan, unit_times[j])
                nodes = spread_nodes(plan, nodes)
            out.append(P.DeviceProfile(device=devices[j], times=times, starts=starts[j], compile_seconds=compile_s,
                                       warmup=warmup, properties=_compiled_properties(cores[j], got[0][0], devices[j]),
                                       nodes=nodes, chunks=len(plan.members) if plan else 0,
                                       measured_chunks=len(plan.measured()) if plan else 0))
        t_nodes = time.perf_counter()
        if plan is None and self._profiled_is_written():
            self._keep_outputs(devices, [got[0][0] for got, _ in ready])
        t_end = time.perf_counter()
        return P.Profiled(devices=out, seconds=P.ProfileSeconds(prepare=t_prepared - t_start, timed=t_timed - t_prepared,
                                                                nodes=t_nodes - t_timed, outputs=t_end - t_nodes))

    def _prepare(self, units, devices: list[str], cores: list, warmup: int) -> tuple[list, list]:
        """Compile every unit (model, inputs) on every device with PERF_COUNT and warm each up,
        the devices in parallel threads (untimed, so they may share the cores meanwhile). Returns
        per device ([(compiled, infer request, start)] per unit, compile seconds) or None, and the
        exception that stopped it or None."""

        ready: list = [None] * len(devices)
        failed: list = [None] * len(devices)

        def prepare(j: int) -> None:
            try:
                got, compile_s = [], 0.0
                for model, inputs in units:
                    t0 = time.perf_counter()
                    compiled = cores[j].compile_model(model, devices[j], {"PERF_COUNT": "YES"})
                    compile_s += time.perf_counter() - t0
                    ireq = compiled.create_infer_request()
                    got.append((compiled, ireq, self._ready(ireq, inputs)))
                for _, ireq, start in got:
                    for _ in range(warmup):
                        start()
                        ireq.infer()
                ready[j] = (got, compile_s)
            except Exception as e:  # noqa: BLE001 - reported by the caller, naming the device
                failed[j] = e

        threads = [threading.Thread(target=prepare, args=(j,), daemon=True) for j in range(1, len(devices))]
        for t in threads:
            t.start()
        prepare(0)
        for t in threads:
            t.join()
        return ready, failed

    def _profile_units(self, chunk: int, whole_max: int):
        """(models to profile with their inputs, the chunk plan or None): the model itself, or,
        with more than ``whole_max`` ops, its measured chunks of ``chunk`` ops and a one-op model
        last (one inference request's own cost). A model that cannot be cut is profiled whole."""
        whole = [(self.model, self.inputs)], None
        if chunk <= 0 or len(self.ops) <= whole_max:
            return whole

        sigs, _ = self._signatures()
        try:
            plan, models = chunks.chunk_models(self.model, chunk, sigs.sig_of,
                                               self._static_model().get_ordered_ops() if self.spec.state else None)
        except (chunks.ChunkError, RuntimeError, TypeError, ValueError):  # cannot be cut: whole
            return whole
        if len(plan.members) < 2:
            return whole
        units = [(models[c], random_inputs(models[c])) for c in plan.measured()]
        one = chunks.request_model()
        return units + [(one, random_inputs(one))], plan

    def _unit_index(self, plan) -> dict[str, list[int]]:
        """Friendly name -> op positions for the runtime graphs of profiled units."""
        if plan is None:
            return self.index

        return {op_name(i): [i] for i in range(len(self.ops))}


#: Seconds of one throughput window when the request leaves its size to the worker.
SERVE_WINDOW = 0.25
#: Settings of a CPU device's config that change no result (where its threads run, counters):
#: such a device in f32 computes what the check's reference (the plain CPU plugin in f32) does.
SAME_RESULTS = frozenset({"ENABLE_CPU_PINNING", "PERF_COUNT"})


class _Route(msgspec.Struct, frozen=True):
    handler: Callable[[Worker, P.Request], P.Reply]
    needs_model: bool = True  # answered only after a Load
    faulty: bool = True  # the test hook (FAULT_ENV) applies: the request compiles or queries


#: The handler of each request type.
HANDLERS: dict[type, _Route] = {
    P.Load: _Route(Worker.load, needs_model=False, faulty=False),
    P.Preload: _Route(Worker.preload, needs_model=False, faulty=False),
    P.Blob: _Route(Worker.blob, needs_model=False),
    P.Query: _Route(Worker.query),
    P.Measure: _Route(Worker.measure),
    P.Unplaced: _Route(Worker.unplaced),
    P.Profile: _Route(Worker.profile),
    P.Prepare: _Route(Worker.prepare),
    P.Rounds: _Route(Worker.rounds, faulty=False),
    P.Release: _Route(Worker.release, faulty=False),
    P.Check: _Route(Worker.check),
    P.Serve: _Route(Worker.serve),
    P.Signatures: _Route(Worker.signatures),
    P.QuerySignatures: _Route(Worker.query_signatures),
}


def _ov_shape(shape):
    import openvino as ov

    return ov.PartialShape([int(d) for d in shape])


def _set_affinity(model, rename: dict | None = None) -> list[str]:
    """Give every op of ``model`` HETERO's ``affinity`` from its ``user_dataaffinity`` (or the
    ``affinity`` it has), each device renamed by ``rename``; the devices used, in op order."""
    used = []
    for op in model.get_ordered_ops():
        rt = op.get_rt_info()
        d = rt["user_dataaffinity"].astype(str) if "user_dataaffinity" in rt else rt["affinity"].astype(str)
        d = (rename or {}).get(d, d)
        rt["affinity"] = d
        if d not in used:
            used.append(d)
    return used


def compiled_properties(compiled) -> dict[str, str]:
    """What a compile chose, in words a report can give: the precision it runs, its threads and
    streams and its performance hint (those the plugin reports)."""
    out = {}
    for key in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS", "PERFORMANCE_HINT",
                "ENABLE_CPU_PINNING"):
        try:
            v = compiled.get_property(key)
        except RuntimeError:
            continue
        if hasattr(v, "get_type_name"):  # an element type: bf16, f32
            v = v.get_type_name()
        out[key] = str(getattr(v, "name", v))
    return out


def _submodels(compiled) -> int:
    """HETERO's own count of the subgraphs it compiled (0 when the property is unavailable)."""
    try:
        return int(compiled.get_property("HETERO_NUMBER_OF_SUBMODELS"))
    except (RuntimeError, TypeError, ValueError):
        return 0


def _recorded_spec(model) -> str:
    """The specialisation a placed model was placed for (model rt_info ``hdp/specialisation``)."""
    try:
        return model.get_rt_info(["hdp", "specialisation"]).astype(str)
    except RuntimeError:
        return ""


def _relative_error(a, b) -> float:
    """||a - b|| / ||b|| (inf when ``a`` is not finite where ``b`` is; exact for integers)."""
    if a.dtype.kind in "iub":
        return 0.0 if np.array_equal(a, b) else float("inf")
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if not np.isfinite(a[np.isfinite(b)]).all():
        return float("inf")
    ok = np.isfinite(b)
    den = float(np.linalg.norm(b[ok]))
    num = float(np.linalg.norm(a[ok] - b[ok]))
    return num / den if den > 0 else num


def _counters(req) -> dict[str, tuple[float, bool]]:
    """Per runtime node: (average seconds, whether it runs). The CPU plugin reports NOT_RUN for a
    node whose average reads 0 us, so a NOT_RUN kernel (an exec type other than ``unknown_*`` or
    ``undef``: in-place and optimised-out nodes have those) counts as run: a fused node of a tiny
    element-wise chain reads 0 us in every run, and its ops would get no time at all."""
    return {p.node_name: (p.real_time.total_seconds(),
                          p.status == p.Status.EXECUTED
                          or (p.status == p.Status.NOT_RUN and not p.exec_type.startswith(("unknown", "undef"))))
            for p in req.profiling_info}


#: Compiled-model properties that do not describe how the model computes (names, diagnostics).
_NOT_KIND = frozenset({"SUPPORTED_PROPERTIES", "NETWORK_NAME", "EXECUTION_DEVICES", "PERF_COUNT", "LOG_LEVEL",
                       "OPTIMAL_NUMBER_OF_INFER_REQUESTS"})


def _compiled_properties(core, compiled, device: str) -> dict[str, str]:
    """What a compiled model runs with, as strings: every read-only property of the compiled model
    but names and diagnostics, and the device's ``FULL_DEVICE_NAME`` (the hardware behind it)."""
    out = {}
    try:
        names = list(compiled.get_property("SUPPORTED_PROPERTIES"))
    except (RuntimeError, TypeError):
        names = []
    for name in names:
        if name in _NOT_KIND:
            continue
        try:
            out[name] = str(compiled.get_property(name))
        except (RuntimeError, TypeError, ValueError):
            continue
    try:
        out["FULL_DEVICE_NAME"] = str(core.get_property(device, "FULL_DEVICE_NAME"))
    except (RuntimeError, TypeError):
        pass
    return out


def _runtime_nodes(compiled, positions: dict[str, list[int]], before: dict, after: dict,
                   runs: list[dict] = ()) -> list[P.RuntimeNode]:
    """The runtime graph's nodes; ``positions`` maps the compiled model's friendly names to op
    positions; ``runs``: the counters after every timed run."""

    rops = list(compiled.get_runtime_model().get_ordered_ops())
    index = {op: k for k, op in enumerate(rops)}  # ov Nodes hash and compare by identity
    most = most_name_parts(positions)
    nodes = []
    for op in rops:
        rt = op.get_rt_info()
        name = op.get_friendly_name()
        original = rt["originalLayersNames"].astype(str) if "originalLayersNames" in rt else name
        nodes.append(P.RuntimeNode(
            name=name,
            type=rt["layerType"].astype(str) if "layerType" in rt else op.get_type_name(),
            exec_type=rt["primitiveType"].astype(str) if "primitiveType" in rt else "",
            original=original,
            ops=layer_names_to_positions(original, positions, most),
            preds=[index[i.get_source_output().get_node()] for i in op.inputs()],
            avg_warm=before.get(name, (0.0, False))[0],
            avg_all=after.get(name, (0.0, False))[0],
            avg_runs=[before.get(name, (0.0, False))[0]] + [r.get(name, (0.0, False))[0] for r in runs],
            # the plugin reports NOT_RUN for a node whose average reads 0 us, so a node that ran in
            # the (slow) warm-up but averages below 1 us later still counts as executed
            executed=before.get(name, (0.0, False))[1] or after.get(name, (0.0, False))[1],
        ))
    return nodes


def die_with_parent() -> None:
    """Exit when the process that started this worker is gone (see the module docstring)."""

    try:
        parent = int(os.environ.get(PARENT_ENV, "0"))
    except ValueError:
        parent = 0
    if not parent:
        return
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(1)

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="hdp-parent-watchdog", daemon=True).start()


def main() -> None:
    die_with_parent()
    # a Ctrl-C reaches the whole process group: the parent decides, and stops this worker itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import openvino  # noqa: F401 - every request needs it; a worker started ahead of time imports it meanwhile
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    proto_in = sys.stdin.buffer
    worker = Worker()
    while True:
        data = P.read_frame(proto_in)
        if data is None:
            # the caller waits for this exit: skip the interpreter's teardown, where unloading
            # OpenVINO's plugins takes about 0.4 s (nothing is left to flush or save)
            sys.stderr.flush()
            os._exit(0)
        try:
            req = P.decode_request(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            P.write_msg(proto_out, P.Failed(error=f"worker: not a request: {e}"))
            continue
        P.write_msg(proto_out, worker.handle(req))


if __name__ == "__main__":
    main()

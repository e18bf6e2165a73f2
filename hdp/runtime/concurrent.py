"""Every device at once: a concurrent executor of a placed model's device subgraphs.

HETERO runs the subgraphs of one request strictly one after another, so independent branches
placed on different devices never overlap. This executor splits a placed model into the same
acyclic device subgraphs hdp prices for HETERO, further cut so that a subgraph's inputs from other
devices are due at its start and its outputs to them leave at its end
(:mod:`hdp.runtime.concurrent_split`), compiles each on its device and runs them as a dataflow::

    from hdp.runtime.placed import compile_placed
    compiled = compile_placed("placed.xml", execution="concurrent")
    result = compiled({0: x})        # like an ov.CompiledModel: result[0], result["logits"]

- A subgraph starts as soon as every tensor it reads is ready; each device has one *lane* (a
  thread) that runs the device's ready subgraphs one at a time, earliest-ready first.
- Tensors are handed over in host memory without copies: the consumer's input tensor *is* the
  producer's output tensor (``set_input_tensor``), user inputs are wrapped, not copied.
- A lane calls the blocking ``infer()``: OpenVINO releases the GIL, and the CPU plugin runs a
  one-thread compile on the calling thread, so the lane's pinning is the device's. A CPU-plugin
  device configured with ``ENABLE_CPU_PINNING=YES`` and ``INFERENCE_NUM_THREADS=n`` gets ``n`` host
  cores of its own (in target order) and its lane is pinned to them; its sub-models compile with
  the plugin's pinning and reservation off (the plugin would put every instance on the first
  core, and with reservation it refuses a third compiled model on a 2-core host: "No CPU
  resources available").
- Stateful models run when each variable's ReadValue and Assign can share one subgraph: hdp ties
  them to one device, and the executor merges the pieces between them; another device between
  them is refused with a one-line error. The state lives in that
  subgraph's infer request; ``reset_state()``/``query_state()`` reach every subgraph.

Constants are never cut: a constant feeding several subgraphs is read by each (shared, not
copied). The placed model itself is untouched: the same ``placed.xml`` still runs under HETERO.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Sequence

import msgspec
import numpy as np

from hdp.errors import InputError
from hdp.runtime.concurrent_split import Split, split_model

# --------------------------------------------------------------------------- pinning


def lane_cores(target, devices: Sequence[str], available: Sequence[int] | None = None) -> dict[str, list[int]]:
    """Host cores of each device that asks for its own (a CPU-plugin device with
    ``ENABLE_CPU_PINNING=YES`` and ``INFERENCE_NUM_THREADS=n``): consecutive cores of this
    process's affinity, in target order. Devices that do not ask float."""
    cores = sorted(available if available is not None else os.sched_getaffinity(0))
    out, nxt = {}, 0
    for d in target.devices:
        if d.name not in devices or d.plugin_name.split(".")[0] != "CPU":
            continue
        cfg = {k.upper(): str(v).upper() for k, v in d.config.items()}
        if cfg.get("ENABLE_CPU_PINNING") != "YES" or not cfg.get("INFERENCE_NUM_THREADS", "0").isdigit():
            continue
        n = int(cfg["INFERENCE_NUM_THREADS"])
        if n <= 0:
            continue
        if nxt + n > len(cores):
            raise InputError(f"device '{d.name}' asks for {n} pinned core(s); this process may use "
                             f"{len(cores)} ({', '.join(map(str, cores))}) and {nxt} are taken by earlier devices")
        out[d.name] = cores[nxt:nxt + n]
        nxt += n
    return out


class _Lane:
    """One device's thread: runs the jobs put on it, one at a time, in order."""

    def __init__(self, name: str, cores: list[int] | None):
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.cores = cores
        self.thread = threading.Thread(target=self._loop, name=f"hdp-lane-{name}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        if self.cores:
            os.sched_setaffinity(threading.get_native_id(), self.cores)
        while True:
            job = self.queue.get()
            if job is None:
                return
            job()

    def put(self, job) -> None:
        self.queue.put(job)

    def close(self) -> None:
        self.queue.put(None)


# --------------------------------------------------------------------------- the compiled model


class ConcurrentModel:
    """A placed model compiled for concurrent execution: one compiled sub-model per device
    subgraph. Used like an ``ov.CompiledModel`` (``inputs``, ``outputs``, ``__call__``,
    ``create_infer_request``)."""

    def __init__(self, model, split: Split, compiled: list, cores: dict[str, list[int]]):
        self.inputs = list(model.inputs)
        self.outputs = list(model.outputs)
        self.split = split
        self.compiled = compiled
        self.devices = list(dict.fromkeys(s.device for s in split.subgraphs))
        self.lanes = {d: _Lane(d, cores.get(d)) for d in self.devices}
        self._request = None

    @property
    def submodels(self) -> int:
        return len(self.compiled)

    def get_property(self, name: str):
        if name == "HETERO_NUMBER_OF_SUBMODELS":
            return self.submodels
        raise RuntimeError(f"concurrent model: no property '{name}'")

    def create_infer_request(self) -> "ConcurrentRequest":
        return ConcurrentRequest(self)

    def __call__(self, inputs=None):
        if self._request is None:
            self._request = self.create_infer_request()
        return self._request.infer(inputs)

    def close(self) -> None:
        for lane in self.lanes.values():
            lane.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class ConcurrentRequest:
    """One request in flight over the sub-models: ``set_input_tensor``, ``infer``,
    ``get_output_tensor``, ``query_state``, ``reset_state`` as on an ``ov.InferRequest``."""

    def __init__(self, cm: ConcurrentModel):
        self.cm = cm
        self.requests = [c.create_infer_request() for c in cm.compiled]
        self.inputs: list = [None] * len(cm.inputs)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._pending: list[int] = []
        self._left = 0
        self._error: BaseException | None = None
        self._result: Outputs | None = None

    def _index(self, key) -> int:
        if isinstance(key, int):
            if not 0 <= key < len(self.cm.inputs):
                raise IndexError(f"input {key} out of range (the model has {len(self.cm.inputs)})")
            return key
        if isinstance(key, str):
            for i, inp in enumerate(self.cm.inputs):
                if key in inp.get_names():
                    return i
            raise KeyError(f"no input named '{key}'")
        for i, inp in enumerate(self.cm.inputs):
            if inp == key:
                return i
        raise KeyError(f"unknown input {key!r}")

    def set_input_tensor(self, index, tensor) -> None:
        self.inputs[self._index(index)] = tensor

    def get_input_tensor(self, index: int = 0):
        return self.inputs[index]

    def get_output_tensor(self, index: int = 0):
        import openvino as ov

        src = self.cm.split.outputs[index]
        if src[0] == "sub":
            return self.requests[src[1]].get_output_tensor(src[2])
        if src[0] == "input":
            return self.inputs[src[1]]
        return ov.Tensor(src[1])

    def query_state(self) -> list:
        return [st for r in self.requests for st in r.query_state()]

    def reset_state(self) -> None:
        for r in self.requests:
            r.reset_state()

    def _set_inputs(self, inputs) -> None:
        import openvino as ov

        items = inputs.items() if isinstance(inputs, dict) else enumerate(inputs)
        for key, value in items:
            if not isinstance(value, ov.Tensor):
                value = ov.Tensor(np.ascontiguousarray(value), shared_memory=True)
            self.set_input_tensor(key, value)

    def infer(self, inputs=None):
        """Run once; returns the outputs (copies), looked up by position, name or port."""
        if inputs is not None:
            self._set_inputs(inputs)
        missing = [i for i, t in enumerate(self.inputs) if t is None]
        if missing:
            raise InputError(f"input {missing[0]} ('{self.cm.inputs[missing[0]].get_any_name()}') is not set")
        subs = self.cm.split.subgraphs
        self._pending = [len(s.preds) for s in subs]
        self._left = len(subs)
        self._error = None
        self._done.clear()
        if not subs:
            self._done.set()
        for s, sub in enumerate(subs):
            if not sub.preds:
                self.cm.lanes[sub.device].put(lambda s=s: self._run(s))
        self._done.wait()
        if self._error is not None:
            raise self._error
        self._result = Outputs(self.cm.outputs, [np.array(self.get_output_tensor(j).data, copy=True)
                                                 for j in range(len(self.cm.outputs))])
        return self._result

    def _run(self, s: int) -> None:
        sub = self.cm.split.subgraphs[s]
        req = self.requests[s]
        try:
            if self._error is None:
                for k, src in enumerate(sub.sources):
                    t = self.inputs[src[1]] if src[0] == "input" else self.requests[src[1]].get_output_tensor(src[2])
                    req.set_input_tensor(k, t)
                req.infer()
        except BaseException as e:  # noqa: BLE001 - handed to the caller of infer()
            self._error = e
        with self._lock:
            self._left -= 1
            for t in sub.succs:
                self._pending[t] -= 1
                if self._pending[t] == 0:
                    dev = self.cm.split.subgraphs[t].device
                    self.cm.lanes[dev].put(lambda t=t: self._run(t))
            if self._left == 0:
                self._done.set()

    @property
    def results(self) -> "Outputs":
        return self._result


class Outputs:
    """The outputs of one inference, looked up as in OpenVINO's result dict: by position, by
    tensor name or by output port."""

    def __init__(self, ports: list, arrays: list[np.ndarray]):
        self.ports = ports
        self.arrays = arrays

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, int):
            return self.arrays[key]
        for port, a in zip(self.ports, self.arrays):
            if (key in port.get_names()) if isinstance(key, str) else port == key:
                return a
        raise KeyError(f"no output {key!r}")

    def __len__(self) -> int:
        return len(self.arrays)

    def __iter__(self):
        return iter(self.ports)

    def keys(self) -> list:
        return list(self.ports)

    def values(self) -> list[np.ndarray]:
        return list(self.arrays)

    def items(self):
        return zip(self.ports, self.arrays)

    def to_tuple(self) -> tuple:
        return tuple(self.arrays)


def compile_concurrent(model, target, core, devices: Sequence[str], config: dict | None = None,
                       source: str = "<model>") -> ConcurrentModel:
    """Split ``model`` (placed: an affinity on every op; it is cloned, not changed) into device
    subgraphs and compile each on its device of ``core``; InputError naming the subgraph when a
    device refuses one."""
    work = model.clone()
    split = split_model(work, devices)
    cores = lane_cores(target, [s.device for s in split.subgraphs])
    compiled: list = [None] * len(split.models)
    errors: list = [None] * len(split.models)

    def build(s: int) -> None:
        sub = split.subgraphs[s]
        cfg = dict(config or {})
        if sub.device in cores:
            cfg.update(ENABLE_CPU_PINNING="NO", ENABLE_CPU_RESERVATION="NO")
        try:
            compiled[s] = core.compile_model(split.models[s], sub.device, cfg)
        except RuntimeError as e:
            errors[s] = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__

    threads = [threading.Thread(target=build, args=(s,)) for s in range(len(split.models))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s, err in enumerate(errors):
        if err is not None:
            sub = split.subgraphs[s]
            raise InputError(f"{source}: subgraph {s} ({len(sub.ops)} ops from "
                             f"'{sub.ops[0].get_friendly_name()}') does not compile on {sub.device}: {err}")
    return ConcurrentModel(model, split, compiled, cores)


# --------------------------------------------------------------------------- the executor's own costs


class ExecutorCosts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the executor costs beyond the ops it runs, measured on this host: ``request`` seconds
    per inference (starting it, waiting for the last subgraph, handing the outputs back),
    ``launch`` per subgraph (a lane picks it up, binds its inputs, runs its infer request, reports
    it done), ``handover`` per edge between subgraphs on different lanes (a successor released
    by one lane, started on another) and ``convert`` per byte of a tensor leaving one sub-model
    or entering another (the plugin converts it out of or into its own layout). ``*_ci``: their
    95 % intervals."""

    request: float
    launch: float
    handover: float
    request_ci: tuple[float, float] = (0.0, 0.0)
    launch_ci: tuple[float, float] = (0.0, 0.0)
    handover_ci: tuple[float, float] = (0.0, 0.0)
    rounds: int = 0
    convert: float = 0.0
    convert_ci: tuple[float, float] = (0.0, 0.0)
    convert_fitted: bool = False  # ``convert`` refitted on measured executor placements (hdp calibrate)

    def describe(self) -> str:
        def us(x, ci):
            return f"{x * 1e6:.1f} us (95 % CI {ci[0] * 1e6:.1f}…{ci[1] * 1e6:.1f})"

        def ms_mb(x, ci):
            if self.convert_fitted:
                return f"{x * 1e9:.3g} ms per MB (fitted on placements the executor ran)"
            interval = f" (95 % CI {ci[0] * 1e9:.3g}…{ci[1] * 1e9:.3g})" if ci != (0.0, 0.0) else ""
            return f"{x * 1e9:.3g} ms per MB{interval}"

        return (f"concurrent executor: {us(self.request, self.request_ci)} per inference, "
                f"{us(self.launch, self.launch_ci)} per subgraph, {us(self.handover, self.handover_ci)} per "
                f"hand-over between devices, {ms_mb(self.convert, self.convert_ci)} converted into or out "
                f"of a sub-model; {self.rounds} interleaved rounds")


def _probe(devices: Sequence[str], n: int, fan: bool = False):
    """x [1,64] -> n Multiply ops by constants, op i on ``devices[i % len(devices)]``: a chain, or
    (``fan``) n independent ops each giving an output (as many subgraphs on one device)."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 64], np.float32, name="x")
    y = x
    placed, outs = [], []
    for i in range(n):
        c = ops.constant(np.full((1, 64), 1.0 + 1e-3 * i, np.float32))
        y = ops.multiply(x if fan else y, c)
        placed.append((y, c, devices[i % len(devices)]))
        if fan:
            outs.append(ops.result(y))
    model = ov.Model(outs or [ops.result(y, name="y")], [x], f"probe{n}")
    for op in model.get_ordered_ops():
        op.get_rt_info()["affinity"] = devices[0]
    for y_, c, d in placed:
        y_.get_rt_info()["affinity"] = d
        c.get_rt_info()["affinity"] = d
    return model


def _convert_probes(device: str, channels: int = 512, side: int = 28):
    """A chain of two 1x1 convolutions (+ Relu) on [1, channels, side, side], all on ``device``:
    whole, and cut between the two into a first part (its output a Result) and a second (its input
    a Parameter). The two parts together convert the cut tensor once out of the plugin's layout and
    once into it, which the whole model never does; the bytes of that tensor.

    The default is a ResNet-50 stage-3 shape (a 1.6 MB tensor, 1 MB of weights per convolution):
    in a network the weights between two uses of a tensor push it out of the core's cache, and a
    conversion costs what it costs from the shared cache. Measured here (AMD EPYC, 2 MB L2 per
    core, f32): 0.19-0.21 ms per MB for 256x56x56, 512x28x28, 128x112x112 and 1024x14x14 tensors;
    0.09 ms per MB for 64x56x56 with its 16 KB of weights, where the tensor stays in L2."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    w = [ops.constant(rng.standard_normal((channels, channels, 1, 1)).astype(np.float32) * 0.1) for _ in range(2)]

    def conv(x, k):
        return ops.relu(ops.convolution(x, w[k], [1, 1], [0, 0], [0, 0], [1, 1]))

    shape = [1, channels, side, side]

    def model(ks, name):
        x = ops.parameter(shape, np.float32, name="x")
        y = x
        for k in ks:
            y = conv(y, k)
        m = ov.Model([ops.result(y)], [x], name)
        for op in m.get_ordered_ops():
            op.get_rt_info()["affinity"] = device
        return m

    return [model((0, 1), "whole"), model((0,), "first"), model((1,), "second")], 4 * int(np.prod(shape))


def fit_executor_costs(target, core=None, *, rounds: int = 200, n: int = 8) -> ExecutorCosts:
    """Measure :class:`ExecutorCosts` on the first two real devices of ``target`` (one device: the
    hand-over is not measured and reads 0).

    Three probes of ``n`` tiny ops are run by the executor and, sub-request by sub-request, inline
    on the calling thread, interleaved round by round; what the executor adds to the inline time
    is ``request + launch`` for one subgraph (every op on one device, a chain), ``request + n
    launch`` for ``n`` independent subgraphs on one device, and ``request + n launch + (n - 1)
    handover`` for a chain alternating between two devices. ``convert``: two 1x1 convolutions on
    [1, 512, 28, 28] (:func:`_convert_probes`) compiled for the executor on the first device, whole
    and as two sub-models, timed inline (``rounds / 4`` rounds); the parts' sum less the whole and
    one request (the tiny chain's inline time), per byte converted (twice the cut tensor). Each estimate is the
    Hodges-Lehmann centre of its per-round values, with its 95 % interval."""
    import time

    import openvino as ov

    from hdp.runtime.devices import make_core
    from hdp.runtime.stats import hodges_lehmann

    real = [d.name for d in target.devices if d.kind == "real"]
    if not real:
        raise InputError(f"target '{target.name}' has no real device: the executor's costs cannot be measured")
    devs = real[:2]
    core = core or make_core(target, devs)
    probes = [(_probe(devs[:1], n), devs[:1]), (_probe(devs[:1], n, fan=True), devs[:1])]
    if len(devs) > 1:
        probes.append((_probe(devs, n), devs))
    models = [compile_concurrent(m, target, core, d, source="<executor probe>") for m, d in probes]
    clock = time.perf_counter

    def requests_of(compiled) -> list:
        """One request per compiled probe, its input all ones."""
        x = ov.Tensor(np.ones(tuple(compiled[0].inputs[0].get_partial_shape().to_shape()), np.float32))
        out = [cm.create_infer_request() for cm in compiled]
        for req in out:
            req.set_input_tensor(0, x)
        return out

    reqs = requests_of(models)

    def inline(req) -> float:
        t = 0.0
        for s, sub in enumerate(req.cm.split.subgraphs):
            r = req.requests[s]
            for k, src in enumerate(sub.sources):
                r.set_input_tensor(k, req.inputs[src[1]] if src[0] == "input"
                                   else req.requests[src[1]].get_output_tensor(src[2]))
            t0 = clock()
            r.infer()
            t += clock() - t0
        return t

    extra = np.zeros((rounds, len(reqs)))
    for r in range(-10, rounds):  # 10 warm-up rounds
        for j in (range(len(reqs)) if r % 2 else reversed(range(len(reqs)))):
            t0 = clock()
            reqs[j].infer()
            took = clock() - t0
            if r >= 0:
                extra[r, j] = took - inline(reqs[j])
    # apart, after: the convolutions' megabytes would evict the tiny probes' caches
    conv_models, conv_bytes = _convert_probes(devs[0])
    convs = [compile_concurrent(m, target, core, devs[:1], source="<executor probe>") for m in conv_models]
    conv_reqs = requests_of(convs)
    conv = np.zeros(max(rounds // 4, 8))  # a round takes about 9 ms of convolutions
    for r in range(-3, conv.shape[0]):
        t = [0.0, 0.0, 0.0]  # whole, first part, second part
        for j in (range(3) if r % 2 else reversed(range(3))):
            t[j] = inline(conv_reqs[j])
        if r >= 0:
            conv[r] = (t[1] + t[2] - t[0] - inline(reqs[0])) / (2 * conv_bytes)
    for cm in models + convs:
        cm.close()
    k = [len(cm.split.subgraphs) for cm in models]
    launch = hodges_lehmann((extra[:, 1] - extra[:, 0]) / (k[1] - 1))
    request = hodges_lehmann(extra[:, 0] - (extra[:, 1] - extra[:, 0]) / (k[1] - 1))
    per_byte = hodges_lehmann(conv)
    out = dict(request=max(request[0], 0.0), launch=max(launch[0], 0.0), request_ci=request[1:],
               launch_ci=launch[1:], rounds=rounds, convert=max(per_byte[0], 0.0), convert_ci=per_byte[1:])
    if len(reqs) > 2:
        hand = hodges_lehmann((extra[:, 2] - extra[:, 1] - (k[2] - k[1]) * (extra[:, 1] - extra[:, 0]) / (k[1] - 1))
                              / (k[2] - 1))
        out.update(handover=max(hand[0], 0.0), handover_ci=hand[1:])
    else:
        out.update(handover=0.0)
    return ExecutorCosts(**out)

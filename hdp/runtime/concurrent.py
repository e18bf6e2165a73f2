"""Every device at once: a concurrent executor of a placed model's device subgraphs.

HETERO runs the subgraphs of one request strictly one after another, so independent branches
placed on different devices never overlap. This executor splits a placed model into the same
acyclic device subgraphs hdp prices for HETERO, further cut so that a subgraph's inputs from other
devices are due at its start and its outputs to them leave at its end
(:func:`hdp.placement._kernels.concurrent_labels`, over the model's ops), compiles each on its
device and runs them as a dataflow::

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
from dataclasses import dataclass, field

import msgspec
import numpy as np

from hdp.errors import InputError

_SOURCE_TYPES = ("Parameter", "Constant")


@dataclass
class SubgraphPlan:
    """One device subgraph: where its inputs come from, which outputs it gives."""

    device: str
    ops: list  # the ov ops of the subgraph, in model order (Results excluded)
    #: per sub-model input: ("input", i) for the model's i-th input, or ("sub", s, k) for output k of subgraph s
    sources: list[tuple] = field(default_factory=list)
    outputs: list = field(default_factory=list)  # the ov.Output each sub-model result reads
    results: list = field(default_factory=list)  # the original Result ops it carries (index into model.outputs)
    sinks: list = field(default_factory=list)  # Assign ops
    preds: set[int] = field(default_factory=set)
    succs: set[int] = field(default_factory=set)


@dataclass
class Split:
    """A placed model cut into device subgraphs (in a topological order of the subgraph DAG)."""

    subgraphs: list[SubgraphPlan]
    #: per model output: ("sub", s, k), ("input", i) for an input passed through, ("const", array)
    outputs: list[tuple]
    models: list  # ov.Model per subgraph


def _affinity(op) -> str:
    rt = op.get_rt_info()
    for key in ("affinity", "user_dataaffinity"):
        if key in rt:
            return rt[key].astype(str)
    raise InputError(f"op '{op.get_friendly_name()}' has no affinity; not a placed model")


def _variable_id(op) -> str | None:
    if op.get_type_name() not in ("ReadValue", "Assign"):
        return None
    try:
        return op.get_variable_id()
    except (AttributeError, RuntimeError):
        return op.get_friendly_name()


def subgraph_labels(model, devices: Sequence[str]) -> tuple[list, np.ndarray, np.ndarray]:
    """(compute ops, device index per op, subgraph label per op) of a placed model: the ops other
    than Parameters, Constants and Results, in model order, labelled by
    :func:`~hdp.placement._kernels.concurrent_labels`; the pieces between a variable's ReadValue and
    Assign are merged into one subgraph (InputError when another device lies between them)."""
    from hdp.placement import _kernels as K

    ops = [op for op in model.get_ordered_ops() if op.get_type_name() not in (*_SOURCE_TYPES, "Result")]
    pos = {op: i for i, op in enumerate(ops)}
    dev_index = {d: k for k, d in enumerate(devices)}
    eff = np.empty(len(ops), np.int64)
    for i, op in enumerate(ops):
        d = _affinity(op)
        if d not in dev_index:
            raise InputError(f"op '{op.get_friendly_name()}' is placed on '{d}', not one of {list(devices)}")
        eff[i] = dev_index[d]
    edges = set()
    members: dict[str, list[int]] = {}
    for i, op in enumerate(ops):
        for inp in op.inputs():
            u = pos.get(inp.get_source_output().get_node())
            if u is not None:
                edges.add((u, i))
        var = _variable_id(op)
        if var is not None:
            members.setdefault(var, []).append(i)
    e = np.array(sorted(edges), np.int64).reshape(-1, 2)
    src, dst = e[:, 0].copy(), e[:, 1].copy()
    n = len(ops)
    label = np.empty(n, np.int64)
    k = K.concurrent_labels(eff, np.zeros(n, np.bool_), src, dst, label, np.empty(n, np.int64), np.empty(n, np.int64),
                            np.empty(n, np.int64))
    split_vars = [(v, m) for v, m in members.items() if len({int(label[i]) for i in m}) > 1]
    if split_vars:
        label = _merge_state(label, k, eff, src, dst, split_vars, ops, devices)
    return ops, eff, label


def _merge_state(label, k, eff, src, dst, split_vars, ops, devices) -> np.ndarray:
    """Labels with, for each variable, every subgraph on a path between its ReadValue and its
    Assign merged into one (they are on one device: hdp ties them; so must be what lies between)."""
    from scipy.cluster.hierarchy import DisjointSet

    a, b = label[src], label[dst]
    cross = a != b
    succ: dict[int, set[int]] = {}
    pred: dict[int, set[int]] = {}
    for x, y in zip(a[cross].tolist(), b[cross].tolist()):
        succ.setdefault(x, set()).add(y)
        pred.setdefault(y, set()).add(x)

    def reach(start: set[int], nbr) -> set[int]:
        seen, stack = set(start), list(start)
        while stack:
            for y in nbr.get(stack.pop(), ()):
                if y not in seen:
                    seen.add(y)
                    stack.append(y)
        return seen

    dsu = DisjointSet(range(k))
    dev_of = {int(label[i]): int(eff[i]) for i in range(label.shape[0])}
    for var, m in split_vars:
        pieces = {int(label[i]) for i in m}
        between = reach(pieces, succ) & reach(pieces, pred)
        other = sorted({dev_of[p] for p in between} - {dev_of[next(iter(pieces))]})
        if other:
            raise InputError(f"variable '{var}': ops on {devices[other[0]]} lie between its ReadValue and Assign; "
                             "the concurrent executor keeps a variable's state inside one subgraph (place "
                             f"what lies between them on {devices[dev_of[next(iter(pieces))]]}, or run it "
                             "under HETERO)")
        first = next(iter(between))
        for p in between:
            dsu.merge(first, p)
    root = np.array([dsu[p] for p in range(k)], np.int64)
    return root[label]


def split_model(model, devices: Sequence[str]) -> Split:
    """Cut ``model`` (an ov.Model with an affinity on every op; modified in place, pass a clone)
    into one ov.Model per device subgraph."""
    import openvino as ov
    import openvino.opset13 as opset

    ops, eff, label = subgraph_labels(model, devices)
    params = list(model.get_parameters())
    p_index = {p: i for i, p in enumerate(params)}
    # subgraphs numbered by their first op: an order consistent with the ops' topological order
    # only within a subgraph; the DAG order is computed below
    first: dict[int, int] = {}
    for i, lab in enumerate(label):
        first.setdefault(int(lab), i)
    order = sorted(first, key=first.get)
    number = {lab: s for s, lab in enumerate(order)}
    subs = [SubgraphPlan(device=devices[int(eff[first[lab]])], ops=[]) for lab in order]
    sub_of = {}
    for i, op in enumerate(ops):
        s = number[int(label[i])]
        subs[s].ops.append(op)
        sub_of[op] = s
        if op.get_type_name() == "Assign":
            subs[s].sinks.append(op)
    out_key: list[dict] = [{} for _ in subs]  # (node, port) -> result index, per producing subgraph

    def produce(s: int, output) -> int:
        key = (output.get_node(), output.get_index())
        if key not in out_key[s]:
            out_key[s][key] = len(subs[s].outputs)
            subs[s].outputs.append(output)
        return out_key[s][key]

    # cut edges: every input read from a Parameter or another subgraph becomes a sub-model Parameter
    cuts = []  # (consumer input, subgraph, source)
    for s, sub in enumerate(subs):
        seen: dict = {}
        for op in sub.ops:
            for inp in op.inputs():
                src = inp.get_source_output()
                node = src.get_node()
                if node in p_index:
                    source = ("input", p_index[node])
                elif node in sub_of and sub_of[node] != s:
                    t = sub_of[node]
                    source = ("sub", t, produce(t, src))
                    sub.preds.add(t)
                    subs[t].succs.add(s)
                else:
                    continue
                if source not in seen:
                    seen[source] = len(sub.sources)
                    sub.sources.append(source)
                cuts.append((inp, s, seen[source], src))
    outputs: list[tuple] = []
    result_src = []
    for j, res in enumerate(model.get_results()):
        src = res.input(0).get_source_output()
        node = src.get_node()
        if node in sub_of:
            outputs.append(("sub", sub_of[node], produce(sub_of[node], src)))
        elif node in p_index:
            outputs.append(("input", p_index[node]))
        else:  # a Constant given as an output
            outputs.append(("const", np.array(node.get_data(), copy=True)))
        result_src.append(src)
    # build: a Parameter per subgraph input, a Result per subgraph output
    new_params: list[list] = []
    for s, sub in enumerate(subs):
        ps = []
        for k, source in enumerate(sub.sources):
            if source[0] == "input":
                like = params[source[1]].output(0)
            else:
                like = subs[source[1]].outputs[source[2]]
            p = opset.parameter(like.get_partial_shape(), like.get_element_type(), name=f"hdp_in_{s}_{k}")
            ps.append(p)
        new_params.append(ps)
    results = [[opset.result(o) for o in sub.outputs] for sub in subs]
    for inp, s, k, _src in cuts:
        inp.replace_source_output(new_params[s][k].output(0))
    models = []
    for s, sub in enumerate(subs):
        for r in results[s]:
            r.get_rt_info()["affinity"] = sub.device
        models.append(ov.Model(results[s], sub.sinks, new_params[s], f"hdp_subgraph_{s}_{sub.device}"))
    topo = _topological(subs)
    remap = {old: new for new, old in enumerate(topo)}
    subs = [subs[s] for s in topo]
    models = [models[s] for s in topo]
    for sub in subs:
        sub.preds = {remap[t] for t in sub.preds}
        sub.succs = {remap[t] for t in sub.succs}
        sub.sources = [(x[0], remap[x[1]], x[2]) if x[0] == "sub" else x for x in sub.sources]
    outputs = [(x[0], remap[x[1]], x[2]) if x[0] == "sub" else x for x in outputs]
    return Split(subgraphs=subs, outputs=outputs, models=models)


def _topological(subs: list[SubgraphPlan]) -> list[int]:
    indeg = [len(s.preds) for s in subs]
    ready = [s for s, d in enumerate(indeg) if d == 0]
    out = []
    while ready:
        s = min(ready)
        ready.remove(s)
        out.append(s)
        for t in sorted(subs[s].succs):
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    if len(out) != len(subs):  # the stage split makes the order acyclic; guard it all the same
        raise InputError("the device subgraphs depend on each other cyclically; cannot run them")
    return out


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
    it done) and ``handover`` per edge between subgraphs on different lanes (a successor released
    by one lane, started on another). ``*_ci``: their 95 % intervals."""

    request: float
    launch: float
    handover: float
    request_ci: tuple[float, float] = (0.0, 0.0)
    launch_ci: tuple[float, float] = (0.0, 0.0)
    handover_ci: tuple[float, float] = (0.0, 0.0)
    rounds: int = 0

    def describe(self) -> str:
        def us(x, ci):
            return f"{x * 1e6:.1f} us (95 % CI {ci[0] * 1e6:.1f}…{ci[1] * 1e6:.1f})"

        return (f"concurrent executor: {us(self.request, self.request_ci)} per inference, "
                f"{us(self.launch, self.launch_ci)} per subgraph, {us(self.handover, self.handover_ci)} per "
                f"hand-over between devices; {self.rounds} interleaved rounds")


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


def fit_executor_costs(target, core=None, *, rounds: int = 200, n: int = 8) -> ExecutorCosts:
    """Measure :class:`ExecutorCosts` on the first two real devices of ``target`` (one device: the
    hand-over is not measured and reads 0).

    Three probes of ``n`` tiny ops are run by the executor and, sub-request by sub-request, inline
    on the calling thread, interleaved round by round; what the executor adds to the inline time
    is ``request + launch`` for one subgraph (every op on one device, a chain), ``request + n
    launch`` for ``n`` independent subgraphs on one device, and ``request + n launch + (n - 1)
    handover`` for a chain alternating between two devices. Each estimate is the Hodges-Lehmann
    centre of its per-round values, with its 95 % interval."""
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
    x = ov.Tensor(np.ones((1, 64), np.float32))
    reqs = []
    for cm in models:
        req = cm.create_infer_request()
        req.set_input_tensor(0, x)
        reqs.append(req)
    clock = time.perf_counter

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
    for cm in models:
        cm.close()
    k = [len(cm.split.subgraphs) for cm in models]
    launch = hodges_lehmann((extra[:, 1] - extra[:, 0]) / (k[1] - 1))
    request = hodges_lehmann(extra[:, 0] - (extra[:, 1] - extra[:, 0]) / (k[1] - 1))
    out = dict(request=max(request[0], 0.0), launch=max(launch[0], 0.0), request_ci=request[1:],
               launch_ci=launch[1:], rounds=rounds)
    if len(reqs) > 2:
        hand = hodges_lehmann((extra[:, 2] - extra[:, 1] - (k[2] - k[1]) * (extra[:, 1] - extra[:, 0]) / (k[1] - 1))
                              / (k[2] - 1))
        out.update(handover=max(hand[0], 0.0), handover_ci=hand[1:])
    else:
        out.update(handover=0.0)
    return ExecutorCosts(**out)

"""What hdp's concurrent executor (:mod:`hdp.runtime.placed.executor`) costs beyond the ops it runs,
measured on this host by probes: per inference, per subgraph, per hand-over between devices and per
byte converted into or out of a sub-model (:func:`fit_executor_costs`, run by ``hdp calibrate``)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec
import numpy as np

from hdp.base.errors import InputError
from hdp.runtime.measure.stats import hodges_lehmann
from hdp.runtime.placed.executor import compile_concurrent
from hdp.target.devices import make_core


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

    import openvino as ov


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

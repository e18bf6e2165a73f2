"""Prefill and decode placed separately: ``hdp compile MODEL -o placed.xml --phases prefill,decode``.

A stateful LLM (optimum-intel's export: the KV cache in ReadValue/Assign state) does two kinds of
inference. The prefill reads a prompt of ``--seq-len`` tokens into an empty cache and gives the first
generated token (its latency is the *time to first token*); each decode step reads one token after
the cache (its latency is the *time per token*). They are two specialisations of one model
(:mod:`hdp.ir.specialise`: ``--phase prefill`` and ``--phase decode``), so each is placed on its own
(:func:`compile_phases`): the prefill is compute-bound and decode reads every weight per token, so
their best devices differ (llama.cpp's OpenVINO backend runs the prefill on the CPU and decode on
the iGPU of a Core Ultra).

The KV cache the prefill leaves is what decode starts from. Where the device holding a state variable
in the prefill and the one reading it in decode are the same, or share one memory (a target's
``[[shares]]`` memory, :class:`hdp.target.target.Share`: the CPU, iGPU and NPU of one SoC), the cache
stays where both reach it and handing it over costs nothing; otherwise each variable is copied over
the target's link once per request (``latency + bytes / bandwidth``), before the first decode step.
The plan (:class:`PhasePlan`) prices a request of a prompt and ``n`` generated tokens as
``prefill + hand-off + (n - 1) x decode``, beside every device running both phases alone.

What is written, for ``-o placed.xml``: ``placed.prefill.xml`` and ``placed.decode.xml`` (with their
``.bin``), each the whole model — dynamic shapes and state kept, so it runs both phases — placed for
its phase and checked like every placed model (``hdp compile``'s check: a prefill and two generation
steps against the original). Each records the plan (``<hdp><phases>``, JSON): ``hdp show`` of either
prints each phase's placement, time to first token and time per token; ``hdp.zoo.models.generate(
prefill, ids, decode=decode)`` runs the prompt on one compiled model and the steps on the other, the
cache handed from one infer request to the other. The record is added to the file the check passed
(read, the entry set, saved again), and the result is kept only if its weights are the same bytes and
its text differs from the checked file's by that entry alone. Both pairs are committed only after
both phases were placed, checked and recorded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from hdp.base.errors import InputError
from hdp.base.fsutil import commit_pair, human_size, release_output, temp_dir
from hdp.ir.openvino_backend import save_uncommitted, weights_digest
from hdp.ir.openvino_read import read_model
from hdp.ir.shapes import PHASES, ShapeRequest
from hdp.ir.types import Module
from hdp.passes.instruments import DumpIR
from hdp.pipeline.compile import compile_model
from hdp.placement.problem import problem_of
from hdp.placement.simulate import Simulator
from hdp.placers.measured import ms
from hdp.runtime.placed.model import model_info
from hdp.target.capacity import capacities, device_memory, max_allocations
from hdp.target.hosts import problem_hosts
from hdp.target.target import Target, load_target

#: The model-level rt_info entry of a phase's placed model that holds the plan (``<hdp><phases>``).
RECORD_KEY = "phases"
#: Generated tokens of the request the plan prices beside the single devices (``hdp show``, compile).
GENERATED = 128


def parse_phases(text: str) -> tuple[str, ...]:
    """``"prefill,decode"`` -> the phases in :data:`~hdp.ir.specialise.PHASES` order; InputError
    naming ``--phases`` for an unknown, repeated or missing phase."""
    names = [p.strip() for p in str(text).split(",")]
    if not str(text).strip() or not all(names):
        raise InputError(f"--phases {text!r}: expected phases separated by commas, from {', '.join(PHASES)}")
    for p in names:
        if p not in PHASES:
            raise InputError(f"--phases {text}: unknown phase '{p}' (phases: {', '.join(PHASES)})")
    repeated = [p for p, n in Counter(names).items() if n > 1]
    if repeated:
        raise InputError(f"--phases {text}: phase '{repeated[0]}' given twice")
    return tuple(p for p in PHASES if p in names)


def phase_path(output: str | Path, phase: str) -> Path:
    """Where a phase's placed model goes for ``-o output``: ``placed.xml`` -> ``placed.prefill.xml``."""
    out = Path(output)
    return out.with_name(f"{out.stem}.{phase}{out.suffix}")


def require_state(model: str | Path) -> None:
    """InputError naming ``--phases`` unless ``model`` is stateful (has ReadValue/Assign variables)."""
    if not read_model(Path(model)).get_variables():
        raise InputError(f"--phases: {model} has no state (no ReadValue/Assign variables); prefill and decode "
                         f"are the phases of a stateful LLM (its KV cache in the model's state, as optimum-intel "
                         f"exports it, or `hdp zoo NAME:stateful`): place it without --phases")


class PhaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One phase's placement in a :class:`PhasePlan`."""

    phase: str
    file: str  #: the placed model's file name (beside the others)
    ops: dict[str, int]  #: ops per device
    state_on: tuple[str, ...]  #: the devices holding the state variables (KV cache)
    seconds: float  #: simulated latency of one inference of the phase
    tokens: int  #: tokens one inference reads (the prompt; 1 for a decode step)
    singles: dict[str, float] = {}  #: each device running the whole phase alone (that fits), simulated


class PhasePlan(msgspec.Struct, frozen=True, kw_only=True):
    """Prefill and decode placed separately, with the KV cache between them (module docstring)."""

    target: str
    seq_len: int  #: tokens of the prompt
    context: int  #: tokens of KV cache the memory estimate held (0: as specialised)
    phases: tuple[PhaseRecord, ...]
    kv_bytes: float = 0.0  #: the KV cache the prefill leaves (all state variables)
    handoff: float = 0.0  #: seconds to hand it to decode (0: on memory both devices reach)
    moved: tuple[str, ...] = ()  #: "PREFILL_DEVICE>DECODE_DEVICE" for each pair the cache is copied between

    def phase(self, name: str) -> PhaseRecord | None:
        return next((p for p in self.phases if p.phase == name), None)

    @property
    def first_token(self) -> float | None:
        p = self.phase("prefill")
        return p.seconds if p is not None else None

    @property
    def per_token(self) -> float | None:
        d = self.phase("decode")
        return d.seconds if d is not None else None

    def request(self, generated: int = GENERATED) -> float | None:
        """Seconds of a request: the prompt and ``generated`` tokens (the first from the prefill)."""
        if self.first_token is None or self.per_token is None:
            return None
        return self.first_token + self.handoff + max(generated - 1, 0) * self.per_token

    def single_requests(self, generated: int = GENERATED) -> dict[str, tuple[float, float, float]]:
        """Each device running both phases alone (where it runs and holds both): ``(time to first
        token, time per token, request seconds)``."""
        pre, dec = self.phase("prefill"), self.phase("decode")
        if pre is None or dec is None:
            return {}
        return {d: (pre.singles[d], dec.singles[d], pre.singles[d] + max(generated - 1, 0) * dec.singles[d])
                for d in pre.singles if d in dec.singles}

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()


def read_plan(model, source: str = "<model>") -> PhasePlan | None:
    """The plan a phase's placed model records (None: not placed with ``--phases``)."""
    text = model_info(model, RECORD_KEY)
    if not text:
        return None
    try:
        return msgspec.json.decode(text, type=PhasePlan)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InputError(f"{source}: invalid hdp phases record ({e}); compile the model again") from None


def plan_of(modules: dict[str, Module], files: dict[str, str], target: Target, *, context: int = 0,
            memory=()) -> PhasePlan:
    """The :class:`PhasePlan` of each phase's final Module (as written, ``files[phase]``)."""
    records, assigns = [], {}
    for phase, m in modules.items():
        pl = m.placement
        dev = pl.device_of.numpy()
        counts = Counter(pl.devices[int(d)] for d in dev)
        state = {op.name: pl.devices[int(dev[i])] for i, op in enumerate(m.graph.ops) if op.type == "Assign"}
        assigns[phase] = (m, state)
        records.append(PhaseRecord(phase=phase, file=files[phase], ops={d: counts.get(d, 0) for d in pl.devices},
                                   state_on=tuple(sorted(set(state.values()))), seconds=_seconds(m),
                                   tokens=int(m.meta.get("seq_len", 1)) if phase == "prefill" else 1,
                                   singles=_singles(m, target, context, memory)))
    seq_len = int(next(iter(modules.values())).meta.get("seq_len", 0))
    kv, handoff, moved = 0.0, 0.0, set()
    if "prefill" in assigns:
        pm, pre = assigns["prefill"]
        kv = _state_bytes(pm)
        if "decode" in assigns:
            _, dec = assigns["decode"]
            link_latency, link_bandwidth = _link(assigns["decode"][0], target)
            sizes = _assign_inputs(pm)
            for name, a in pre.items():
                b = dec.get(name, a)
                if a == b or b in target.sharing("memory", a):
                    continue  # the same device, or memory both reach: the cache stays where it is
                handoff += link_latency + sizes.get(name, 0.0) / link_bandwidth
                moved.add(f"{a}>{b}")
    return PhasePlan(target=target.name, seq_len=seq_len, context=context, phases=tuple(records), kv_bytes=kv,
                     handoff=handoff, moved=tuple(sorted(moved)))


def _seconds(m: Module) -> float:
    info = m.placement.info
    if "simulated" not in info:
        raise InputError("--phases needs each phase's simulated latency: a pipeline with profile (costs)")
    return float(info["simulated"])


def _singles(m: Module, target: Target, context: int, memory) -> dict[str, float]:
    """Each device running every op of ``m`` (and holding it: memory, max_allocation), simulated."""
    devices = tuple(m.placement.devices)
    if tuple(target.device_names) != devices:
        return {}
    p = problem_of(m, devices, context=context)
    p = p.with_capacity(capacities(target, memory)).with_device_memory(device_memory(target))
    p = p.with_max_allocation(max_allocations(target), m.graph).with_hosts(problem_hosts(target, devices))
    sim = Simulator(p)
    return {devices[j]: float(t) for j, t in sim.singles().items() if sim.feasible(p.single(j))}


def _assign_inputs(m: Module) -> dict[str, float]:
    """Bytes each Assign stores (its input) in ``m``'s specialisation, by the Assign's name."""
    g = m.graph
    indptr, succ, eb = g.indptr.numpy(), g.indices.numpy(), g.edge_bytes.numpy()
    out: dict[str, float] = {}
    types = [op.type for op in g.ops]
    for i in range(g.n_ops):
        for e in range(int(indptr[i]), int(indptr[i + 1])):
            c = int(succ[e])
            if types[c] == "Assign":
                out[g.ops[c].name] = out.get(g.ops[c].name, 0.0) + float(eb[e])
    return out


def _state_bytes(m: Module) -> float:
    return float(sum(_assign_inputs(m).values()))


def _link(m: Module, target: Target) -> tuple[float, float]:
    c = m.costs
    if c is not None and c.link_bandwidth > 0:
        return float(c.link_latency), float(c.link_bandwidth)
    return float(target.link.latency), float(target.link.bandwidth)


def plan_lines(plan: PhasePlan, generated: int = GENERATED) -> list[str]:
    """The plan in words: each phase's placement and figures, the KV cache's hand-off, and a request
    of the prompt and ``generated`` tokens beside every device running both phases alone."""
    lines = [f"phases on {plan.target} (simulated by the cost model), a {plan.seq_len}-token prompt:"]
    for p in plan.phases:
        share = ", ".join(f"{d}: {n} ops" for d, n in p.ops.items() if n)
        if p.phase == "prefill":
            figure = (f"time to first token {ms(p.seconds)} "
                      f"({p.seconds / max(p.tokens, 1) * 1e6:.2f} µs per prompt token)")
        else:
            figure = f"time per token {ms(p.seconds)} ({1.0 / p.seconds:,.0f} tokens/s)" if p.seconds > 0 \
                else "time per token 0"
        lines.append(f"  {p.phase:<7} {p.file}: {share}; {figure}")
    if plan.phase("prefill") is not None and plan.phase("decode") is not None:
        pre, dec = plan.phase("prefill"), plan.phase("decode")
        kv = human_size(plan.kv_bytes)
        if plan.moved:
            lines.append(f"  KV cache {kv} after the prompt, on {', '.join(pre.state_on)} in the prefill and "
                         f"{', '.join(dec.state_on)} in decode: copied over the link ({', '.join(plan.moved)}), "
                         f"{ms(plan.handoff)} once per request")
        else:
            where = ", ".join(sorted(set(pre.state_on) | set(dec.state_on)))
            lines.append(f"  KV cache {kv} after the prompt, on {where}: on memory both phases' devices reach, "
                         f"handed over in place (no copy)")
        singles = plan.single_requests(generated)
        alone = "; ".join(f"{d} {ms(a)} to the first token, {ms(b)} per token" for d, (a, b, _) in singles.items())
        if alone:
            lines.append(f"  each device alone for both phases: {alone}")
        total = plan.request(generated)
        best = min(singles.items(), key=lambda kv: kv[1][2]) if singles else None
        versus = f", best single device {best[0]} {ms(best[1][2])}" if best else ""
        lines.append(f"  a request of the prompt and {generated} generated tokens: the phases as placed "
                     f"{ms(total)}{versus}")
    return lines


@dataclass
class PhasesResult:
    """What :func:`compile_phases` did: each phase's :class:`~hdp.pipeline.compile.CompileResult`,
    the plan, the files written and the report lines (as printed)."""

    results: dict[str, object]
    plan: PhasePlan
    written: dict[str, Path] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def compile_phases(model: str | Path, output: str | Path, target: Target | str, phases=PHASES, *,
                   shapes: ShapeRequest | None = None, echo=None, timings: str | Path | None = None,
                   dump_ir: str | Path | None = None, instruments=(), context: int = 0, memory=(),
                   **compile_options) -> PhasesResult:
    """Place each of ``phases`` of the stateful ``model`` on ``target`` and write one placed model per
    phase (:func:`phase_path` of ``output``), each recording the plan (see the module docstring).

    ``shapes``: the specialisation request (``--seq-len``, ``--input-shape``); its phase is set per
    phase. ``timings`` and ``dump_ir`` are written per phase (``t.prefill.json``, ``DIR/prefill``).
    ``context`` and ``memory`` are the partition's (``--context``, ``--memory`` as ``(device, bytes)``),
    also used for each single device's figures; ``compile_options`` go to
    :func:`hdp.pipeline.compile.compile_model` as they are (its ``options`` hold ``context`` and
    ``memory`` for the partition)."""
    tgt = load_target(target) if isinstance(target, str) else target
    out = Path(output)
    if out.suffix.lower() != ".xml":
        raise InputError(f"{output}: the placed models must be written to a .xml path")
    require_state(model)
    request = shapes if shapes is not None else ShapeRequest()
    lines: list[str] = []

    def emit(line: str) -> None:
        lines.append(line)
        if echo is not None:
            echo(line)

    finals = {p: phase_path(out, p) for p in phases}
    results, modules = {}, {}
    with temp_dir(out.parent, out.name) as tmp:
        staged = {p: tmp / f"{p}.xml" for p in phases}
        for p in phases:
            emit(f"phase {p}: " + ("the prompt into an empty KV cache" if p == "prefill"
                                    else "one generated token after the prompt's KV cache"))
            extra = list(instruments) + ([DumpIR(Path(dump_ir) / p)] if dump_ir else [])
            r = compile_model(model, staged[p], tgt, shapes=msgspec.structs.replace(request, phase=p),
                              instruments=extra, timings=_suffixed(timings, p),
                              echo=lambda line, p=p: emit(line.replace(str(staged[p]), str(finals[p]))),
                              **compile_options)
            release_output(staged[p])  # staged in tmp: the command's outputs are the recorded pairs below
            results[p], modules[p] = r, r.module
        plan = plan_of(modules, {p: finals[p].name for p in phases}, tgt, context=context, memory=memory)
        for line in plan_lines(plan):
            emit(line)
        recorded = {p: _record(staged[p], tmp / f"{p}.recorded.xml", plan, finals[p]) for p in phases}
        for p in phases:
            commit_pair(recorded[p], finals[p])
    return PhasesResult(results=results, plan=plan, written=dict(finals), lines=lines)


def _suffixed(path, phase: str):
    if not path:
        return None
    p = Path(path)
    return p.with_name(f"{p.stem}.{phase}{p.suffix}")


def _record(checked: Path, tmp: Path, plan: PhasePlan, final: Path) -> Path:
    """``checked`` (a placed model that passed its check) with the plan recorded, saved as ``tmp``:
    the same weights, byte for byte, and the same text but the one entry (else InputError)."""
    import openvino as ov

    model = ov.Core().read_model(str(checked))
    text = plan.to_json()
    model.set_rt_info(text, ["hdp", RECORD_KEY])
    save_uncommitted(model, tmp, final)
    if weights_digest(checked.with_suffix(".bin")) != weights_digest(tmp.with_suffix(".bin")):
        raise InputError(f"{final}: not written: recording the phases changed the weights the check ran")
    before, after = _lines_but_digest(checked), _lines_but_digest(tmp)
    added = [line for line in after if line not in before]
    if len(after) != len(before) + 1 or len(added) != 1 or f"<{RECORD_KEY} value=" not in added[0]:
        raise InputError(f"{final}: not written: recording the phases changed more of the model than the record")
    back = read_plan(ov.Core().read_model(str(tmp)), str(final))
    if back != plan:
        raise InputError(f"{final}: not written: the phases record did not read back as written")
    return tmp


def _lines_but_digest(xml: Path) -> list[str]:
    with open(xml, encoding="utf-8") as f:
        return [line for line in f if "<weights_digest value=" not in line]


def show_lines(model, source: str = "<model>") -> list[str]:
    """``hdp show``'s lines for a phase's placed model (none for another model)."""
    plan = read_plan(model, source)
    if plan is None:
        return []
    here = Path(source).name
    runs = ("; `hdp.zoo.models.generate(prefill, ids, decode=decode)` runs the two files"
            if len(plan.phases) > 1 else "")
    return plan_lines(plan) + [f"  (this file: {here}; recorded when the phases were placed{runs})"]

"""From a pipeline text to pass values, and the default pipeline of ``hdp compile``.

:func:`build_passes` converts each :class:`~hdp.pipeline.text.PassSpec` to its pass: options are
converted to the pass's typed fields (:func:`hdp.validation.convert`; the partition pass's method
and its options by :func:`hdp.placers.options.method_from`), ``target`` comes from the command's
target, and a mistake is a :class:`~hdp.pipeline.text.PipelineError` at the column of the option
(or pass) that holds it. Before anything runs, every pass's needs (:meth:`Pass.needs`, a method's
stages included) must be met by an earlier pass.

The default pipeline is text too (:func:`pipeline_specs`): ``support``, then ``profile``,
``features`` and ``coarsen`` as the method needs them on the target (costs always on a modeled
target, where the simulated latency is the result, and for ``--refine``), then ``partition`` and
``assign``. The command's flags fill options (:func:`fill`): ``--method``, ``--seed`` and the
placer's options go to ``partition``, ``--refine`` to ``assign``; in a pipeline given as text a
flag fills an option the text leaves out, and a flag that disagrees with the text is an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from hdp.errors import InputError
from hdp.passes.base import Pass
from hdp.passes.registry import PASSES, pass_class, registry
from hdp.placement.objective import EXECUTOR_COSTS
from hdp.pipeline.text import PassSpec, PipelineError, parse_pipeline, print_pipeline
from hdp.runtime.target import Target

__all__ = ["STAGE_PASS", "build_passes", "compile_schedule", "default_method", "default_text", "fill",
           "make_pass", "pipeline_specs", "runtime_options", "takes_target", "as_text"]

#: The pass that provides each stage a method may need, in the order the default pipeline runs them.
STAGE_PASS = {"costs": "profile", "features": "features", "coarse": "coarsen"}

#: Options of ``partition`` itself (beside its method's); ``target`` and ``extra_ties`` are set by hdp.
PARTITION_OPTIONS = ("method", "seed", "timeout", "objective", "requests", "memory", "context", "execution",
                     "handoff", *EXECUTOR_COSTS)
#: The partition options that say what the placement optimises and under which memory.
GOAL_OPTIONS = ("objective", "requests", "memory", "context", "execution", "handoff", *EXECUTOR_COSTS)


def takes_target(cls: type[Pass]) -> bool:
    """Whether a pass has a ``target: Target`` field (filled from --target / --devices)."""
    return any(f.name == "target" and f.type is Target for f in msgspec.structs.fields(cls))


def make_pass(name: str, options: dict) -> Pass:
    """Build a pass value from its name and options (strings are converted to the field types;
    a pass with a ``from_options`` classmethod, such as ``partition``, builds itself)."""
    reg = registry()
    if name not in reg:
        raise InputError(f"unknown pass '{name}' (known: {', '.join(sorted(reg))})")
    cls = reg[name]
    if hasattr(cls, "from_options"):
        return cls.from_options(options)
    try:
        return msgspec.convert(options, cls, strict=False)
    except msgspec.ValidationError as e:
        raise InputError(f"pass '{name}': invalid option: {e}") from None


def default_method(target: Target) -> str:
    """``single:<dev>`` for one device; ``auto`` for several (see :mod:`hdp.placers.auto`)."""
    if len(target.devices) == 1:
        return f"single:{target.devices[0].name}"
    return "auto"


def as_text(value) -> str:
    """An option value as the pipeline text holds it (``true``, ``none``, ``NPU,CPU``, ``0.5``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return ",".join(as_text(v) for v in value)
    return str(value)


# --------------------------------------------------------------------------- filling from flags


def _same(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() in ("true", "false") and a.lower() == b.lower()


def fill(specs: list[PassSpec], fills: Sequence[tuple[str, str, str, str | None]]) -> list[PassSpec]:
    """``specs`` with options filled from flags: ``fills`` holds (pass, key, value, flag); a
    flag of None is a default (it fills what is missing and yields to the text). A flag whose
    pass is not in the pipeline, or whose value disagrees with the text's, is a PipelineError."""
    specs = list(specs)
    for name, key, value, flag in fills:
        at = next((i for i in range(len(specs) - 1, -1, -1) if specs[i].name == name), None)
        if at is None:
            if flag is None:
                continue
            raise PipelineError(f"{flag}: the pipeline has no '{name}' pass to take it")
        spec = specs[at]
        have = spec.get(key)
        if have is None:
            specs[at] = spec.with_option(key, value, flag or "default")
        elif flag is not None and not _same(have, value):
            other = spec.origin(key)
            raise PipelineError(f"option '{key}' of pass '{name}' is {have!r} {'from ' + other if other else 'here'} "
                                f"and {value!r} from {flag}: give one", spec.column(key, value=True))
    return specs


def flag_fills(target: Target, method: str | None = None, seed: int | None = None, options: dict | None = None,
               refine: bool = False, labels: dict[str, str] | None = None) -> list[tuple[str, str, str, str | None]]:
    """What the command's flags put into the pipeline (see :func:`fill`). ``labels`` names the
    flag of an option (``{"budget": "--budget"}``; default ``--set KEY``)."""
    labels = labels or {}
    out: list[tuple[str, str, str, str | None]] = [("partition", "method", method, "--method")] if method else []
    if seed is not None:
        out.append(("partition", "seed", str(int(seed)), "--seed"))
    for k, v in (options or {}).items():
        out.append(("partition", k, as_text(v), labels.get(k, f"--set {k}")))
    if refine:
        out.append(("assign", "refine", "true", "--refine"))
    out.append(("partition", "method", default_method(target), None))  # what no flag and no text gave
    return out


def pipeline_specs(target: Target, passes: str | None = None, method: str | None = None, seed: int | None = None,
                   options: dict | None = None, refine: bool = False,
                   labels: dict[str, str] | None = None) -> list[PassSpec]:
    """The pipeline ``hdp compile`` runs: ``passes`` (a text) or the default for the method on
    the target, with the flags filled in (see the module docstring)."""
    fills = flag_fills(target, method, seed, options, refine, labels)
    if passes is not None:
        return fill(parse_pipeline(passes), fills)
    from hdp.placers.options import method_from

    placer = method_from(method or default_method(target),
                         {k: v for k, v in (options or {}).items() if k not in PARTITION_OPTIONS})
    # on a target with modeled devices the simulated latency is the result every method reports
    # (beside the best single device and the lower bound): costs are needed, and cheap to model
    needs = set(placer.stages(target)) | ({"costs"} if refine or not target.is_real else set())
    names = ["support", *(p for s, p in STAGE_PASS.items() if s in needs), "partition", "assign"]
    return fill([PassSpec(n) for n in names], fills)


def default_text(target: Target, method: str | None = None, options: dict | None = None,
                 refine: bool = False, seed: int | None = None) -> str:
    """The default pipeline of ``hdp compile`` on ``target`` as text (what ``hdp passes`` prints)."""
    return print_pipeline(pipeline_specs(target, None, method, seed, options, refine))


def compile_schedule(target: Target, method: str, seed: int = 0, extra: dict | None = None,
                     refine: bool = False) -> list[Pass]:
    """The passes ``hdp compile`` runs for a method on a target, in order (the default pipeline,
    built from its text). The profile always comes right after ``support`` (before features or
    coarsening), so every method that needs costs profiles the same input: one profile per model
    and target."""
    return build_passes(pipeline_specs(target, None, method, seed or None, extra, refine), target)


# --------------------------------------------------------------------------- building


def _located(e: InputError, spec: PassSpec, path: list[str], fallback: str | None = None) -> PipelineError:
    """``e`` at the column of the option its field path starts with, else of option
    ``fallback``, else of the pass name."""
    if isinstance(e, PipelineError):
        return e
    key = path[-1].split(".")[0].split("[")[0] if path else None
    if key is None:  # a pass's own check: the one option its message names, if one
        named = [k for k, _ in spec.options if re.search(rf"\b{re.escape(k)}\b", str(e))]
        key = named[0] if len(named) == 1 else None
    for k in (key, fallback):
        if k is not None and spec.get(k) is not None:
            return PipelineError(str(e), spec.column(k, value=True))
    return PipelineError(str(e), spec.column())


def _unknown(spec: PassSpec, known: Sequence[str], what: str) -> None:
    for k, _ in spec.options:
        if k.replace("-", "_") not in known and spec.origin(k) is None:
            raise PipelineError(f"unknown option '{k}' of {what} (its options: {', '.join(known) or 'none'})",
                                spec.column(k))


def _build_partition(spec: PassSpec, target: Target) -> Pass:
    from hdp.placers.options import METHODS, method_from
    from hdp.validation import convert

    cls = pass_class("partition")
    opts = {k.replace("-", "_"): v for k, v in spec.options}
    method = opts.pop("method", "hetero-auto")
    name = method.partition(":")[0]
    if name not in METHODS:
        raise PipelineError(f"unknown method '{method}' (known: {', '.join(sorted(METHODS))})",
                            spec.column("method", value=True))
    known = PARTITION_OPTIONS + tuple(f.name for f in msgspec.structs.fields(METHODS[name]))
    _unknown(spec, known, f"pass 'partition' with method '{name}'")
    own = {k: opts.pop(k) for k in PARTITION_OPTIONS[1:] if k in opts}
    path: list[str] = []

    def message(at: str, what: str, _cls=METHODS[name]) -> str:
        path.append(at)
        return _cls._message(at, what)

    def own_message(at: str, what: str) -> str:
        path.append(at)
        return f"pass 'partition' option '{at}' {what}"

    goal_opts = {k: own.pop(k) for k in GOAL_OPTIONS if k in own}
    try:
        goal = cls.goal_fields(goal_opts)
    except InputError as e:
        raise _located(e, spec, [], next(iter(k for k in GOAL_OPTIONS if spec.get(k) is not None), None)) from None
    try:
        placer = method_from(method, opts, message=message)
        fields = convert(own | {"target": target}, cls, own_message, strict=False) if own else None
    except InputError as e:  # a bad NAME:ARG argument is at the method's column
        raise _located(e, spec, path, "method") from None
    extra = {k: getattr(fields, k) for k in own} if fields is not None else {}
    return cls(target=target, placer=placer, **goal, **extra)


def build_pass(spec: PassSpec, target: Target) -> Pass:
    """The pass value of one spec (see the module docstring)."""
    if spec.name not in PASSES:
        raise PipelineError(f"unknown pass '{spec.name}' (known: {', '.join(sorted(PASSES))})", spec.column())
    if spec.name == "partition":
        return _build_partition(spec, target)
    cls = pass_class(spec.name)
    options = {k.replace("-", "_"): v for k, v in spec.options}
    if hasattr(cls, "from_options"):  # a pass that builds itself from flat options (boundary)
        try:
            return cls.from_options(options | ({"target": target} if takes_target(cls) else {}))
        except InputError as e:
            raise _located(e, spec, []) from None
    known = [f.name for f in msgspec.structs.fields(cls) if f.name != "target"]
    _unknown(spec, known, f"pass '{spec.name}'")
    from hdp.validation import convert

    path: list[str] = []

    def message(at: str, what: str) -> str:
        path.append(at)
        return f"pass '{spec.name}' option '{at}' {what}"

    data = options | ({"target": target} if takes_target(cls) else {})
    try:
        p = convert(data, cls, message, strict=False)
        if callable(getattr(p, "check", None)):  # a pass that checks its options itself (coarsen)
            p.check()
    except InputError as e:
        raise _located(e, spec, path) from None
    return p


def build_passes(specs: Sequence[PassSpec], target: Target, available: Sequence[str] = ("graph",)) -> list[Pass]:
    """The pass values of a pipeline, checked: every pass's needs are met by ``available`` (what
    lowering gives) or an earlier pass, else a PipelineError at the pass that needs more."""
    from hdp.passes.manager import unmet, unmet_message

    passes = [build_pass(s, target) for s in specs]
    found = unmet(passes, available)
    if found is not None:
        raise PipelineError(unmet_message(passes, available, *found), specs[found[0]].column())
    return passes


def runtime_options(passes: list, timeout: float | None, cache) -> list:
    """Passes with their runtime-only fields set (never part of a cache key): ``timeout`` from
    ``--timeout``, ``query_cache`` (support answers) inside the pass cache directory."""
    from pathlib import Path

    out = []
    for p in passes:
        fields = p.__struct_fields__
        changes = {}
        if timeout and "timeout" in fields:
            changes["timeout"] = float(timeout)
        if cache is not None and "query_cache" in fields:
            changes["query_cache"] = str(Path(cache.dir) / "support")
        out.append(msgspec.structs.replace(p, **changes) if changes else p)
    return out


def run_passes(module, passes: list, *, cache=None, timeout: float | None = None, instruments=()):
    """Run ``passes`` over ``module`` with one manager (``cache``: a
    :class:`~hdp.passes.cache.PassCache` or None), their runtime options set first
    (:func:`runtime_options`): what ``hdp pass``, ``hdp profile`` and ``hdp calibrate`` run."""
    from hdp.passes.manager import PassManager

    return PassManager(runtime_options(list(passes), timeout, cache), cache=cache,
                       instruments=list(instruments)).run(module)

"""From a pipeline text to pass values, and the default pipeline of ``hdp compile``.

:func:`build_passes` converts each :class:`~hdp.pipeline.text.PassSpec` to its pass, every pass
the same way: its flat options reshaped into its fields (:meth:`Pass.fields_from`: the partition
pass's method and objective options become its ``placer`` and ``objective``), converted and bounded
by the fields' declarations (:func:`hdp.base.validation.convert`), ``target`` from the command's
target; a mistake is a :class:`~hdp.pipeline.text.PipelineError` at the column of the option (or
pass) that holds it. Option values are text from a pipeline text, or typed values from a
command's flags (parsed once, where the flag was read). Before anything runs, every pass's needs (:meth:`Pass.needs`, a method's
stages included) must be met by an earlier pass.

The default pipeline is text too (:func:`plan`): ``support``, then ``profile``,
``features`` and ``coarsen`` as the method needs them on the target (costs always on a modeled
target, where the simulated latency is the result, and for ``--refine``), then ``partition`` and
``assign``. The command's flags fill options (:func:`fill`): ``--method``, ``--seed`` and the
placer's options go to ``partition``, ``--refine`` to ``assign``; in a pipeline given as text a
flag fills an option the text leaves out, and a flag that disagrees with the text is an error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import msgspec

from hdp.base.errors import InputError
from hdp.base.validation import convert
from hdp.passes.base import Pass
from hdp.passes.manager import PassManager, unmet, unmet_message
from hdp.passes.registry import PASSES, pass_class, registry
from hdp.pipeline.text import PassSpec, PipelineError, as_text, parse_pipeline, print_pipeline
from hdp.target.target import Target

__all__ = ["STAGE_PASS", "build_passes", "compile_schedule", "default_method", "default_text", "fill",
           "make_pass", "pipeline_specs", "plan", "runtime_options", "takes_target"]

#: The pass that provides each stage a method may need, in the order the default pipeline runs them.
STAGE_PASS = {"costs": "profile", "features": "features", "coarse": "coarsen"}

def takes_target(cls: type[Pass]) -> bool:
    """Whether a pass has a ``target: Target`` field (filled from --target / --devices)."""
    return any(f.name == "target" and f.type is Target for f in msgspec.structs.fields(cls))


def make_pass(name: str, options: dict) -> Pass:
    """Build a pass value from its name and flat options (``hdp pass NAME --set ...``): the path
    of :func:`build_pass`, errors without a column."""
    reg = registry()
    if name not in reg:
        raise InputError(f"unknown pass '{name}' (known: {', '.join(sorted(reg))})")
    return _build(reg[name], {k.replace("-", "_"): v for k, v in options.items()})


def default_method(target: Target) -> str:
    """``single:<dev>`` for one device; ``auto`` for several (see :mod:`hdp.placers.auto`)."""
    if len(target.devices) == 1:
        return f"single:{target.devices[0].name}"
    return "auto"


# --------------------------------------------------------------------------- filling from flags


def _same(a, b) -> bool:
    a, b = as_text(a), as_text(b)
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return a.lower() in ("true", "false") and a.lower() == b.lower()


def fill(specs: list[PassSpec], fills: Sequence[tuple[str, str, object, str | None]]) -> list[PassSpec]:
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
            raise PipelineError(f"option '{key}' of pass '{name}' is {as_text(have)!r} "
                                f"{'from ' + other if other else 'here'} and {as_text(value)!r} from {flag}: give one",
                                spec.column(key, value=True))
    return specs


def flag_fills(target: Target, method: str | None = None, seed: int | None = None, options: dict | None = None,
               refine: bool = False, labels: dict[str, str] | None = None) -> list[tuple[str, str, object, str | None]]:
    """What the command's flags put into the pipeline (see :func:`fill`). ``labels`` names the
    flag of an option (``{"budget": "--budget"}``; default ``--set KEY``)."""
    labels = labels or {}
    out: list[tuple[str, str, object, str | None]] = [("partition", "method", method, "--method")] if method else []
    if seed is not None:
        out.append(("partition", "seed", seed, "--seed"))
    for k, v in (options or {}).items():  # typed values stay typed: parsed once, where the flag was
        out.append(("partition", k, v, labels.get(k, f"--set {k}")))
    if refine:
        out.append(("assign", "refine", "true", "--refine"))
    out.append(("partition", "method", default_method(target), None))  # what no flag and no text gave
    return out


def plan(target: Target, passes: str | None = None, method: str | None = None, seed: int | None = None,
         options: dict | None = None, refine: bool = False,
         labels: dict[str, str] | None = None) -> tuple[list[PassSpec], list[Pass]]:
    """The pipeline ``hdp compile`` runs, as specs and as checked pass values: ``passes`` (a
    text) or the default for the method on the target, with the flags filled in (see the module
    docstring). Each pass is built once: the default pipeline's stages are the built partition
    pass's needs (so ``--method`` is parsed once)."""
    fills = flag_fills(target, method, seed, options, refine, labels)
    if passes is not None:
        specs = fill(parse_pipeline(passes), fills)
        return specs, build_passes(specs, target)
    tail = fill([PassSpec("partition"), PassSpec("assign")], fills)
    partition = build_pass(tail[0], target)
    # on a target with modeled devices the simulated latency is the result every method reports
    # (beside the best single device and the lower bound): costs are needed, and cheap to model
    needs = set(partition.needs()) | ({"costs"} if refine or not target.is_real else set())
    specs = [PassSpec("support"), *(PassSpec(p) for s, p in STAGE_PASS.items() if s in needs), *tail]
    built = [build_pass(sp, target) for sp in specs[:-2]] + [partition, build_pass(tail[1], target)]
    return specs, _checked(built, specs)


def pipeline_specs(target: Target, passes: str | None = None, method: str | None = None, seed: int | None = None,
                   options: dict | None = None, refine: bool = False,
                   labels: dict[str, str] | None = None) -> list[PassSpec]:
    """The specs of :func:`plan` (a given text only filled, not built)."""
    if passes is not None:
        return fill(parse_pipeline(passes), flag_fills(target, method, seed, options, refine, labels))
    return plan(target, passes, method, seed, options, refine, labels)[0]


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
    return plan(target, None, method, seed or None, extra, refine)[1]


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


def _build(cls: type[Pass], options: dict, path: list[str] | None = None) -> Pass:
    """A pass of class ``cls`` from flat options: reshaped into its fields (``cls.fields_from``),
    converted and bounded by their declarations, then checked (a pass's ``check``, if any). A bad
    value is an InputError worded by ``cls.option_message``; the option it names is appended to
    ``path``."""
    path = [] if path is None else path

    def message(at: str, what: str) -> str:
        option, line = cls.option_message(options, at, what)
        path.append(option)
        return line

    p = convert(cls.fields_from(options), cls, message, strict=False)
    if callable(getattr(p, "check", None)):  # a pass that checks its options itself (coarsen)
        p.check()
    return p


def build_pass(spec: PassSpec, target: Target) -> Pass:
    """The pass value of one spec (see the module docstring); a mistake is a PipelineError at the
    column of the option that holds it."""
    if spec.name not in PASSES:
        raise PipelineError(f"unknown pass '{spec.name}' (known: {', '.join(sorted(PASSES))})", spec.column())
    cls = pass_class(spec.name)
    options = {k.replace("-", "_"): v for k, v in spec.options}
    if hasattr(cls, "from_options"):  # a pass that builds itself from flat options (boundary)
        try:
            return cls.from_options(options | ({"target": target} if takes_target(cls) else {}))
        except InputError as e:
            raise _located(e, spec, []) from None
    _unknown(spec, *cls.known_options(options))
    path: list[str] = []
    try:
        return _build(cls, options | ({"target": target} if takes_target(cls) else {}), path)
    except InputError as e:
        # a value the option names only through another (a method's NAME:ARG) is at the first option
        raise _located(e, spec, path, next((k for k, _ in spec.options), None)) from None


def _checked(passes: list[Pass], specs: Sequence[PassSpec], available: Sequence[str] = ("graph",)) -> list[Pass]:
    found = unmet(passes, available)
    if found is not None:
        raise PipelineError(unmet_message(passes, available, *found), specs[found[0]].column())
    return passes


def build_passes(specs: Sequence[PassSpec], target: Target, available: Sequence[str] = ("graph",)) -> list[Pass]:
    """The pass values of a pipeline, checked: every pass's needs are met by ``available`` (what
    lowering gives) or an earlier pass, else a PipelineError at the pass that needs more."""
    return _checked([build_pass(s, target) for s in specs], specs, available)


def runtime_options(passes: list, timeout: float | None, cache) -> list:
    """Passes with their runtime-only fields set (never part of a cache key): ``timeout`` from
    ``--timeout``, ``query_cache`` (support answers) inside the pass cache directory."""

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

    return PassManager(runtime_options(list(passes), timeout, cache), cache=cache,
                       instruments=list(instruments)).run(module)

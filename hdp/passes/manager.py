"""Runs a schedule of stages — passes, and the steps at a pipeline's edges (lower, check, raise) —
through one path: the schedule is validated from what each stage needs and provides; per stage,
instruments are told before and after, a keyed stage's output is read from or written to the cache,
and a pass's output is verified.

A pass (:class:`~hdp.passes.base.Pass`) is keyed by hash(name, version, options, input digest). An
edge stage implements :class:`Stage`: it names itself, says what it needs and provides, and gives
its own key (lower: the model file and the shape request) or none (check and raise run every time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from hdp.base.errors import HdpError, PassError, is_stale
from hdp.ir import serde
from hdp.ir.types import STAGES, Module
from hdp.ir.verify import VerifyError, verify
from hdp.passes.base import Pass
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument
from hdp.passes.registry import registry
from hdp.target.host import host_fingerprint


class Stage(Protocol):
    """A step the manager runs that is not a pass over a Module: lowering a model file (no
    input), checking a placement (never cached), writing the placed model (a file out). Its
    errors are the user's own one-line errors (naming the file), not wrapped as a pass's."""

    name: str

    def needs(self) -> tuple[str, ...]:
        """Module stages the input must hold."""

    def gives(self) -> tuple[str, ...]:
        """Module stages the output holds beyond the input's."""

    def cache_key(self) -> str | None:
        """The key of the output in the pass cache; None: not cached (run every time)."""

    def accepts(self, before: Module | None, after: Module) -> bool:
        """Whether a cached ``after`` can be this stage's output for ``before``."""

    def run(self, module: Module | None) -> Module:
        ...


def pass_key(p: Pass, input_digest: str) -> str:
    """hash(name, version, encoded options but ``key_exclude``, input digest), plus the host
    fingerprint for a pass whose output depends on the host (:meth:`Pass.depends_on_host`)."""
    parts = [p.pass_name(), type(p).version, p.key_value(), input_digest]
    if p.depends_on_host():
        parts.append(host_fingerprint())
    return serde.digest_bytes(serde.encode_any(parts))


def stage_name(s: Pass | Stage) -> str:
    return s.pass_name() if isinstance(s, Pass) else s.name


def _gives(s: Pass | Stage) -> tuple[str, ...]:
    return type(s).provides if isinstance(s, Pass) else s.gives()


def unmet(stages: Sequence[Pass | Stage], available: Sequence[str]) -> tuple[int, list[str]] | None:
    """(index, missing) of the first stage that needs what neither ``available`` nor an earlier
    stage provides; None when every need is met."""
    have = set(available)
    for i, s in enumerate(stages):
        missing = [r for r in s.needs() if r not in have]
        if missing:
            return i, missing
        have.update(_gives(s))
    return None


def providers(stage: str) -> list[str]:
    """The passes (by name) that provide a Module stage."""

    return [n for n, cls in registry().items() if stage in cls.provides and n != "boundary"]


def unmet_message(stages: Sequence[Pass | Stage], available: Sequence[str], index: int, missing: list[str]) -> str:
    """``pass 'assign' requires partition, which no earlier pass provides (have: ...; partition comes from ...)``."""
    s = stages[index]
    have = set(available)
    for earlier in stages[:index]:
        have.update(_gives(earlier))
    what = "pass" if isinstance(s, Pass) else "stage"
    hint = "; ".join(f"{m} comes from {' or '.join(providers(m))}" for m in missing if providers(m))
    return (f"{what} '{stage_name(s)}' requires {', '.join(missing)}, which no earlier pass provides "
            f"(have: {', '.join(x for x in STAGES if x in have) or 'nothing'}{'; ' + hint if hint else ''})")


def check_schedule(passes: Sequence[Pass | Stage], available: Sequence[str]) -> None:
    """Raise if a stage requires a Module stage that neither the input nor an earlier stage provides."""
    found = unmet(passes, available)
    if found is not None:
        raise HdpError(unmet_message(passes, available, *found))


#: Meta entries that tie a module to its source model; no pass changes them.
SOURCE_META = ("source", "source_digest", "specialisation")


def consistent(before: Module, after: Module, p: Pass) -> bool:
    """Whether ``after`` (a cached output of ``p``) can be ``p``'s output for ``before``: the same
    graph, source and every stage ``p`` does not provide. An entry that decodes and verifies may
    still hold another model's module (forged, or written under a wrong key)."""
    if after.graph != before.graph or after.schema != before.schema:
        return False
    if any(after.meta.get(k) != before.meta.get(k) for k in SOURCE_META):
        return False
    return all(getattr(after, s) == getattr(before, s) for s in STAGES
               if s != "graph" and s not in type(p).provides)


class PassManager:
    """Runs ``passes`` (passes and :class:`Stage` values, in order) with one cache and one list of
    instruments; :meth:`run` can also run another list through the same cache and instruments."""

    def __init__(self, passes: Sequence[Pass | Stage], cache: PassCache | None = None,
                 instruments: Sequence[Instrument] = (), verify_each: bool = True):
        self.passes = list(passes)
        self.cache = cache
        self.instruments = list(instruments)
        self.verify_each = verify_each

    def run(self, module: Module | None, stages: Sequence[Pass | Stage] | None = None) -> Module:
        """Run ``stages`` (default: this manager's) from ``module`` (None before lowering)."""
        stages = self.passes if stages is None else list(stages)
        check_schedule(stages, module.stages() if module is not None else ())
        digest = None  # of ``module``, computed when a pass needs it for its key
        for s in stages:
            module, digest = self._step(s, module, digest)
        return module

    def _step(self, s: Pass | Stage, module: Module | None, digest: str | None) -> tuple[Module, str | None]:
        is_pass = isinstance(s, Pass)
        name = stage_name(s)
        if is_pass:
            digest = digest or serde.digest(module)
            key = pass_key(s, digest)
        else:
            key = s.cache_key()
        for ins in self.instruments:
            ins.before(name, key or "")
        out = self.cache.get(key) if self.cache and key else None
        if out is not None and not (consistent(module, out, s) if is_pass else s.accepts(module, out)):
            self.cache.discard([key], f"{'pass' if is_pass else 'stage'} '{name}' output for another input")
            out = None
        hit = out is not None
        if out is None:
            out = self._compute(s, name, module) if is_pass else s.run(module)
        if key and (is_pass or self.cache):  # a pass's digest keys the next pass, cached or not
            encoded = serde.encode(out)
            if self.cache and not hit:
                self.cache.put(key, out, encoded)
            digest = serde.digest_bytes(encoded)
        elif out is not module:
            digest = None
        for ins in self.instruments:
            ins.after(name, key or "", hit, out)
        return out, digest

    def _compute(self, p: Pass, name: str, module: Module) -> Module:
        try:
            out = p.run(module)
        except HdpError as e:
            if isinstance(e, PassError):
                raise
            msg = str(e)
            if is_stale(e) and self.cache is not None and self.cache.hits:
                # a module read from the cache may be another model's: without this, every
                # later run would read it again and fail the same way
                self.cache.discard(self.cache.hits, msg)
                msg += " (it came from the cache, which is now discarded: run the command again)"
            raise PassError(name, msg, stale=is_stale(e)) from e
        if self.verify_each:
            try:
                verify(out)
            except VerifyError as e:
                raise PassError(name, f"produced an invalid module: {e}") from e
        return out

"""The stages at the edges of ``hdp compile``'s pipeline, run by the same
:class:`~hdp.passes.manager.PassManager` as the passes (one cache, one instrument path):

- :class:`Lower`: the model file to a Module (the frontend). Cached under hash(frontend version,
  model path and digest, shape request); a cached module of another file is discarded.
- :class:`Check`: the placement run under HETERO against the original, repaired or fallen back
  when it fails (:func:`hdp.runtime.serve.verify.verify_and_repair`). Never cached. A repair places
  again with ties learned from the failure: the pipeline's partition pass (found by type) and the
  passes after it run again through the same manager.
- :class:`Raise`: the placed model written atomically. When a :class:`Check` ran with the output
  under HETERO (the default), the check saved each placement it checked whole to a temporary file
  beside the output and checked that file (:class:`hdp.runtime.placed.model.StagedPlaced`): Raise
  commits the file that passed, without compiling it again. Otherwise it writes
  (:func:`hdp.runtime.placed.model.write_placed`), checking the file first when a check ran. Its output
  is a file; the Module passes through.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import msgspec
import numpy as np

from hdp.base.errors import HdpError, InputError, is_stale
from hdp.ir import serde
from hdp.ir.openvino_frontend import lower
from hdp.ir.openvino_read import file_digest
from hdp.ir.plan import PlanSimulated
from hdp.ir.shapes import as_request
from hdp.ir.types import Module
from hdp.passes.base import Pass
from hdp.passes.cache import PassCache
from hdp.passes.instruments import Instrument
from hdp.passes.manager import PassManager
from hdp.passes.partition import PartitionPass
from hdp.placement.objective import Concurrent
from hdp.placement.plan import GroupPlan
from hdp.runtime.placed.model import StagedPlaced, write_placed
from hdp.runtime.serve.plan_write import plan_of, write_plan
from hdp.runtime.serve.verify import PlacementChecker, verify_and_repair
from hdp.target.target import Target

T = TypeVar("T")

#: Bump when the frontend's output changes for the same model file.
FRONTEND_VERSION = 5


class Lower:
    """Lower a model file (OpenVINO .xml or .onnx) at a shape request
    (:class:`~hdp.ir.specialise.ShapeRequest`, a ``{input: shape}`` dict, or None)."""

    name = "lower"

    def __init__(self, model: str | Path, request=None):
        self.model = Path(model)
        self.request = as_request(request)

    def needs(self) -> tuple[str, ...]:
        return ()

    def gives(self) -> tuple[str, ...]:
        return ("graph",)

    def cache_key(self) -> str | None:
        if not self.model.is_file():
            return None  # lowering says what is wrong with it
        return serde.digest_bytes(serde.encode_any(
            ["lower", FRONTEND_VERSION, str(self.model.resolve()), file_digest(self.model), self.request]))

    def accepts(self, before: Module | None, after: Module) -> bool:
        return (after.meta.get("source") == str(self.model.resolve())
                and after.meta.get("source_digest") == file_digest(self.model))

    def run(self, module: Module | None) -> Module:
        return lower(self.model, self.request)


class _AfterPlacement:
    """A stage over the final placement that adds nothing to the Module and is never cached
    (it runs every time: a check of the devices as they are now, a file written)."""

    name = ""

    def needs(self) -> tuple[str, ...]:
        return ("placement",)

    def gives(self) -> tuple[str, ...]:
        return ()

    def cache_key(self) -> None:
        return None

    def accepts(self, before, after) -> bool:
        return False


class Check(_AfterPlacement):
    """Check the placement before it is written; repair it or fall back to one device (see the
    module docstring). ``passes`` is the pipeline's; ``verified`` holds what the check did, and
    ``checker`` stays open for :class:`Raise` to check the written file (:meth:`close` it)."""

    name = "check"

    def __init__(self, target: Target, manager: PassManager, passes: Sequence[Pass], timeout: float | None = None,
                 output: str | Path | None = None):

        self.target = target
        self.manager = manager
        self.passes = list(passes)
        self.timeout = timeout
        self.checker = None
        self.verified = None
        #: with ``output``: each placement checked whole is saved as the placed file, and that file
        #: is what is checked (under HETERO); the last one waits here for :class:`Raise` to commit
        self.staged = StagedPlaced(output, target) if output is not None else None

    def run(self, module: Module) -> Module:

        part = next((p for p in self.passes if isinstance(p, PartitionPass)), None)
        execution = "concurrent" if part is not None and isinstance(part.objective, Concurrent) else "sequential"
        self.checker = PlacementChecker(module, self.target, **({"timeout": self.timeout} if self.timeout else {}),
                                        execution=execution, stage=self.staged.stage if self.staged else None)
        self.verified = verify_and_repair(module, self.target, self.replace, self.checker)
        return self.verified.module

    def replace(self, module: Module, ties: tuple) -> Module:
        """Place ``module`` again with ``ties`` (pairs of ops that must share a device): the
        pipeline's partition pass with these extra ties, and every pass after it."""

        at = next((i for i in range(len(self.passes) - 1, -1, -1) if isinstance(self.passes[i], PartitionPass)), None)
        if at is None:
            raise HdpError("the placement failed its check and the pipeline has no partition pass to place it again")
        rest = [msgspec.structs.replace(self.passes[at], extra_ties=ties), *self.passes[at + 1:]]
        cleared = {s: None for p in rest for s in type(p).provides if s != "graph"}
        return self.manager.run(module.replace(**cleared), rest)

    def close(self) -> None:
        if self.checker is not None:
            self.checker.close()
            self.checker = None
        if self.staged is not None:
            self.staged.close()


class Raise(_AfterPlacement):
    """Write the placed model to ``output`` (.xml and .bin); with ``check`` (a :class:`Check`
    that ran), the file as written is checked before it is committed: the one the check staged
    and checked when it holds this very module, else a fresh write checked here."""

    name = "raise"

    def __init__(self, output: str | Path, target: Target, check: Check | None = None):
        self.output = Path(output)
        self.target = target
        self.check = check

    def run(self, module: Module) -> Module:
        staged = self.check.staged if self.check is not None else None
        if staged is not None and staged.out_xml == self.output and staged.commit(module):
            return module
        checker = self.check.checker if self.check is not None else None
        pl = module.placement
        used = sorted({pl.devices[int(d)] for d in pl.device_of.numpy()})
        write_placed(module, self.output, self.target,
                     check=(lambda tmp: checker.check_file(tmp, used)) if checker is not None else None)
        return module


class RaisePlan(_AfterPlacement):
    """Write the serving plan the placement was chosen with to the directory ``output``
    (:func:`hdp.runtime.serve.plan_write.write_plan`: ``plan.json`` and its blobs, or a pipeline's
    placed model). A placement that is not the plan's (the check repaired it or fell back to one
    device) is written as the plan it is: one stage per device. ``written`` holds the plan and
    ``note`` what changed."""

    name = "raise"

    def __init__(self, output: str | Path, target: Target):
        self.output = Path(output)
        self.target = target
        self.written = None
        self.note = ""

    def run(self, module: Module) -> Module:
        part = module.partition
        gd = part.group_device.numpy()
        gplan = plan_of(module)
        anchor = part.group_of.numpy().astype(np.int64)
        has = anchor >= 0
        written = module.placement.device_of.numpy()
        if not np.array_equal(gd[anchor[has]], written[has]):  # the check fell back: the placement is what counts
            gd = np.zeros_like(gd)
            np.put(gd, anchor[has], written[has])
        if gplan is None or not np.array_equal(gplan.representative(), gd):
            if gplan is not None:
                self.note = ("the placement checked is not the plan's (repaired or fallen back): written as the "
                             "plan it is, one stage per device")
            gplan = GroupPlan.from_placement(gd)
        info = part.info
        sim = None
        if "plan_period" in info:
            gap = info.get("plan_gap")
            sim = PlanSimulated(period=float(info["plan_period"]), latency=float(info.get("plan_latency", 0)),
                                bound=float(info.get("plan_bound", 0)), gap=float(gap) if gap else None,
                                bound_by=info.get("plan_bound_by", ""), exact=info.get("plan_exact") == "True")
        self.written = write_plan(module, self.output, self.target, requests=int(info.get("requests", 2)),
                                  simulated=sim if not self.note else None, plan=gplan)
        return module


def raise_module(module: Module, output: str | Path, target: Target, check: bool = True,
                 timeout: float | None = None):
    """``hdp pass raise``: write ``module``'s placement as the placed model ``output`` on
    ``target`` (what :class:`Raise` writes at the end of ``hdp compile``), the file as written run
    under HETERO against the original first (``check``; a failure writes nothing). Returns the
    check's :class:`~hdp.runtime.serve.verify.CheckResult` (None: not checked)."""
    if module.placement is None:
        raise InputError("the module has no placement: run `hdp pass partition` and `hdp pass assign` first")
    if tuple(module.placement.devices) != target.device_names:
        raise InputError(f"the module was placed on {', '.join(module.placement.devices)}, target '{target.name}' has "
                         f"{', '.join(target.device_names)}: give the --target it was placed for")
    if not check:
        write_placed(module, output, target)
        return None
    pl = module.placement
    used = sorted({pl.devices[int(d)] for d in pl.device_of.numpy()})
    result = []
    with PlacementChecker(module, target, **({"timeout": timeout} if timeout else {})) as checker:
        def run(tmp):
            result.append(checker.check_file(tmp, used))
            return result[-1]

        write_placed(module, output, target, check=run)
    return result[-1] if result else None


def lower_cached(xml: str | Path, request, cache: PassCache | None, instruments: Sequence[Instrument] = ()) -> Module:
    """Lower a model, reusing a cached Module when the model files and the requested
    specialisation (a :class:`~hdp.ir.specialise.ShapeRequest`, or a ``{input: shape}``
    dict) are unchanged: the :class:`Lower` stage run by a manager."""
    return PassManager([Lower(xml, request)], cache=cache, instruments=list(instruments)).run(None)


def recompute_if_stale(cache: PassCache | None, run: Callable[[], T]) -> T:
    """``run()``; if it fails because a module no longer matches its model (a
    :class:`~hdp.base.errors.StaleInput`, such as a lowered module whose ops are not the file's) and the
    pass cache supplied modules to it, those entries are discarded with a warning and ``run()`` is
    repeated once without reading the cache. A cache entry can decode, verify and still belong to
    another model; without this, such an entry would fail every later run."""

    first = len(cache.hits) if cache is not None else 0
    try:
        return run()
    except HdpError as e:
        if cache is None or not is_stale(e) or len(cache.hits) == first:
            raise
        cache.discard(cache.hits[first:], str(e))  # (the pass manager may have done so already)
    cache.reading = False
    try:
        return run()
    finally:
        cache.reading = True

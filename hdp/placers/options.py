"""The placement methods as typed option values (what ``--method`` and ``--set`` build).

Each method is a frozen Struct whose tag is its name; the ``partition`` pass holds one of them
(:data:`Method`, a tagged union), so the options of one method never leak into another's and
every option is part of the pass's cache key. This module is light: the implementations are
imported only when a method runs (:func:`hdp.placers.implementation`).

``--method NAME:ARG`` sets the method's ``arg_field`` (``single:CPU_B``, ``hetero-auto:NPU,CPU``,
``optimal:ilp``, ``hsdag:measure``, ``auto:no``).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Union

import msgspec
from msgspec import Meta

from hdp.base.errors import InputError
from hdp.base.validation import AtLeastOne, Count, Duration, NonNegative, Share, TimeLimit, convert, recheck
from hdp.learn.config import Algo, Baseline, Episodes, Hidden, LearningRate, RewardShape, Samples


class PlacerOptions(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True, tag_field="method"):
    """Base of every method's options."""

    #: Module stages the method needs beyond graph and support.
    needs: ClassVar[tuple[str, ...]] = ()
    #: The field ``--method NAME:ARG`` sets (empty: the method takes no argument).
    arg_field: ClassVar[str] = ""
    #: Whether the result depends on ``seed``.
    seeded: ClassVar[bool] = False
    #: One line for ``hdp passes``.
    summary: ClassVar[str] = ""
    #: The objectives (:mod:`hdp.placement.objective` kinds) the method can place for; ``place()``
    #: refuses the others with a one-line error.
    serves: ClassVar[frozenset[str]] = frozenset({"latency", "throughput", "concurrent"})
    #: ``"module:function"`` that runs the method: ``(options, PlaceContext) -> Placed``, imported on
    #: first use (:func:`hdp.placers.implementation`).
    implementation: ClassVar[str] = ""

    def served(self, target=None) -> frozenset[str]:
        """The objectives this method, with these options, can place for on ``target`` (default:
        the class's :attr:`serves`)."""
        return type(self).serves

    @classmethod
    def name(cls) -> str:
        return cls.__struct_config__.tag

    def check(self) -> None:
        """InputError naming the first option outside its declared bounds (an option value built
        in Python; :func:`method_from` checks while it converts)."""
        recheck(self, self._message)

    @classmethod
    def _message(cls, path: str, what: str) -> str:
        return f"{cls.name()} option '{path}' {what}"

    def stages(self, target=None) -> tuple[str, ...]:
        """Module stages this method needs on ``target`` (a Target, or None when unknown)."""
        return type(self).needs

    def label(self) -> str:
        """``name`` or ``name:arg``, as given to ``--method``."""
        arg = getattr(self, self.arg_field) if self.arg_field else ""
        if isinstance(arg, tuple):
            arg = ",".join(arg)
        return f"{self.name()}:{arg}" if arg and arg != "auto" else self.name()


class Single(PlacerOptions, tag="single"):
    implementation = "hdp.placers.basic:single"
    device: str = ""  # "" = the target's first device
    arg_field = "device"
    summary = "every op on one device: single:<DEVICE> (default: the target's first device)"


class HeteroAuto(PlacerOptions, tag="hetero-auto"):
    implementation = "hdp.placers.basic:hetero_auto"
    priority: tuple[str, ...] = ()  # () = the target's order
    arg_field = "priority"
    summary = "OpenVINO's rule: each op on the first device (in priority order) that supports it"


class PipelineParallel(PlacerOptions, tag="pipeline-parallel"):
    implementation = "hdp.placers.basic:pipeline_parallel"
    priority: tuple[str, ...] = ()  # () = the target's order
    margin: Annotated[float, Meta(ge=1, le=10)] = 1.2  # OpenVINO's factor on constant bytes
    arg_field = "priority"
    summary = ("OpenVINO's MODEL_DISTRIBUTION_POLICY=PIPELINE_PARALLEL rule: ops in order on the first device "
               "(priority order) until 1.2 x its constants pass its memory, then the next")


class Random(PlacerOptions, tag="random"):
    implementation = "hdp.placers.classical:random_placement"
    seeded = True
    summary = "a uniformly random allowed device per tie group (per coarse group when coarsened), seeded"


class Heft(PlacerOptions, tag="heft"):
    implementation = "hdp.placers.classical:heft"
    needs = ("costs",)
    summary = "HEFT list scheduling: upward rank, earliest finish time with transfer costs"


#: ``optimal``'s default margin on measured costs that carry no per-op standard errors (profiled by
#: an hdp before schema 3) and no calibration: the uncalibrated simulator's worst mixed-placement
#: error seen on the zoo on ``virtual`` (-15 % ... +8 %, issue 10).
UNCALIBRATED_MARGIN = 0.15


class Optimal(PlacerOptions, tag="optimal"):
    implementation = "hdp.placers.classical:optimal"
    solver: Literal["", "mincut", "ilp"] = ""  # "" = mincut for 2 devices, ilp for more
    time_limit: TimeLimit = 60.0  # seconds for the placement, 90 % of them for the ILP / MILP
    mip_gap: Share = 1e-4  # ILP relative gap at which HiGHS stops
    boundary_penalty: NonNegative | None = None  # seconds per copy (default: the subgraph overhead)
    #: keep the best single device unless the optimum is predicted faster than it by more than this
    #: share of its latency; None: the noise of that prediction from the profile's per-op standard
    #: errors, with the calibration's error when calibrated (hdp.placers.classical), 0 on modeled costs
    margin: Annotated[float, Meta(ge=0, lt=1, description="a share of the best single device's latency")] | None = None
    needs = ("costs",)
    arg_field = "solver"
    #: exact for sequential HETERO (and its throughput); a concurrent makespan is a scheduling
    #: problem its min-cut / ILP does not model
    serves = frozenset({"latency", "throughput"})
    summary = "exact optimum of the sequential cost model: min-cut (2 devices) or ILP (optimal:ilp, >2)"


class CpSat(PlacerOptions, tag="cp-sat"):
    """Placement and schedule for hdp's concurrent executor by CP-SAT (OR-Tools): exact up to the
    executor's run order, with a proven lower bound (see hdp/placers/cpsat.py)."""
    implementation = "hdp.placers.cpsat:cp_sat"

    time_limit: TimeLimit = 60.0  # seconds of search
    workers: Annotated[int, Meta(ge=1, le=64, description="CP-SAT search workers")] = 2
    warm_start: Literal["heft", "none"] = "heft"  # heft: its placement (or a faster single device) as the hint
    needs = ("costs",)
    #: a scheduling model of the concurrent executor; sequential HETERO has the exact ``optimal``
    serves = frozenset({"concurrent"})
    summary = ("CP-SAT over tie groups for the concurrent executor (--execution concurrent): interval "
               "scheduling, proven bound and gap; time_limit (60 s), workers (2), warm_start (heft)")


class Hsdag(PlacerOptions, tag="hsdag"):
    """The learned placer (see hdp/placers/hsdag.py for each option's meaning)."""
    implementation = "hdp.placers.hsdag:hsdag"

    reward: Literal["auto", "simulate", "measure"] = "auto"
    measure_runs: AtLeastOne = 10
    budget: Duration = 120.0  # seconds for the whole placement (warm start, training, final choice), 0 = no limit
    placements: Count = 0  # max placements evaluated, 0 = no limit
    episodes: Episodes = 25
    samples: Samples = 20
    lr: LearningRate = 1e-3
    hidden: Hidden = 128
    warm_start: str = "optimal"  # none | a placer name (not hsdag or auto)
    policy: str = ""  # checkpoint to resume or reuse
    checkpoint: str = ""  # checkpoint to write
    report: str = ""  # directory for curve.csv / curve.png / summary.json
    algo: Algo = "reinforce"
    entropy: NonNegative = 0.01
    reward_shape: RewardShape = "neglog"
    baseline: Baseline = "batch"
    cost_aware: bool = True
    needs = ("costs", "features", "coarse")
    arg_field = "reward"
    seeded = True
    #: a simulated reward is the problem's objective (any kind); a measured one is HETERO's latency
    serves = frozenset({"latency", "throughput", "concurrent"})
    summary = "HSDAG: GNN + graph parsing + policy gradient on simulated or measured latency (hsdag[:measure])"

    def served(self, target=None) -> frozenset[str]:
        measured = self.reward == "measure" or (self.reward == "auto" and target is not None and target.is_real)
        return frozenset({"latency"}) if measured else type(self).serves

    def __post_init__(self) -> None:
        _check_warm_start(self.warm_start)


#: Methods that cannot warm-start a learned placer (they may train one themselves).
_LEARNING = ("hsdag", "auto", "placeto", "rnn-placer")


def _check_warm_start(spec: str) -> None:
    warm = spec.partition(":")[0]
    if warm in _LEARNING:
        raise ValueError(f"warm_start: cannot be {warm} (it may train a learned placer itself)")
    if spec != "none" and warm not in METHODS:
        raise ValueError(f"warm_start: must be none or a method, not '{spec}' (use none or one "
                         f"of {', '.join(m for m in sorted(METHODS) if m not in _LEARNING)})")


class Placeto(PlacerOptions, tag="placeto"):
    """Placeto (NeurIPS 2019), a learned baseline of the HSDAG paper (hdp/learn/placeto.py). Trained
    on the simulator; defaults are the published hyper-parameters (:class:`hdp.learn.config.PlacetoConfig`)."""
    implementation = "hdp.placers.learned:placeto"

    budget: Duration = 120.0  # seconds for the whole placement, 0 = no limit
    placements: Count = 0  # max placements evaluated, 0 = no limit
    episodes: Episodes = 1000
    lr: LearningRate = 1e-3
    lr_end: LearningRate = 1e-4
    rounds: Annotated[int, Meta(ge=0, le=64)] = 8
    baseline_episodes: AtLeastOne = 10
    hidden: Hidden = 32
    step_reward: bool = True
    warm_start: str = "none"  # none | a placer name (not a learned one): the episodes' start placement
    needs = ("costs", "features", "coarse")
    seeded = True
    summary = "Placeto: message-passing graph embedding, node-by-node placement, per-step simulated rewards"

    def __post_init__(self) -> None:
        _check_warm_start(self.warm_start)


class RnnPlacer(PlacerOptions, tag="rnn-placer"):
    """The hierarchical RNN placer (Mirhoseini et al. 2018), a learned baseline of the HSDAG paper
    (hdp/learn/rnn.py). Trained on the simulator; defaults are the published hyper-parameters but
    the learning rate (:class:`hdp.learn.config.RnnConfig` says why)."""
    implementation = "hdp.placers.learned:rnn_placer"

    budget: Duration = 120.0  # seconds for the whole placement, 0 = no limit
    placements: Count = 0  # max placements evaluated, 0 = no limit
    steps: AtLeastOne = 100_000
    groups: Count = 0  # 0 = min(256, 20 x devices, nodes)
    hidden: Hidden = 512
    lr: LearningRate = 1e-3  # published: 0.1, which collapses (hdp.learn.config.RnnConfig)
    warm_start: str = "none"  # none | a placer name (not a learned one): evaluated first, kept if best
    needs = ("costs", "features", "coarse")
    seeded = True
    summary = "hierarchical planner: feed-forward grouper + seq2seq LSTM placer, REINFORCE on sqrt(simulated runtime)"

    def __post_init__(self) -> None:
        _check_warm_start(self.warm_start)


class Auto(PlacerOptions, tag="auto"):
    """The default: cheap candidates, measured head to head, then measured learning where it can
    still win (see hdp/placers/auto.py for the stages and each option's meaning)."""
    implementation = "hdp.placers.auto:auto"

    learn: Literal["auto", "yes", "no"] = "auto"  # auto: on real targets only
    budget: Duration = 30.0  # seconds for the whole placement (profile excluded), 0 = no limit
    top: Count = 2  # mixed candidates measured head to head with the best single devices
    singles: AtLeastOne = 2  # single-device candidates measured head to head
    # head to head: measure until differences of this size are resolved. Not finer than what a
    # head-to-head can see: two compiled instances of one graph differ by up to ~5 % here, and the
    # calibrated simulator's held-out error is 5.1 % (bench/topics/calibration.md)
    resolution: Annotated[float, Meta(gt=0, lt=1)] = 0.05
    measure_runs: AtLeastOne = 5  # timed runs per placement measured while learning (median)
    patience: Count = 8  # stop learning after this many placements without a gain beyond noise
    episodes: Episodes = 50
    samples: Samples = 8
    hidden: Hidden = 64
    lr: LearningRate = 1e-3
    #: under throughput: ``yes``, keep a serving plan of any shape (``hdp compile -o DIR`` writes its
    #: directory); ``no``, a placement (a placed ``.xml``: a pipeline or one device), the best plan named
    plans: Literal["yes", "no"] = "no"
    needs = ("costs",)
    arg_field = "learn"
    seeded = True
    summary = ("the default: every single device, optimal, heft and refined variants (simulated), the "
               "best measured head to head, then measured learning within --budget (auto:yes|no)")

    def stages(self, target=None) -> tuple[str, ...]:
        return ("costs", "features", "coarse") if self.learns(target) else ("costs",)

    def learns(self, target) -> bool:
        """Whether the learning stage may run on ``target`` (auto: on real targets only)."""
        if self.learn == "auto":
            return target is not None and target.is_real
        return self.learn == "yes"


#: The registry: every method, by name, in the order they are defined here (a class of this module
#: is registered by being one; its ``implementation`` says what runs it).
METHODS: dict[str, type[PlacerOptions]] = {c.name(): c for c in PlacerOptions.__subclasses__()}
#: The options of any method: a tagged union over :data:`METHODS` (the partition pass's field).
Method = Union[tuple(METHODS.values())]


def method_data(spec: str, options: dict | None = None) -> dict:
    """The builtins of ``--method NAME[:ARG]`` with ``options`` (``{"method": NAME, ...}``, what
    :func:`method_from` converts): ``ARG`` set as the method's ``arg_field``, a comma list split
    where the option is a tuple, ``none`` read as None where None is allowed. InputError for an
    unknown method, an argument to a method that takes none, or an option the method lacks."""
    name, _, arg = str(spec).partition(":")
    cls = METHODS.get(name)
    if cls is None:
        raise InputError(f"unknown method '{spec}' (known: {', '.join(sorted(METHODS))})")
    fields = {f.name: f for f in msgspec.structs.fields(cls)}
    data = dict(options or {})
    if arg:
        if not cls.arg_field:
            raise InputError(f"method '{name}' takes no argument (got '{spec}')")
        data[cls.arg_field] = arg
    unknown = sorted(k for k in data if k not in fields and k != "method")
    if unknown:
        raise InputError(f"method '{name}' has no option '{unknown[0]}' (its options: "
                         f"{', '.join(fields) or 'none'})")
    for k, v in list(data.items()):  # strings from the command line: "NPU,CPU", "none"
        f = fields.get(k)
        if f is None or not isinstance(v, str):
            continue
        if f.type == tuple[str, ...]:
            data[k] = tuple(a for a in v.split(",") if a)
        elif f.default is None and v.lower() in ("none", ""):
            data[k] = None
    data["method"] = name
    return data


def method_from(spec: str, options: dict | None = None, message=None) -> PlacerOptions:
    """Options of ``--method NAME[:ARG]`` with ``options`` (:func:`method_data`, converted: strings
    read as the fields' types, bad values InputErrors naming the option; ``message(path, what)``
    words a bad value, by default the method's own wording)."""
    data = method_data(spec, options)
    cls = METHODS[data["method"]]
    return convert(data, cls, message or cls._message, strict=False)

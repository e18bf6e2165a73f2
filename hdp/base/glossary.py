"""The words hdp's output uses, defined once: printed by ``hdp --help`` and ``hdp passes``, and
written to ``docs/terms.md`` (``python -m hdp.base.glossary > docs/terms.md``); ``tests/test_report.py``
and ``tests/test_docs.py`` check that they agree.

Besides the terms, the phrases every report builds its figures from live here, so that one
figure is said one way everywhere: a time change as a ratio of times (:func:`time_change`:
``1.27× slower``, ``0.79× the time, faster``), an interval of ratios (:func:`interval`), a
latency (:func:`latency`), a rate (:data:`RATE`: requests per second, never "inferences/s") and
its time per request (:func:`per_request`)."""

from __future__ import annotations

import math
import textwrap

#: The unit of every rate hdp prints: requests (inferences) completed per second.
RATE = "requests/s"
#: What a verdict says when the host was loaded while measuring.
NO_CLAIM = "no claim"


def ratio(r: float) -> str:
    """A ratio of times: ``1.27×`` (two decimals; three significant digits outside 0.1–100)."""
    if not math.isfinite(r):
        return "-"
    return f"{r:.2f}×" if 0.1 <= r < 100 else f"{r:.3g}×"


def interval(low: float, high: float) -> str:
    """An interval of time ratios: ``0.97–1.04×`` (three decimals when it is narrower than 0.05,
    so that its ends and its side of 1 stay visible: ``0.994–1.000×``)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return "unbounded"
    if 0.1 <= low and high < 100 and high - low < 0.05:
        return f"{low:.3f}–{high:.3f}×"
    return f"{ratio(low)[:-1]}–{ratio(high)}"


def time_change(r: float, verdict: str, *, below_threshold: bool = False, margin: float = 0.0) -> str:
    """B's time as a multiple of A's, with the verdict: ``0.79× the time, faster``, ``1.27×
    slower``, ``equal within noise: 1.01× the time``, or (``below_threshold``: the interval
    excludes 1 but not the threshold ``margin``) ``no practical difference (under 3 %): 0.98× the time``."""
    if verdict == "faster":
        return f"{ratio(r)} the time, faster"
    if verdict == "slower":
        return f"{ratio(r)} slower"
    if below_threshold:
        return f"no practical difference (under {margin * 100:g} %): {ratio(r)} the time"
    return f"equal within noise: {ratio(r)} the time"


def latency(seconds: float) -> str:
    """``latency 11.3 ms``: the time of one request, labelled."""
    return f"latency {milliseconds(seconds)}"


def milliseconds(seconds: float) -> str:
    """``11.3 ms`` (four significant digits; ``-`` when unknown)."""
    if not math.isfinite(seconds):
        return "-"
    ms = seconds * 1e3
    return f"{ms:.4g} ms" if ms >= 1 else f"{ms:.3f} ms"


def per_request(seconds: float) -> str:
    """``88.31 ms per request``: the time per request of a rate (1 / the rate), labelled."""
    return f"{milliseconds(seconds)} per request"


def rate(per_second: float) -> str:
    """``412.3 requests/s``."""
    return f"{per_second:.1f} {RATE}" if math.isfinite(per_second) else f"- {RATE}"

#: (term, definition), in the order a compile prints them.
TERMS: tuple[tuple[str, str], ...] = (
    ("lower, raise", "the first and last passes of a compile: lower reads the OpenVINO model into hdp's IR (a "
                     "Module); raise writes the placed model back as OpenVINO IR, every op with its device"),
    ("pass, stages", "a pass adds one stage to a Module (graph, support, costs, features, coarse, partition, "
                     "placement); `hdp show` lists the stages a Module has"),
    ("schema", "the version of the Module's encoding (`hdp show`); a newer hdp reads older schemas, an older "
               "hdp refuses newer ones"),
    ("profile", "per-op time on every device: measured on real devices (median over the runs), modeled on "
                "modeled ones"),
    ("kind (of a device)", "what a real device computes with: plugin, the precision it really runs, threads "
                           "... as its compiled model reports them; devices of one kind share one profile"),
    ("profile's own correction", "per-op times scaled so that every op on one device is simulated at the "
                                 "whole-model wall time the profile measured"),
    ("tie group", "ops that must share a device (a constant with its consumer, a state's ReadValue and "
                  "Assign, ...); placers place tie groups"),
    ("simulated", "priced by the cost model from the profile, nothing run: compute + copies across devices + "
                  "an overhead per HETERO subgraph"),
    ("subgraph", "a connected part of the model on one device: HETERO runs one infer request per subgraph, "
                 "one after another"),
    ("lower bound", "every tie group on its fastest device, with no copy and no subgraph cost: no placement "
                    "can be simulated faster"),
    ("energy", "joules of one request, simulated (`--objective energy`, modeled targets): every device's idle "
               "watts for the whole latency, and a device's active watts while it computes"),
    ("single:DEV", "every op on device DEV"),
    ("optimal", "the exact optimum of the simulated latency (min-cut for two devices, an ILP for more), kept "
                "only if its predicted gain over the best single device exceeds its margin"),
    ("margin", "the gain over the best single device the profile's noise could produce (1.645 standard "
               "errors of the predicted gain), with the calibration's error when calibrated"),
    ("optimal+refine, heft+refine", "that placement after greedy boundary moves that lower the simulated "
                                    "latency"),
    ("hetero-auto", "OpenVINO's own assignment: each op on the first device in priority order that supports it"),
    ("measured", "run on the devices: wall time of whole inferences, median over the runs"),
    ("plain compile", "the unplaced model compiled on one device without HETERO"),
    ("same graph", "a placement with every op on one device runs the plain compile's graph through HETERO: "
                   "never called faster than it"),
    ("head to head", "candidates measured interleaved, one run of each per round in a rotating order, so "
                     "that load from other processes hits all alike"),
    ("latency", "the wall time of one request, start to end (median over the runs)"),
    ("per request, requests/s", "a rate: requests completed per second with several in flight; per request is "
                                "its inverse, the time one request costs the host"),
    ("N× the time, N× slower", "B's time as a multiple of A's (paired rounds): 0.79× the time is faster, 1.27× "
                               "slower takes 1.27 times as long"),
    ("CI", "confidence interval of the time ratio of a pair, from the paired rounds, covering every block; a "
           "head-to-head states its level once, for all its comparisons together"),
    ("blocks", "a head-to-head runs twice, each time compiled afresh; a difference must hold in both"),
    ("faster, slower", "the whole interval lies beyond the 3 % threshold on that side"),
    ("equal within noise", "the interval holds both sides; the estimate and interval say how large a "
                           "difference is still possible"),
    ("no practical difference", "the interval excludes 1 but not the 3 % threshold: too small to act on"),
    ("no claim", "other processes kept the host's cores busy while measuring (more than 0.1 of them, from "
                 "/proc/stat): nothing is claimed; measure again on a quiet host"),
    ("default plain compile", "the unplaced model compiled by OpenVINO with its own defaults on a device "
                              "kind of this host (every core, its default precision, e.g. bf16, and hints): "
                              "what a user gets without hdp, the reference of every verdict"),
    ("none can beat ... by 5 % (one-sided)", "the rule that stopped a head-to-head: no other candidate can be "
                                             "faster than the preferred one by 5 % or more"),
    ("simulator vs measurement", "simulated / measured latency of the same placement in this run; off by more "
                                 "than 15 %: `hdp calibrate` fits the boundary model on this host"),
    ("budget", "seconds the placer may spend (`--budget`); the profile is not counted"),
    ("serving plan", "how a model is served for throughput: stages, each with one or more replicas, each replica "
                     "on a device with its streams (`hdp compile -o DIR --objective throughput` writes DIR/plan.json "
                     "and its compiled stages; `hdp serve` runs it)"),
    ("stage (of a plan), replica", "a stage is a set of tie groups compiled as one sub-model, fed by earlier "
                                   "stages; a replica is one copy of a stage on one device, fed by hdp's "
                                   "runtime with requests the other replicas are not running"),
    ("single, replicas, pipeline, mixed", "the shapes of a plan: one stage on one device with its streams; one "
                                          "stage on several devices; several stages of one replica and one "
                                          "stream each (a placement HETERO runs); several stages, some "
                                          "replicated or with several streams"),
    ("stream efficiency", "what two streams of one compiled model serve against one: 2 x efficiency times "
                          "(`hdp calibrate` fits it per device; 0.5: a second stream adds nothing)"),
    ("phase (prefill, decode)", "a stateful LLM's two inferences: the prefill reads the prompt into an empty KV "
                                "cache, a decode step reads one token after it; `--phases` places each on its own"),
    ("time to first token, time per token", "a prefill's latency (it gives the first generated token) and one "
                                            "decode step's (tokens/s is its inverse)"),
    ("KV cache handed over", "in place when the prefill's and decode's devices are one or share a memory, else "
                             "copied over the link once per request"),
)


def text(width: int = 100) -> str:
    """The terms as an indented list, wrapped to ``width``."""

    lines = []
    for term, meaning in TERMS:
        lines += textwrap.wrap(f"{term}: {meaning}", width, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)


def markdown() -> str:
    """``docs/terms.md``: the terms as a Markdown list (``python -m hdp.base.glossary`` prints it)."""
    lines = ["# Terms", "", "What the words of hdp's output mean (also in `hdp --help` and `hdp passes`). This page is",
             "generated from `hdp/base/glossary.py` by `python -m hdp.base.glossary > docs/terms.md`.", ""]
    lines += [f"- **{term}**: {meaning}" for term, meaning in TERMS]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")

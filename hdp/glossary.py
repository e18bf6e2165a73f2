"""The words hdp's output uses, defined once: printed by ``hdp --help`` and ``hdp passes``, and
listed in the README ("Terms"); ``tests/test_cli.py`` checks that the three agree."""

from __future__ import annotations

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
    ("CI", "confidence interval of the time ratio of a pair, from the paired rounds; a head-to-head states "
           "its level once, for all its comparisons together"),
    ("faster by, slower by", "the whole interval lies beyond 0.5 % on that side"),
    ("no difference beyond noise", "the interval holds both sides; the estimate and interval say how large a "
                                   "difference is still possible"),
    ("none can beat ... by 5 % (one-sided)", "the rule that stopped a head-to-head: no other candidate can be "
                                             "faster than the preferred one by 5 % or more"),
    ("simulator vs measurement", "simulated / measured latency of the same placement in this run; off by more "
                                 "than 15 %: `hdp calibrate` fits the boundary model on this host"),
    ("budget", "seconds the placer may spend (`--budget`); the profile is not counted"),
)


def text(width: int = 100) -> str:
    """The terms as an indented list, wrapped to ``width``."""
    import textwrap

    lines = []
    for term, meaning in TERMS:
        lines += textwrap.wrap(f"{term}: {meaning}", width, initial_indent="  ", subsequent_indent="      ")
    return "\n".join(lines)

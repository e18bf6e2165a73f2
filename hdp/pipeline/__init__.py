"""``hdp compile`` as a pipeline: lower, the passes, check and raise, run as managed stages.

- :mod:`hdp.pipeline.text`: a pipeline as text, ``support,profile,coarsen{groups=64},partition{method=optimal},assign``
  (parse and print round-trip; errors name the column).
- :mod:`hdp.pipeline.schedule`: from text to typed pass values; the default pipeline of a method on a
  target, and the flags that fill it.
- :mod:`hdp.pipeline.stages`: the stages at the edges (lower, check/repair, raise), run by the pass
  manager like passes (one cache, one instrument path).
- :mod:`hdp.pipeline.compile`: :func:`compile_model`, what ``hdp compile`` runs.
- :mod:`hdp.pipeline.report`: the words ``hdp compile`` prints about a compile.
- :mod:`hdp.pipeline.calibrate`: the calibration experiment (``hdp calibrate``), which runs
  placers and measures what they place.

The layer below the command line and above everything else; ``hdp.cli`` parses arguments and
prints, and calls in here.
"""

from hdp.pipeline.compile import CompileResult, compile_model
from hdp.pipeline.schedule import (STAGE_PASS, build_passes, compile_schedule, default_method, default_text,
                                   make_pass, pipeline_specs, run_passes, runtime_options, takes_target)
from hdp.pipeline.stages import FRONTEND_VERSION, Check, Lower, Raise, lower_cached, recompute_if_stale
from hdp.pipeline.text import PassSpec, PipelineError, parse_pipeline, print_pipeline

__all__ = ["FRONTEND_VERSION", "STAGE_PASS", "Check", "CompileResult", "Lower", "PassSpec", "PipelineError", "Raise",
           "build_passes", "compile_model", "compile_schedule", "default_method", "default_text", "lower_cached",
           "make_pass", "parse_pipeline", "pipeline_specs", "print_pipeline", "recompute_if_stale",
           "run_passes", "runtime_options", "takes_target"]

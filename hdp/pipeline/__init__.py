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

The layer below the command line and above everything else; ``hdp.cli.main`` parses arguments and
prints, and calls in here.
"""

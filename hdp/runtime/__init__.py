"""The runtime: what runs on real devices, in four packages, lowest first.

- :mod:`hdp.runtime.placed` — a placed model as a file and as runnable parts (HETERO, the executor);
- :mod:`hdp.runtime.measure` — measuring in a worker process, and the statistics of its verdicts;
- :mod:`hdp.runtime.costs` — the profile and the fitted models the placers optimise;
- :mod:`hdp.runtime.serve` — placed models checked, exported and served, measured.

Targets (which devices, how much memory) are :mod:`hdp.target`, below all of them. Nothing here
runs a placer or a pass.
"""

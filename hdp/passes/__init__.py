"""Passes: frozen option values that map a Module to a Module (docs/design.md §3), and what runs them.

- :mod:`hdp.passes.base` (the Pass value), :mod:`hdp.passes.registry` (names to classes, lazily),
  :mod:`hdp.passes.manager` (schedule checked from what each value needs, cache, verify, instruments),
  :mod:`hdp.passes.cache`, :mod:`hdp.passes.instruments`.
- One module per pass: ``support``, ``profile``, ``boundary``, ``features``, ``coarsen``,
  ``partition``, ``assign``; Numba kernels of ``features`` and ``coarsen`` in :mod:`hdp.passes._kernels`.

A pass calls into the layers below (placers, learn, runtime, placement, ir); the pipeline that
strings passes together for ``hdp compile`` is :mod:`hdp.pipeline`, above.
"""

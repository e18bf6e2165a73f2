"""Costs: what the placers optimise, measured on this host.

- :mod:`~hdp.runtime.costs.profile` — per-op, per-device times (with its noise model,
  :mod:`~hdp.runtime.costs.denoise`); the simulator that prices a placement from them is
  :mod:`hdp.placement.simulate`;
- :mod:`~hdp.runtime.costs.calibrate` — the boundary, hand-off and executor models fitted per host
  (one-parameter fits in :mod:`~hdp.runtime.costs.grid_fit`, the executor's probes in
  :mod:`~hdp.runtime.costs.executor`).

Above :mod:`hdp.runtime.measure`; nothing here runs a placer or a pass (the calibration
experiment, which does, is :mod:`hdp.pipeline.calibrate`).
"""

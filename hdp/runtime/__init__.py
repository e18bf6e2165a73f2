"""The runtime: targets and what runs on them, and the cost model the placers optimise.

- Targets: :mod:`~hdp.runtime.target`, :mod:`~hdp.runtime.devices`, :mod:`~hdp.runtime.host`.
- Measuring on real devices, in a worker process: :mod:`~hdp.runtime.protocol` (typed messages),
  :mod:`~hdp.runtime.worker`, :mod:`~hdp.runtime.worker_client`, :mod:`~hdp.runtime.measure`
  (:class:`~hdp.runtime.measure.Measurer`), :mod:`~hdp.runtime.measurement`,
  :mod:`~hdp.runtime.measure_cache`, :mod:`~hdp.runtime.query`; :mod:`~hdp.runtime.stats` turns
  run times into verdicts.
- Costs: :mod:`~hdp.runtime.profile` and :mod:`~hdp.runtime.denoise` (per-op times; the
  simulator that prices a placement from them is :mod:`hdp.placement.simulate`, below),
  :mod:`~hdp.runtime.calibrate` (the boundary model fitted per host).
- Placed models: :mod:`~hdp.runtime.placed` (write, read, run), :mod:`~hdp.runtime.verify`
  (the check before writing), :mod:`~hdp.runtime.blob` (export), :mod:`~hdp.runtime.report`;
  :mod:`~hdp.runtime.concurrent` (hdp's own executor over the device subgraphs) and
  :mod:`~hdp.runtime.capacity` (device memory).

It sits above :mod:`hdp.placement` and :mod:`hdp.ir` and below the placers: nothing here runs a
placer or a pass (calibration's experiment, which does, is :mod:`hdp.pipeline.calibrate`).
"""

"""Measuring on real devices, in a worker process.

- :mod:`~hdp.runtime.measure.protocol` (typed messages), :mod:`~hdp.runtime.measure.worker` (the
  process: compiles, queries support, profiles whole or in :mod:`~hdp.runtime.measure.chunks`,
  runs placed models), :mod:`~hdp.runtime.measure.worker_client`;
- :mod:`~hdp.runtime.measure.measurer` (:class:`~hdp.runtime.measure.measurer.Measurer`, the
  driver), :mod:`~hdp.runtime.measure.measurement` (what a measurement is of, and its records),
  :mod:`~hdp.runtime.measure.cache` (measurements kept per host), :mod:`~hdp.runtime.measure.query`
  (which ops a device supports);
- :mod:`~hdp.runtime.measure.stats`: run times into verdicts (medians, paired intervals).

Above :mod:`hdp.runtime.placed` (the worker runs placed models), below the costs and serving.
"""

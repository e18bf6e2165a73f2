"""Words shared by the reports of ``hdp compile``: how far the simulator is from a measurement.

The simulator (:mod:`hdp.runtime.simulate`) prices a placement from the profile; a measurement of
the same placement in the same run says how far that price is from what the devices did. The
profile corrects itself to its own whole-model wall times (:func:`hdp.runtime.profile.profile_costs`),
so on one device the remaining gap is mostly load that changed between the profile and the
measurement; on a mixed placement it is also the boundary model (the target's guess until
``hdp calibrate`` fits it on this host).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

#: Simulated/measured ratios further than this from 1 are called out, with the way to fix them.
SIM_ERROR_WARN = 0.15


def sim_vs_measured(pairs: Sequence[tuple[str, float, float]]) -> str:
    """One line from ``(name, simulated seconds, measured seconds)`` triples::

        simulator vs measurement: single:CPU 89.3 ms simulated / 73.0 ms measured = 1.22, ...;
        off by more than 15 %: the profile ran under other load, or the boundary model is the
        target's guess (`hdp calibrate MODEL --target T` fits it on this host)
    """
    parts, worst = [], 0.0
    for name, sim, meas in pairs:
        if not (sim > 0 and meas > 0 and math.isfinite(sim) and math.isfinite(meas)):
            continue
        r = sim / meas
        worst = max(worst, abs(r - 1))
        parts.append(f"{name} {sim * 1e3:.3f} ms simulated / {meas * 1e3:.3f} ms measured = {r:.2f}")
    if not parts:
        return "simulator vs measurement: nothing measured to compare with"
    line = "simulator vs measurement: " + ", ".join(parts)
    if worst > SIM_ERROR_WARN:
        line += (f"; off by up to {worst * 100:.0f} % (more than {SIM_ERROR_WARN * 100:.0f} %): the profile ran under "
                 f"other load than the measurement, or the boundary model is the target's guess "
                 f"(`hdp calibrate MODEL --target TARGET` fits it on this host)")
    else:
        line += f"; within {SIM_ERROR_WARN * 100:.0f} %"
    return line

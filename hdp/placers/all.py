"""Imports every placer module so each registers itself."""

import hdp.placers.basic  # noqa: F401
import hdp.placers.classical  # noqa: F401
import hdp.placers.hsdag  # noqa: F401  (imports torch only when the method runs)

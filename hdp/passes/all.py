"""Imports every pass module so each registers itself."""

import hdp.passes.assign  # noqa: F401
import hdp.passes.coarsen  # noqa: F401
import hdp.passes.features  # noqa: F401
import hdp.passes.partition  # noqa: F401
import hdp.passes.support  # noqa: F401
import hdp.passes.profile  # noqa: F401

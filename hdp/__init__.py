"""hdp: heterogeneous device placement for OpenVINO models."""

import os as _os
import sys as _sys

# `import openvino` loads its model converter, which sends usage events to Google Analytics unless
# the user opted out. hdp never sends data anywhere: hiding the optional openvino_telemetry package
# makes the converter fall back to its built-in no-op sender. HDP_ALLOW_OPENVINO_TELEMETRY=1 keeps it.
if not _os.environ.get("HDP_ALLOW_OPENVINO_TELEMETRY"):
    _sys.modules.setdefault("openvino_telemetry", None)

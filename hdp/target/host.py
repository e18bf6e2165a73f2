"""What identifies this host for caching results that depend on it (measurements, device support,
profiles): the CPU (model, feature flags, logical CPU count, architecture) and the OpenVINO
version. The hostname is not enough: containers and CI runners share names and caches across
different machines. Nothing here imports openvino."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty off Linux)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def openvino_version() -> str:
    try:
        return importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        return ""


@functools.cache
def host_facts() -> dict[str, str]:
    """The facts hashed by :func:`host_fingerprint`, readable (for reports)."""
    info = _cpuinfo()
    flags = info.get("flags") or info.get("Features") or ""  # x86 / arm
    return {
        "machine": platform.machine(),
        "system": platform.system(),
        "cpu": info.get("model name") or info.get("CPU part") or platform.processor(),
        "cpu_family_model": ",".join(info.get(k, "") for k in ("cpu family", "model", "stepping",
                                                               "CPU implementer", "CPU variant")),
        "flags": " ".join(sorted(flags.split())),
        "cpus": str(os.cpu_count() or 0),
        "openvino": openvino_version(),
    }


@functools.cache
def host_fingerprint() -> str:
    """A short stable digest of :func:`host_facts`."""
    blob = "\n".join(f"{k}={v}" for k, v in sorted(host_facts().items()))
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()

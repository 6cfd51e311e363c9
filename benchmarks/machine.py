"""What machine a benchmark ran on, recorded beside its figures (imported by the scripts here)."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name (as ``lscpu`` shows it), e.g. ``Intel(R) Xeon(R) Processor``."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict:
    """``{"cpu": model name, "cores": usable cores, "python": version}``."""
    return {
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "python": platform.python_version(),
    }

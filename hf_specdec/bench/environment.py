"""The machine and library versions a benchmark ran on, for its report."""

from __future__ import annotations

import os
import platform
from pathlib import Path

import torch

import hf_specdec


def environment() -> dict:
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": _cpu_name(),
            "cpu_family_model": _cpu_family_model(),  # tells apart CPUs that share a model name ("AMD EPYC")
            "cpu_flags": _cpu_flags(),  # SIMD/matrix instructions a CPU forward's speed depends on
            "cpu_count": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "load_average_at_end": load_average(),  # 1/5/15-min; above cpu_count = other jobs shared the CPU
            "gpu": torch.cuda.get_device_name(0) if cuda else None,
        },
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "hf_specdec": hf_specdec.__version__,
        },
    }


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _cpu_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return sorted(f for f in flags if f.startswith(("avx", "amx", "fma")) or "bf16" in f or "vnni" in f)
    except OSError:
        pass
    return []


def _cpuinfo(field: str) -> str | None:
    """The first value of `field` in /proc/cpuinfo (None where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == field:
                return value.strip()
    except OSError:
        pass
    return None


def _cpu_name() -> str:
    return _cpuinfo("model name") or platform.processor() or "unknown"


def _cpu_family_model() -> str | None:
    """'family F model M' as /proc/cpuinfo gives them (None off Linux)."""
    family, model = _cpuinfo("cpu family"), _cpuinfo("model")
    return f"family {family} model {model}" if family and model else None

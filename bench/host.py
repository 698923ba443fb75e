"""What the benchmarks say about the machine they ran on: the host CPU's model name and its vector extensions, and
the platform; the one description every report of bench/ uses (no TensorFlow or PyTorch here, so every report
describes both the same way). The command that reproduces a report: bench/cli.py."""

from __future__ import annotations

import os
import platform


def read_cpuinfo() -> str:
    """/proc/cpuinfo, or "" where there is none."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            return f.read()
    except OSError:
        return ""


def cpu_model(cpuinfo: str) -> str:
    return next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if "model name" in line), "")


def vector_extensions(cpuinfo: str) -> str:
    """The SIMD and matrix extensions among the CPU's flags (those starting with avx, amx or fma), sorted and
    space-separated: what the kernels of either framework can use, so what a timing on this machine means."""
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), [])
    return " ".join(sorted({f for f in flags if f.startswith(("avx", "amx", "fma"))}))


def cpu_kind(extensions: str) -> str:
    """The widest of `vector_extensions`: "AMX", "AVX-512", "AVX2" or "other" (an AMX CPU has AVX-512 too)."""
    flags = extensions.split()
    if any(f.startswith("amx") for f in flags):
        return "AMX"
    if "avx512f" in flags:
        return "AVX-512"
    return "AVX2" if "avx2" in flags else "other"


def describe() -> dict:
    """`cpu`, `cores`, `vector_extensions`, `cpu_kind` and `native_bfloat16` of this machine."""
    info = read_cpuinfo()
    extensions = vector_extensions(info)
    return {"cpu": cpu_model(info), "cores": os.cpu_count(), "vector_extensions": extensions,
            "cpu_kind": cpu_kind(extensions), "native_bfloat16": native_bfloat16(extensions)}


def platform_description() -> dict:
    """`describe()` with the platform, the memory (GiB) and the Python version: the head of a speed report."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    return {"platform": platform.platform(), **describe(), "memory_gib": round(memory, 1),
            "python": platform.python_version()}


def summary() -> dict:
    """The CPU, its cores and vector extensions as strings: what a study's report and the transfer ledger's
    entries record of the machine."""
    m = describe()
    return {"cpu": m["cpu"], "cores": str(m["cores"]), "vector_extensions": m["vector_extensions"]}


def one_line() -> str:
    """`<cpu>, <cores> cores, <vector extensions>`."""
    return "{cpu}, {cores} cores, {vector_extensions}".format(**describe())


def native_bfloat16(extensions: str) -> bool:
    """Whether the CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX-BF16); without, bfloat16 matmuls are
    emulated (converted to float32), so a bfloat16 timing says nothing about bfloat16 hardware."""
    return bool({"avx512_bf16", "amx_bf16"} & set(extensions.split()))

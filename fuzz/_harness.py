"""Shared by the fuzz_*.py harnesses: run some kafkalog.testing.fuzz targets under atheris (libFuzzer)."""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

# numba compiles these modules' kernels from their bytecode, which atheris's instrumentation would break.
_NUMBA_MODULES = [
    "kafkalog.record._kernels",
    "kafkalog.cleaner._kernels",
    "kafkalog.cleaner._intrinsics",
    "kafkalog.cleaner.md5",
    "kafkalog.cleaner.offset_map",
    "kafkalog.record.partitioner",
    "kafkalog.spark.sink_batches",
]

with atheris.instrument_imports(include=["kafkalog"], exclude=_NUMBA_MODULES):
    from kafkalog.testing.fuzz import atheris_entry, corpus


def run(*names: str) -> None:
    """``python fuzz/fuzz_X.py [libFuzzer flags] [corpus dirs]``; ``--write-corpus DIR`` writes the seed inputs."""
    if len(sys.argv) == 3 and sys.argv[1] == "--write-corpus":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        for name, data in corpus(*names).items():
            (out / name).write_bytes(data)
        print(f"wrote {len(corpus(*names))} seed inputs to {out}")
        return
    atheris.Setup(sys.argv, atheris_entry(*names))
    atheris.Fuzz()

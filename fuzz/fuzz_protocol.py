"""atheris harness: one request frame (any API and version) through a real broker's decoder, router and handlers.

The target and its oracle are ``kafkalog.testing.protocol_fuzz`` (see fuzz/README.md, "The protocol fuzzer").
``--write-corpus DIR`` writes the starting inputs: a valid request of every API and version the broker
advertises, as a raw frame and as a structure-aware mutation seed.
"""

import sys
from pathlib import Path

import atheris
from _harness import _NUMBA_MODULES

with atheris.instrument_imports(include=["kafkalog"], exclude=_NUMBA_MODULES):
    from kafkalog.testing.protocol_fuzz import atheris_entry, corpus


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--write-corpus":
        out = Path(sys.argv[2])
        out.mkdir(parents=True, exist_ok=True)
        seeds = corpus()
        for name, data in seeds.items():
            (out / name).write_bytes(data)
        print(f"wrote {len(seeds)} seed inputs to {out}")
        return
    atheris.Setup(sys.argv, atheris_entry())
    atheris.Fuzz()


if __name__ == "__main__":
    main()

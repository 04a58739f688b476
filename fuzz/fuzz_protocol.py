"""atheris harness: one request frame (any API and version) through a real broker's decoder, router and handlers.

The target and its oracle are ``kafkalog.testing.protocol_fuzz`` (see fuzz/README.md, "The protocol fuzzer").
``--write-corpus DIR`` writes the starting inputs: a valid request of every API and version the broker
advertises, as a raw frame and as a structure-aware mutation seed. With ``KAFKALOG_FUZZ_KEEP_GOING=DIR`` in the
environment, an input that breaks the oracle is saved in DIR (once per distinct report) and the run goes on.

``--sasl`` (first argument) fuzzes SASL authentication instead: each input is a plan of frames on one
SASL_PLAINTEXT connection (``kafkalog.testing.sasl_fuzz``, fuzz/README.md "Fuzzing SASL"); ``--sasl
--write-corpus DIR`` writes its seeds. ``--sasl-tls``: the same cases over TLS sockets of a SASL_SSL listener.
"""

import importlib.util
import os
import sys
from pathlib import Path

import atheris

# The request path: the broker (header parser, null checks, router, handlers), the coordinators and the partition
# layer it drives. The rest (storage, records, the numba kernels, the CLI, kafka-python, whose schema codecs are
# generated at run time and so escape instrumentation anyway) is left uninstrumented: the file fuzzers cover
# storage, and every instrumented module costs this harness speed. atheris takes whole top-level packages and
# excludes exact module names, so the exclusions are listed from the files.
INSTRUMENTED = ("kafkalog.broker", "kafkalog.coordinator", "kafkalog.partition")


def _modules_outside(package: str) -> list[str]:
    root = Path(importlib.util.find_spec(package).origin).parent  # type: ignore[arg-type, union-attr]
    names = []
    for path in root.rglob("*.py"):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if name != package and not name.startswith(INSTRUMENTED) and not any(p.startswith(name) for p in INSTRUMENTED):
            names.append(name)
    return names


SASL = len(sys.argv) > 1 and sys.argv[1] in ("--sasl", "--sasl-tls")
TLS = SASL and sys.argv[1] == "--sasl-tls"
if SASL:
    del sys.argv[1]  # libFuzzer would take it for a flag of its own

with atheris.instrument_imports(include=["kafkalog"], exclude=_modules_outside("kafkalog")):
    if SASL:
        from kafkalog.testing.sasl_fuzz import atheris_entry, corpus
    else:
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
    keep_going = os.environ.get("KAFKALOG_FUZZ_KEEP_GOING")
    options = {"tls": True} if TLS else {}
    atheris.Setup(sys.argv, atheris_entry(keep_going=Path(keep_going) if keep_going else None, **options))
    atheris.Fuzz()


if __name__ == "__main__":
    main()

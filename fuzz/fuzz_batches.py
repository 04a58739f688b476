"""atheris harness: record batches v0/v1/v2 of every codec, per-record and columnar (to_arrow) decoders.

See fuzz/README.md.
"""

from _harness import run

if __name__ == "__main__":
    run("batches", "columnar")

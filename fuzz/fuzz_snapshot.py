"""atheris harness: producer-state .snapshot decoding. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("producer_snapshot")

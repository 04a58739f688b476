"""atheris harness: offset and leader-epoch checkpoint files. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("offset_checkpoint", "epoch_checkpoint")

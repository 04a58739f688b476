"""atheris harness: .index and .timeindex readers. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("offset_index", "time_index")

"""atheris harness: kafkalog dump, verify and recover on hostile files. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("cli_dump", "cli_dump_indexes", "cli_verify", "cli_recover")

"""atheris harness: server.properties / meta.properties / topic config parsing. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("properties")

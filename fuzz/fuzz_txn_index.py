"""atheris harness: .txnindex parsing. See fuzz/README.md."""

from _harness import run

if __name__ == "__main__":
    run("txn_index")

"""Developer tools of the kafkalog repository (not part of the installed package): ``python -m tools.reliability``."""

"""``make reliability`` (``python -m tools.reliability``): kill -9, injected I/O faults, load, fuzzing, bad input.

``runner`` runs the checks and prints one table, ``load`` is the many-partition load test (run in a child
process), ``checks`` turns the fuzz targets (``kafkalog.testing.fuzz``) and the bad-input catalogue of the tests
(``tests/bad_inputs.py``) into rows. Run from the repository root.
"""

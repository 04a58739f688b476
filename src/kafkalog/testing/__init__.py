"""What tests of code built on kafkalog may use: deterministic time and the parsers' fuzz targets.

This subpackage is public on purpose (as Kafka ships ``MockTime`` in its test jar): ``MockTime`` and
``MockScheduler`` (``kafkalog.testing.clock``) make every time-based rule run on a clock the test moves by hand;
``kafkalog.testing.fuzz`` holds the fuzz targets and their oracle, imported on demand since it loads every parser.
The storage engine never imports it (only the demo, for its simulated clock).
"""

from __future__ import annotations

from .clock import MockScheduler, MockTime

__all__ = ["MockScheduler", "MockTime"]

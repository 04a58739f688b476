"""The Spark reader's file access: kept as a name for ``kafkalog.partition.readonly``, where it now lives.

The read-only view of a log dir (partition discovery, offsets, Kafka's read path, transactions, offsets by
timestamp) is one module shared by the CLI and Spark; this module only re-exports it.
"""

from __future__ import annotations

import sys

from ..partition import readonly

sys.modules[__name__] = readonly

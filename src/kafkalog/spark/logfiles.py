"""The Spark reader's file access: kept as a name for ``kafkalog.partition.readonly``, where it now lives.

The read-only view of a log dir (partition discovery, offsets, Kafka's read path, transactions, offsets by
timestamp) is one module shared by the CLI and Spark; importing this module gives that module itself.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from ..partition import readonly

if TYPE_CHECKING:  # what a type checker sees; at run time the module below is the one imported
    from ..partition.readonly import *  # noqa: F403

sys.modules[__name__] = readonly

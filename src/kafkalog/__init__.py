"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible on disk."""

from typing import Any

__version__ = "0.1.0"

__all__ = ["LogManager", "__version__"]


def __getattr__(name: str) -> Any:
    """``kafkalog.LogManager`` without importing the storage stack for ``import kafkalog.record``."""
    if name == "LogManager":
        from .manager import LogManager

        return LogManager
    raise AttributeError(f"module 'kafkalog' has no attribute {name!r}")

"""kafkalog: Apache Kafka's log storage engine in Python, byte-compatible on disk."""

__version__ = "0.1.0"

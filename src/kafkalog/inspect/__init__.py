"""Offline inspection of Kafka log dirs: the engines behind ``kafkalog verify``, ``recover`` and ``dump``.

A library below the CLI (it imports storage, the partition layer's read-only views and the coordinators' record
codecs, never click or ``kafkalog.cli``):

* ``verify`` / ``partition_scan`` / ``segment_scan`` / ``index_checks``: the read-only scan of a log dir, with
  typed findings (``findings``);
* ``recovery``: Kafka's recovery planned on a read-only segment with in-memory indexes (``recover --dry-run``) and
  the report of what a real recovery changed;
* ``dumper`` (with ``dump_text``) and ``decoders`` (``transaction_log``, ``jvm_order``): Kafka's DumpLogSegments.
"""

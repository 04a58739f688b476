"""Log compaction (Kafka's log cleaner), over the logs of ``kafkalog.storage``.

- ``policy``: which logs are dirty enough to clean and how far (cleanable offsets, dirty ratio, segment groups).
- ``cleaner``: ``Cleaner``, one clean of one log (map pass, copy pass, swap), with ``record_filter`` (which
  records stay: ``MemoryRecords.filterTo``), ``transactions`` (aborted and ongoing transactions while cleaning),
  ``pipeline`` (the threaded fast path over runs of plain batches) and ``stats`` (``CleanerStats``, ``Throttler``).
- ``offset_map``: ``SkimpyOffsetMap``, the key → latest offset map; ``md5``, ``_intrinsics`` and ``_kernels``
  are its numba kernels and the cleaner's.
- ``manager``: ``LogCleanerManager`` (checkpoints, cleaning states, choosing the dirtiest log);
  ``log_cleaner``: ``LogCleaner`` (the cleaner threads and metrics of a LogManager).
- ``explain``: why a partition will or will not be cleaned (``kafkalog explain compaction``).
"""

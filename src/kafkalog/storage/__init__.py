"""kafkalog.storage: one partition's log on disk, as Kafka's UnifiedLog / LocalLog / LogSegment keep it."""

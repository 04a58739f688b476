"""Benchmarks of kafkalog against independent Kafka codecs (kafka-python, aiokafka): ``make bench``."""

"""A local replicated cluster for tests and the reliability runner: a private ZooKeeper, ``kafkalog serve``
brokers joined through it, and the replication checker every replication test uses."""

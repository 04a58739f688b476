"""Replication across brokers with ZooKeeper as the control plane (Kafka up to 3.x, ``zookeeper.connect``).

- ``zkdata``: the znode paths and JSON shapes Kafka's ``kafka.zk.ZkData`` writes, so a ZooKeeper tool (or
  ``zookeeper-shell``) reads a kafkalog cluster as a Kafka one.
- ``node``: this broker's membership: lifecycle, the reconcile pass, controller election on the ephemeral
  ``/controller`` node and the controller's election pass (leaders from the ISR), controlled shutdown. It is built on
  ``zk_node`` (the ZooKeeper session, registration, reads of the view; ``state`` holds the settings and the view),
  ``leadership`` (the broker side: applying each partition's leader and ISR, ISR shrink and expansion, the wait of
  ``acks=-1`` produces, the coordinators' partitions loaded on election, unloaded on resignation) and
  ``topic_admin`` (CreateTopics, CreatePartitions, DeleteTopics, the coordinators' internal topics).
- ``txn``: the transaction coordinator on a cluster (its state topic, WriteTxnMarkers to other brokers).
- ``fetcher``: the replica fetchers (truncation by OffsetForLeaderEpoch, then Fetch with a replica id).
- ``controller``: what the controller does on request or on a timer: controlled shutdown (ControlledShutdown from
  a stopping broker), preferred and unclean elections (ElectLeaders, the auto-leader-rebalance task), and topic
  deletion (StopReplica to every replica broker, then the topic's znodes go).
- ``security_zk``: ACLs and SCRAM credentials in ZooKeeper (``/kafka-acl``, ``/config/users``) with Kafka's
  change notifications, so every broker enforces the same ACLs and authenticates the same users.
- ``assignment``: Kafka's rack-unaware replica assignment; ``producer_ids``: producer-id blocks from ZooKeeper.

Why brokers watch the partition state znodes instead of receiving LeaderAndIsr/UpdateMetadata requests from
the controller: the state znode is already the single truth (Kafka's controller writes it first and only then
sends LeaderAndIsr), ZooKeeper delivers its changes to every broker in order and re-delivers after a session
loss, and a broker that restarts reads the same znodes on startup. Kafka pushed requests to save ZooKeeper the
load of thousands of brokers watching hundreds of thousands of znodes; a kafkalog cluster is small, and the
watch saves a second channel (and its retry, ordering and fencing rules) that could disagree with ZooKeeper.
The controller still alone decides leaders (and removes dead brokers from the ISR); leaders alone change
their ISR, each change a conditional write on the znode's version (Kafka's zkVersion).
"""

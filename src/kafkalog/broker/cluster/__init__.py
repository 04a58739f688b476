"""Replication across brokers with ZooKeeper as the control plane (Kafka up to 3.x, ``zookeeper.connect``).

- ``zkdata``: the znode paths and JSON shapes Kafka's ``kafka.zk.ZkData`` writes, so a ZooKeeper tool (or
  ``zookeeper-shell``) reads a kafkalog cluster as a Kafka one.
- ``controller``: controller election on the ephemeral ``/controller`` node and leader election from the ISR.
- ``replication``: the broker side: applying each partition's leader and ISR, the replica fetchers, ISR shrink
  and expansion, and the wait of ``acks=-1`` produces.
- ``assignment``: Kafka's rack-unaware replica assignment.

Why brokers watch the partition state znodes instead of receiving LeaderAndIsr/UpdateMetadata requests from
the controller: the state znode is already the single truth (Kafka's controller writes it first and only then
sends LeaderAndIsr), ZooKeeper delivers its changes to every broker in order and re-delivers after a session
loss, and a broker that restarts reads the same znodes on startup. Kafka pushed requests to save ZooKeeper the
load of thousands of brokers watching hundreds of thousands of znodes; a kafkalog cluster is small, and the
watch saves a second channel (and its retry, ordering and fencing rules) that could disagree with ZooKeeper.
The controller still alone decides leaders (and removes dead brokers from the ISR); leaders alone change
their ISR, each change a conditional write on the znode's version (Kafka's zkVersion).
"""

"""The long form of the cluster transaction check (issue 21 on a ZooKeeper cluster), for ``make reliability``; the
quick form is tests/test_cluster_transactions.py.

Three brokers and a private ZooKeeper; ``__transaction_state`` with replication factor 3 (min.insync 2) and a
topic of three partitions (RF 3, min.insync 2) led by the three brokers. A confluent-kafka transactional producer
commits numbered transactions of six records spread over the partitions (tools.cluster.txnload) while brokers are
SIGKILLed and restarted round after round: the transactional id's coordinator two rounds in three, another broker
otherwise. At the end a read_committed consumer must read every transaction the producer was told committed exactly
once and completely, and nothing else.
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from tools.cluster.brokers import LocalCluster
from tools.cluster.txnload import TxnLog, run_transactions, settled_check

from .runner import Row

TOPIC = "txn-kills"
TXN_ID = "reliability-txn"
PER_BATCH = 6


def _coordinator(cluster: LocalCluster) -> int:
    """The broker id FindCoordinator(TRANSACTION) names for TXN_ID, or -1 while there is none."""
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    from tools.cluster import raw

    body = FindCoordinatorRequest(key=TXN_ID, key_type=1).encode(version=2)
    for broker in cluster.brokers.values():
        if not broker.alive:
            continue
        try:
            answer = FindCoordinatorResponse.decode(raw.request(broker.bootstrap, 10, 2, body), version=2)
        except OSError:
            continue
        if answer.error_code == 0:
            return int(answer.node_id)
    return -1


def cluster_txn_row(root: Path, rounds: int, seed: int, batches: int = 100_000) -> Row:
    """``rounds`` kills while the producer commits transactions (at most ``batches``), then the check."""
    row = Row(f"cluster transactions: RF 3, min.insync 2, {rounds} broker SIGKILLs (the coordinator 2 in 3)")
    stop = threading.Event()
    rng = random.Random(seed)
    overrides = {"auto.leader.rebalance.enable": "false", "transaction.state.log.num.partitions": "4"}
    with LocalCluster(root / "cluster-txn", overrides=overrides) as cluster:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
        cluster.wait_for(
            lambda: all(len(p["isr"]) == 3 and p["leader"] > 0 for p in cluster.metadata(TOPIC).values()), 60, "ISR"
        )
        log = TxnLog()
        producer = threading.Thread(
            target=run_transactions,
            args=(cluster, TOPIC, TXN_ID, batches, PER_BATCH, 3, log, 1800.0, stop),
            daemon=True,
        )
        producer.start()
        coordinators = []
        try:
            for _ in range(rounds):
                time.sleep(rng.uniform(1.5, 4.0))
                if not producer.is_alive():
                    break
                coordinator = _coordinator(cluster)
                coordinators.append(coordinator)
                victim = coordinator if coordinator > 0 and rng.random() < 2 / 3 else rng.choice(list(cluster.brokers))
                cluster.brokers[victim].kill()
                row.runs += 1
                time.sleep(rng.uniform(0.2, 2.0))
                cluster.brokers[victim].start()
            time.sleep(2.0)  # a few transactions with every broker back
        finally:
            stop.set()
            producer.join(1800)
            for broker in cluster.brokers.values():
                if not broker.alive:
                    broker.start()
        row.acked = len(log.committed) * PER_BATCH
        row.failures += log.errors
        values, problems = settled_check(cluster, TOPIC, 3, log.committed, PER_BATCH)
        row.lost = len(problems["lost"])
        row.corrupt = len(problems["duplicated"]) + len(problems["phantom"])
        for kind, found in problems.items():
            if found:
                row.failures.append(f"{kind}: {found[:5]}")
        row.note = (
            f"{len(log.committed)} transactions committed ({row.acked} records), {log.aborted} aborted and redone, "
            f"{log.producers - 1} producer re-creations; coordinators seen: {sorted(set(coordinators))}; "
            f"read_committed: {len(values)} records, {len(problems['lost'])} lost, {len(problems['duplicated'])} "
            f"duplicated, {len(problems['phantom'])} phantom"
        )
    return row

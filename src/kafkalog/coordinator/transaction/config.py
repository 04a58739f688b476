"""The transaction coordinator's broker configs, with Kafka's names and defaults (TransactionStateManagerConfig,
TransactionLogConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import CoordinatorConfig, at_least, config_field
from . import records as rec


@dataclass(frozen=True)
class TransactionCoordinatorConfig(CoordinatorConfig):
    """The transaction coordinator's broker configs, with Kafka's names and defaults.

    transaction.state.log.replication.factor and transaction.state.log.min.isr default to 1 here (Kafka's are 3
    and 2, which its own single-broker sample config lowers to 1): this broker has one node, so larger values
    could never be met and no transaction could ever start.
    """

    transactional_id_expiration_ms: int = config_field(
        "transactional.id.expiration.ms", "INT", 7 * 24 * 3600 * 1000, at_least(1)
    )
    transaction_max_timeout_ms: int = config_field("transaction.max.timeout.ms", "INT", 900_000, at_least(1))
    transaction_state_log_num_partitions: int = config_field(
        "transaction.state.log.num.partitions", "INT", 50, at_least(1)
    )
    transaction_state_log_replication_factor: int = config_field(
        "transaction.state.log.replication.factor", "INT", 1, at_least(1)
    )
    transaction_state_log_segment_bytes: int = config_field(
        "transaction.state.log.segment.bytes", "INT", 100 * 1024 * 1024, at_least(1)
    )
    transaction_state_log_min_isr: int = config_field("transaction.state.log.min.isr", "INT", 1, at_least(1))
    abort_timed_out_transaction_cleanup_interval_ms: int = config_field(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms", "INT", 10_000, at_least(1)
    )
    remove_expired_transactional_id_cleanup_interval_ms: int = config_field(
        "transaction.remove.expired.transaction.cleanup.interval.ms", "INT", 3_600_000, at_least(1)
    )
    transaction_log_value_version: int = rec.HIGHEST_VALUE_VERSION  # not a broker config: tests write v0 with it
    partition_verification_enable: bool = config_field("transaction.partition.verification.enable", "BOOLEAN", True)

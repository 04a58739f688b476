"""The broker's Prometheus endpoint (``metrics.port``): Kafka's JMX metrics under the names a dashboard expects.

Kafka publishes its metrics as JMX MBeans; Prometheus reads them through the JMX exporter (a Java agent). The
names here are the ones that exporter gives Kafka's MBeans with its Kafka example rules (prometheus/jmx_exporter,
``example_configs/kafka-2_0_0.yml``, ``lowercaseOutputName: true``), so an existing Kafka dashboard works:

- a meter ``kafka.X:type=T,name=NPerSec[,k=v...]`` (its ``Count``) becomes the counter ``kafka_x_t_n_total{k=v}``:
  ``kafka_server_brokertopicmetrics_messagesin_total{topic}``, ``..._bytesin_total``, ``..._bytesout_total``,
  ``..._totalproducerequests_total``, ``..._failedproducerequests_total``, ``..._totalfetchrequests_total``,
  ``..._failedfetchrequests_total``, ``..._replicationbytesout_total`` (each also without a ``topic`` label: Kafka's
  all-topics meter), and ``kafka_network_requestmetrics_requests_total{request,version}``;
- a gauge ``kafka.X:type=T,name=N[,k=v...]`` (its ``Value``) becomes ``kafka_x_t_n{k=v}`` (a ``-`` in a name
  becomes ``_``): ``kafka_network_requestchannel_requestqueuesize``,
  ``kafka_server_replicamanager_{partitioncount,leadercount,underreplicatedpartitions,underminisrpartitioncount,
  offlinereplicacount}``, ``kafka_controller_kafkacontroller_{activecontrollercount,offlinepartitionscount}``,
  ``kafka_cluster_partition_underreplicated{topic,partition}``, ``kafka_log_log_{size,numlogsegments,
  logstartoffset,logendoffset}{topic,partition}``, ``kafka_log_logmanager_offlinelogdirectorycount``,
  ``kafka_log_logmanager_logdirectoryoffline{logDirectory}``, the cleaner's ``kafka_log_logcleaner_*`` and
  ``kafka_log_logcleanermanager_*`` (``max_buffer_utilization_percent``, ``cleaner_recopy_percent``,
  ``max_clean_time_secs``, ``max_compaction_delay_secs``, ``deadthreadcount``, ``max_dirty_percent``,
  ``time_since_last_run_ms``, ``uncleanable_partitions_count{logDirectory}``, ``uncleanable_bytes{logDirectory}``);
- a histogram (Kafka's Yammer histograms) becomes ``kafka_x_t_n{k=v,quantile="0.50"|...|"0.999"}`` with
  ``kafka_x_t_n_count``: ``kafka_network_requestmetrics_totaltimems{request}``. It is exposed as a Prometheus
  summary, so it also has the ``_sum`` the exporter's rules lack.

Kafka has no consumer-lag MBean; the lag series are those of the usual Kafka exporter (danielqsj/kafka_exporter):
``kafka_consumergroup_current_offset``, ``kafka_consumergroup_lag`` (high watermark minus committed offset) with
``{consumergroup,topic,partition}``, ``kafka_consumergroup_lag_sum{consumergroup,topic}``,
``kafka_consumergroup_members{consumergroup}``, ``kafka_topic_partition_current_offset`` and
``kafka_topic_partition_oldest_offset{topic,partition}``. The process's own ``process_*`` series (RSS, CPU, fds)
take the place of the JVM's.

Cost: the request path only adds to integers in dicts and appends one float per request to a bounded window
(per partition, never per record). Everything per partition, log or group is read when Prometheus scrapes: the
collector asks the broker's event loop for a snapshot of plain values (so it reads the state on the thread that
changes it) and builds the samples on the HTTP server's thread.

Departures from Kafka, on purpose: a histogram's quantiles come from the last 1,028 requests of that API (Kafka's
reservoir holds 1,028 exponentially-decayed samples) and keep fractions of a millisecond (Kafka rounds to whole
ms, which makes every sub-millisecond request 0). This broker has no queue between network and handler threads (a
request is served on its connection's task once read), so ``requestqueuesize`` counts the requests read and not
yet answered, long polls included.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, ProcessCollector, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger("kafka.metrics.PrometheusReporter")

# Kafka's Yammer histograms publish these percentiles; the exporter turns "50thPercentile" into quantile "0.50".
QUANTILES: tuple[tuple[str, float], ...] = (
    ("0.50", 0.50),
    ("0.75", 0.75),
    ("0.95", 0.95),
    ("0.98", 0.98),
    ("0.99", 0.99),
    ("0.999", 0.999),
)
RESERVOIR_SIZE = 1028  # Yammer's default reservoir size, which Kafka's histograms use
SNAPSHOT_TIMEOUT_S = 10.0


def quantile(values: list[float], q: float) -> float:
    """Yammer's Snapshot.getValue over sorted ``values``: linear interpolation at rank q * (n + 1)."""
    if not values:
        return 0.0
    pos = q * (len(values) + 1)
    if pos < 1:
        return values[0]
    if pos >= len(values):
        return values[-1]
    lower = values[int(pos) - 1]
    upper = values[int(pos)]
    return lower + (pos - int(pos)) * (upper - lower)


class Histogram:
    """A window of the last RESERVOIR_SIZE samples, and the count and sum of every sample since startup."""

    __slots__ = ("count", "total", "window")

    def __init__(self) -> None:
        self.window: collections.deque[float] = collections.deque(maxlen=RESERVOIR_SIZE)
        self.count = 0
        self.total = 0.0

    def update(self, value: float) -> None:
        self.window.append(value)
        self.count += 1
        self.total += value


class BrokerMetrics:
    """What the request path counts (the broker's meters and request histograms).

    Invariant: only the event loop's thread updates these; a scrape copies them there too (see
    :class:`BrokerCollector`), so no lock is needed. Counters only grow.
    """

    def __init__(self) -> None:
        self.messages_in: dict[str, int] = collections.defaultdict(int)
        self.bytes_in: dict[str, int] = collections.defaultdict(int)
        self.bytes_out: dict[str, int] = collections.defaultdict(int)
        self.produce_requests: dict[str, int] = collections.defaultdict(int)
        self.failed_produce_requests: dict[str, int] = collections.defaultdict(int)
        self.fetch_requests: dict[str, int] = collections.defaultdict(int)
        self.failed_fetch_requests: dict[str, int] = collections.defaultdict(int)
        self.replication_bytes_out = 0
        self.requests: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.total_time_ms: dict[str, Histogram] = collections.defaultdict(Histogram)

    def request_done(self, names: tuple[str, ...], version: int, started: float) -> None:
        """One request answered (or, without a response, handled): its rate and total time, from when its frame
        was read to when its response was written (Kafka's TotalTimeMs). ``names`` is the API's name, and for a
        Fetch also FetchConsumer or FetchFollower, as Kafka records both."""
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        for name in names:
            self.requests[(name, version)] += 1
            self.total_time_ms[name].update(elapsed_ms)

    def produced(self, entries: dict, results: dict) -> None:
        """A produce request's appends: records and bytes in per topic (Kafka's ReplicaManager.appendToLocalLog
        marks the request's record bytes and the appended message count), and failed partitions."""
        for tp, result in results.items():
            topic = tp.topic
            self.produce_requests[topic] += 1
            if result.error is None:
                if not result.info.is_duplicate:  # an idempotent producer's retry of records already written
                    self.messages_in[topic] += result.info.num_records
                self.bytes_in[topic] += len(entries[tp])
            else:
                self.failed_produce_requests[topic] += 1

    def fetched(self, results: dict, from_follower: bool) -> None:
        """A fetch response's record bytes (a follower's count as replication bytes, as Kafka's updateBytesOut)."""
        for tp, result in results.items():
            topic = tp.topic
            self.fetch_requests[topic] += 1
            if result.error is not None:
                self.failed_fetch_requests[topic] += 1
                continue
            size = result.info.records.size if result.info is not None else 0
            if from_follower:
                self.replication_bytes_out += size
            else:
                self.bytes_out[topic] += size

    def snapshot(self) -> dict[str, Any]:
        """Plain copies of every counter (taken on the event loop's thread)."""
        return {
            "messagesin": dict(self.messages_in),
            "bytesin": dict(self.bytes_in),
            "bytesout": dict(self.bytes_out),
            "totalproducerequests": dict(self.produce_requests),
            "failedproducerequests": dict(self.failed_produce_requests),
            "totalfetchrequests": dict(self.fetch_requests),
            "failedfetchrequests": dict(self.failed_fetch_requests),
            "replicationbytesout": self.replication_bytes_out,
            "requests": dict(self.requests),
            "totaltimems": {name: (list(h.window), h.count, h.total) for name, h in self.total_time_ms.items()},
        }


# ----- the scrape-time snapshot -----------------------------------------------------------------------------------
@dataclass
class Snapshot:
    """Plain values read on the event loop; turned into samples on the scrape thread."""

    counters: dict[str, Any]
    request_queue_size: int = 0
    fetch_sessions: tuple[int, int, int] = (0, 0, 0)  # sessions, partitions cached, evictions
    logs: list[tuple[str, int, int, int, int, int]] = field(default_factory=list)  # topic, part, size, segs, start, end
    partitions: list[tuple[str, int, bool, bool, bool, bool]] = field(default_factory=list)
    # topic, partition, led here, under-replicated, under min ISR, offline
    high_watermarks: dict[tuple[str, int], int] = field(default_factory=dict)
    active_controller: int = 0
    offline_partitions: int = 0
    log_dirs: list[tuple[str, bool]] = field(default_factory=list)  # dir, offline
    cleaner: dict[str, Any] = field(default_factory=dict)
    groups: list[tuple[str, int, list[tuple[str, int, int]]]] = field(default_factory=list)  # id, members, offsets


def take_snapshot(server: Any) -> Snapshot:
    """Read what the endpoint publishes from a running KafkaServer (call on its event loop's thread)."""
    snap = Snapshot(server.metrics.snapshot())
    socket_server = server.socket_server
    if socket_server is not None:
        snap.request_queue_size = sum(1 for conn in socket_server.connections() if conn.busy)
    manager = getattr(server, "fetch_manager", None)
    if manager is not None:
        cache = manager.cache
        snap.fetch_sessions = (len(cache), cache.total_partitions, cache.evictions)
    log_manager = server.log_manager
    replica_manager = server.replica_manager
    if log_manager is None or replica_manager is None:
        return snap
    cluster = getattr(server, "cluster", None)
    offline_dirs = set(log_manager.offline_log_dirs)
    snap.log_dirs = [(str(d), d in offline_dirs) for d in log_manager.log_dirs]
    for tp, partition in list(replica_manager.partitions.items()):
        lg = partition.log
        offline = lg.is_offline
        if not offline:
            snap.logs.append(
                (tp.topic, tp.partition, lg.size, len(lg.segments), lg.log_start_offset, lg.log_end_offset)
            )
            snap.high_watermarks[(tp.topic, tp.partition)] = partition.high_watermark
        leader = partition.is_leader
        isr = len(partition.isr)
        replicas = 1
        if cluster is not None:
            state = cluster.leaders.get(tp)
            replicas = len(state.replicas) if state is not None else 1
        under_min = leader and isr < partition.min_insync_replicas
        snap.partitions.append((tp.topic, tp.partition, leader, leader and isr < replicas, under_min, offline))
    if cluster is None:
        snap.active_controller = 1
        snap.offline_partitions = sum(1 for p in snap.partitions if p[5])
    elif cluster.view.controller_id == server.node_id:
        snap.active_controller = 1
        snap.offline_partitions = sum(1 for state in cluster.view.states.values() if state.leader < 0)
    cleaner = log_manager.cleaner
    if cleaner is not None:
        try:
            snap.cleaner = cleaner.metrics()
        except Exception as e:  # a scrape must not fail because one source did
            log.warning("Could not read the log cleaner's metrics: %s", e)
    coordinator = server.group_coordinator
    if coordinator is not None:
        for group_id, group in list(coordinator.groups.items()):
            offsets = [(t, p, oam.offset) for (t, p), oam in list(group.offsets.items())]
            snap.groups.append((group_id, len(group.members), offsets))
    return snap


def _fetch_session_metrics(snap: Snapshot) -> Iterator[Metric]:
    """Kafka's kafka.server:type=FetchSessionCache gauges and eviction meter (KIP-227)."""
    sessions, partitions, evictions = snap.fetch_sessions
    prefix = "kafka_server_fetchsessioncache_"
    yield _gauge(prefix + "numincrementalfetchsessions", "Incremental fetch sessions in the cache", sessions)
    yield _gauge(prefix + "numincrementalfetchpartitionscached", "Partitions of the cached fetch sessions", partitions)
    m = _metric(prefix + "incrementalfetchsessionevictions", "Fetch sessions evicted from the cache", "counter")
    m.add_sample(prefix + "incrementalfetchsessionevictions_total", {}, float(evictions))
    yield m


# ----- building the samples ----------------------------------------------------------------------------------------
def _metric(name: str, doc: str, kind: str) -> Metric:
    return Metric(name, doc, kind)


def _gauge(name: str, doc: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    m = _metric(name, doc, "gauge")
    m.add_sample(name, labels or {}, value)
    return m


def _per_topic_counter(name: str, doc: str, by_topic: dict[str, int]) -> Metric:
    """A BrokerTopicMetrics meter: one series per topic and the all-topics series without a label."""
    m = _metric(name, doc, "counter")
    m.add_sample(name + "_total", {}, float(sum(by_topic.values())))
    for topic, value in sorted(by_topic.items()):
        m.add_sample(name + "_total", {"topic": topic}, float(value))
    return m


_TOPIC_METERS = (
    ("messagesin", "Records appended (MessagesInPerSec)"),
    ("bytesin", "Bytes of produced record batches appended (BytesInPerSec)"),
    ("bytesout", "Record bytes sent to consumers (BytesOutPerSec)"),
    ("totalproducerequests", "Partitions of produce requests (TotalProduceRequestsPerSec)"),
    ("failedproducerequests", "Partitions of produce requests that failed (FailedProduceRequestsPerSec)"),
    ("totalfetchrequests", "Partitions of fetch requests (TotalFetchRequestsPerSec)"),
    ("failedfetchrequests", "Partitions of fetch requests that failed (FailedFetchRequestsPerSec)"),
)

_CLEANER = (
    ("kafka_log_logcleaner_max_buffer_utilization_percent", "max-buffer-utilization-percent"),
    ("kafka_log_logcleaner_cleaner_recopy_percent", "cleaner-recopy-percent"),
    ("kafka_log_logcleaner_max_clean_time_secs", "max-clean-time-secs"),
    ("kafka_log_logcleaner_max_compaction_delay_secs", "max-compaction-delay-secs"),
    ("kafka_log_logcleaner_deadthreadcount", "DeadThreadCount"),
    ("kafka_log_logcleanermanager_max_dirty_percent", "max-dirty-percent"),
    ("kafka_log_logcleanermanager_time_since_last_run_ms", "time-since-last-run-ms"),
)


def build_metrics(snap: Snapshot) -> Iterator[Metric]:
    """Every metric family of one scrape."""
    c = snap.counters
    for key, doc in _TOPIC_METERS:
        yield _per_topic_counter(f"kafka_server_brokertopicmetrics_{key}", doc, c[key])
    m = _metric("kafka_server_brokertopicmetrics_replicationbytesout", "Record bytes sent to followers", "counter")
    m.add_sample("kafka_server_brokertopicmetrics_replicationbytesout_total", {}, float(c["replicationbytesout"]))
    yield m
    yield from _request_metrics(c)
    yield _gauge(
        "kafka_network_requestchannel_requestqueuesize", "Requests read and not yet answered", snap.request_queue_size
    )
    yield from _fetch_session_metrics(snap)
    yield from _replica_metrics(snap)
    yield from _log_metrics(snap)
    yield from _cleaner_metrics(snap.cleaner)
    yield from _group_metrics(snap)


def _request_metrics(c: dict[str, Any]) -> Iterator[Metric]:
    name = "kafka_network_requestmetrics_requests"
    m = _metric(name, "Requests answered, by API and version (RequestsPerSec)", "counter")
    for (request, version), count in sorted(c["requests"].items()):
        m.add_sample(name + "_total", {"request": request, "version": str(version)}, float(count))
    yield m
    name = "kafka_network_requestmetrics_totaltimems"
    m = _metric(name, "Milliseconds from reading a request to writing its response (TotalTimeMs)", "summary")
    for request, (window, count, total) in sorted(c["totaltimems"].items()):
        values = sorted(window)
        for label, q in QUANTILES:
            m.add_sample(name, {"request": request, "quantile": label}, quantile(values, q))
        m.add_sample(name + "_count", {"request": request}, float(count))
        m.add_sample(name + "_sum", {"request": request}, total)
    yield m


def _replica_metrics(snap: Snapshot) -> Iterator[Metric]:
    parts = snap.partitions
    yield _gauge("kafka_server_replicamanager_partitioncount", "Partitions on this broker", len(parts))
    yield _gauge("kafka_server_replicamanager_leadercount", "Partitions led here", sum(1 for p in parts if p[2]))
    yield _gauge(
        "kafka_server_replicamanager_underreplicatedpartitions",
        "Partitions led here whose ISR is smaller than their replica set",
        sum(1 for p in parts if p[3]),
    )
    yield _gauge(
        "kafka_server_replicamanager_underminisrpartitioncount",
        "Partitions led here whose ISR is smaller than min.insync.replicas",
        sum(1 for p in parts if p[4]),
    )
    yield _gauge(
        "kafka_server_replicamanager_offlinereplicacount",
        "Replicas in an offline log dir",
        sum(1 for p in parts if p[5]),
    )
    m = _metric("kafka_cluster_partition_underreplicated", "1 if the partition is under-replicated", "gauge")
    for topic, partition, _, under, _, _ in parts:
        m.add_sample(m.name, {"topic": topic, "partition": str(partition)}, 1.0 if under else 0.0)
    yield m
    yield _gauge(
        "kafka_controller_kafkacontroller_activecontrollercount", "1 on the controller", snap.active_controller
    )
    yield _gauge(
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "Partitions without a leader (reported by the controller)",
        snap.offline_partitions,
    )


_LOG_GAUGES = (
    ("size", 2, "Bytes of the partition's log segments"),
    ("numlogsegments", 3, "Segments of the partition's log"),
    ("logstartoffset", 4, "The partition's log start offset"),
    ("logendoffset", 5, "The partition's log end offset"),
)


def _log_metrics(snap: Snapshot) -> Iterator[Metric]:
    for key, index, doc in _LOG_GAUGES:
        m = _metric(f"kafka_log_log_{key}", doc, "gauge")
        for row in snap.logs:
            m.add_sample(m.name, {"topic": row[0], "partition": str(row[1])}, float(row[index]))
        yield m
    offline = [d for d, is_offline in snap.log_dirs if is_offline]
    yield _gauge("kafka_log_logmanager_offlinelogdirectorycount", "Log dirs offline after an I/O error", len(offline))
    m = _metric("kafka_log_logmanager_logdirectoryoffline", "1 if the log dir is offline", "gauge")
    for directory, is_offline in snap.log_dirs:
        m.add_sample(m.name, {"logDirectory": directory}, 1.0 if is_offline else 0.0)
    yield m


def _cleaner_metrics(cleaner: dict[str, Any]) -> Iterator[Metric]:
    if not cleaner:
        return
    for name, key in _CLEANER:
        yield _gauge(name, f"The log cleaner's {key}", float(cleaner.get(key, 0)))
    for key in ("uncleanable-partitions-count", "uncleanable-bytes"):
        name = "kafka_log_logcleanermanager_" + key.replace("-", "_")
        m = _metric(name, f"The log cleaner's {key}, per log dir", "gauge")
        for directory, value in sorted(cleaner.get(key, {}).items()):
            m.add_sample(name, {"logDirectory": directory}, float(value))
        yield m


def _group_metrics(snap: Snapshot) -> Iterator[Metric]:
    current = _metric("kafka_consumergroup_current_offset", "Committed offset of a group at a partition", "gauge")
    lag = _metric("kafka_consumergroup_lag", "High watermark minus the group's committed offset", "gauge")
    lag_sum = _metric("kafka_consumergroup_lag_sum", "Lag of a group over a topic's partitions", "gauge")
    members = _metric("kafka_consumergroup_members", "Members of a consumer group", "gauge")
    for group_id, member_count, offsets in sorted(snap.groups):
        members.add_sample(members.name, {"consumergroup": group_id}, float(member_count))
        sums: dict[str, int] = {}
        for topic, partition, offset in sorted(offsets):
            labels = {"consumergroup": group_id, "topic": topic, "partition": str(partition)}
            current.add_sample(current.name, labels, float(offset))
            hw = snap.high_watermarks.get((topic, partition))
            if hw is None or offset < 0:
                continue
            value = max(0, hw - offset)
            lag.add_sample(lag.name, labels, float(value))
            sums[topic] = sums.get(topic, 0) + value
        for topic, value in sorted(sums.items()):
            lag_sum.add_sample(lag_sum.name, {"consumergroup": group_id, "topic": topic}, float(value))
    yield from (current, lag, lag_sum, members)
    newest = _metric("kafka_topic_partition_current_offset", "A partition's high watermark", "gauge")
    oldest = _metric("kafka_topic_partition_oldest_offset", "A partition's log start offset", "gauge")
    for topic, partition, _, _, start, _ in snap.logs:
        labels = {"topic": topic, "partition": str(partition)}
        newest.add_sample(newest.name, labels, float(snap.high_watermarks.get((topic, partition), -1)))
        oldest.add_sample(oldest.name, labels, float(start))
    yield from (newest, oldest)


class BrokerCollector(Collector):
    """Collects at scrape time: a snapshot taken on the broker's event loop, samples built on the caller's thread."""

    def __init__(self, server: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.server = server
        self.loop = loop

    def collect(self) -> Iterable[Metric]:
        async def snapshot() -> Snapshot:
            return take_snapshot(self.server)

        try:
            future = asyncio.run_coroutine_threadsafe(snapshot(), self.loop)
            snap = future.result(SNAPSHOT_TIMEOUT_S)
        except (RuntimeError, concurrent.futures.TimeoutError) as e:  # the loop is closed, stopping, or stuck
            log.warning("Metrics scrape without broker metrics: no snapshot from the event loop (%r)", e)
            return []
        return list(build_metrics(snap))


class MetricsEndpoint:
    """The HTTP endpoint on ``metrics.host``:``metrics.port`` serving ``/metrics`` from its own daemon thread."""

    def __init__(self, server: Any, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(server, asyncio.get_running_loop()))
        ProcessCollector(registry=self.registry)
        self._httpd, self._thread = start_http_server(port, host or "0.0.0.0", registry=self.registry)
        address = self._httpd.server_address
        self.host, self.port = str(address[0]), int(address[1])
        log.info("Prometheus metrics endpoint on http://%s:%d/metrics", self.host, self.port)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5.0)

"""``kafkalog serve`` brokers of one ZooKeeper cluster, each on a fixed loopback port (kept across restarts, so
clients' bootstrap lists stay valid), with SIGKILL, SIGSTOP/SIGCONT and restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .zookeeper import ZooKeeperServer, free_port

REPO = Path(__file__).resolve().parents[2]


class ClusterBroker:
    """One broker process; ``log_dir`` survives restarts."""

    def __init__(self, broker_id: int, log_dir: Path, zk_connect: str, overrides: dict[str, str]) -> None:
        self.broker_id = broker_id
        self.log_dir = Path(log_dir)
        self.port = free_port()
        self.settings = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.log_dir),
            "zookeeper.connect": zk_connect,
            **overrides,
        }
        self.proc: subprocess.Popen[str] | None = None
        self.lines: list[str] = []
        self._log_file = self.log_dir.parent / f"broker-{broker_id}.log"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 90.0) -> ClusterBroker:
        self._log_file.parent.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-c", "from kafkalog.cli import main; main()", "serve"]
        for key, value in self.settings.items():
            args += ["--override", f"{key}={value}"]
        env = dict(os.environ)
        src = str(REPO / "src")
        env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen(
            args, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, env=env
        )
        started = threading.Event()
        proc = self.proc

        def drain() -> None:
            with open(self._log_file, "a") as out:
                assert proc.stderr is not None
                for line in proc.stderr:
                    self.lines.append(line)
                    out.write(line)
                    out.flush()
                    if "started (cluster id" in line:
                        started.set()
            started.set()

        threading.Thread(target=drain, daemon=True).start()
        if not started.wait(timeout) or not self.alive:
            self.kill()
            raise RuntimeError(f"broker {self.broker_id} did not start:\n" + "".join(self.lines[-40:]))
        return self

    def kill(self) -> None:
        """SIGKILL (an unclean stop: no flush, the ZooKeeper session expires on its own)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class LocalCluster:
    """A ZooKeeper and ``size`` brokers (ids 1..size) under ``directory``."""

    def __init__(self, directory: Path, size: int = 3, overrides: dict[str, str] | None = None) -> None:
        self.directory = Path(directory)
        self.zookeeper = ZooKeeperServer(self.directory / "zookeeper")
        settings = {
            "zookeeper.session.timeout.ms": "4000",
            "replica.lag.time.max.ms": "3000",
            "replica.fetch.backoff.ms": "200",
            # A broker whose partitions have no other in-sync replica retries its controlled shutdown (Kafka's
            # 3 x 5 s): tests stop whole clusters, one broker after the other.
            "controlled.shutdown.retry.backoff.ms": "500",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "3",  # Kafka's 50 x 3 replicas would make every test cluster slow
            **(overrides or {}),
        }
        self.brokers = {
            i: ClusterBroker(i, self.directory / f"broker-{i}" / "logs", self.zookeeper.connect, settings)
            for i in range(1, size + 1)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def start(self) -> LocalCluster:
        self.zookeeper.start()
        try:
            for broker in self.brokers.values():
                broker.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            broker.stop()
        self.zookeeper.stop()

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ----- the view clients have ----------------------------------------------------------------------
    def metadata(self, topic: str, timeout: float = 10.0) -> dict[int, dict[str, object]]:
        """partition -> {"leader", "replicas", "isr"} from a live broker's Metadata (confluent-kafka's admin).

        Brokers learn of a new topic's partitions one after another (each from its own ZooKeeper watch), and the
        admin client asks whichever broker it likes: one that has not learnt them yet answers the topic with an
        error and no partitions. Such an answer is asked again for up to ``timeout`` seconds; an empty dict comes
        back only if it persists (a topic that does not exist)."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self._metadata_once(topic, timeout)
            if answer or time.monotonic() >= deadline:
                return answer
            time.sleep(0.1)

    def _metadata_once(self, topic: str, timeout: float) -> dict[int, dict[str, object]]:
        from confluent_kafka.admin import AdminClient

        live = ",".join(b.bootstrap for b in self.brokers.values() if b.alive)
        admin = AdminClient({"bootstrap.servers": live})
        md = admin.list_topics(topic, timeout=timeout)
        t = md.topics[topic]
        return {
            p.id: {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs), "error": p.error}
            for p in t.partitions.values()
        }

    def wait_for(self, predicate, timeout: float = 30.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                if predicate():
                    return
            except Exception as e:  # a broker restarting, a metadata error: try again
                last = e
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout} s waiting for {what} (last error: {last})")

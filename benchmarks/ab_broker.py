"""A/B of the broker's hot path: the same loads against ``kafkalog serve`` from two commits, in one run.

Run: ``python -m benchmarks.ab_broker OLD [NEW] [--rounds N] [--mib M]`` (NEW defaults to the work tree).
Each commit's ``src/`` is exported to a temp dir (``git archive``); the rounds alternate A, B, A, B... on
fresh brokers, so the machine's noise (2 shared cores) falls on both alike; the answer is the median of
each side and the ratio B/A per load. The clients are the benchmark's (benchmarks.broker_load), each in
its own process.

``--latency`` runs only the produce-to-consume latency load (issue 23's goal: ``--rate`` 10,000 msg/s of
1 KiB for ``--seconds``), ``--repeat`` times per round on the same broker, and reports p50/p99/p99.9/max.
``--create-stall`` measures what topic creation costs other clients: while ``--topics`` topics of
``--partitions`` partitions are created one after another (CreateTopics from librdkafka's admin client),
another connection sends ApiVersions back to back; the figures are those round trips' p99 and maximum, and
the creations' total time.
``--cleaner-stall`` measures what the log cleaner's first clean costs other clients on a cold numba cache
(a fresh ``NUMBA_CACHE_DIR`` per round, the record kernels compiled into it before the broker starts): a compacted
topic gets ``--keyed`` keyed records over small segments, then ApiVersions round trips run for ``--window`` s
while the cleaner compiles its kernels and cleans.
``--latency --create-during N`` adds another client creating N topics of ``--partitions`` partitions from 2 s
into each run (a shape beside the goal's: the goal's load with some admin work).
``--a-producer``/``--b-producer`` (JSON) give each side's paced producer more arguments, to A/B the harness
itself on one tree: ``python -m benchmarks.ab_broker HEAD HEAD --latency --a-producer '{"pacing": "spin"}'``.
``--a-broker``/``--b-broker`` (JSON) give each side's broker settings for the default loads, to A/B a broker
setting on one tree: ``python -m benchmarks.ab_broker HEAD HEAD --b-broker '{"socket.send.buffer.bytes": "-1"}'``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tarfile
import threading
from pathlib import Path
from typing import Any

from . import common

LOADS = ("produce 1p 1KiB acks=1 none", "produce 16p 100B acks=1 none", "produce 1p 1KiB acks=all lz4", "consume 1p")


def _export(ref: str, into: Path, side: str = "") -> Path:
    """The ``src/`` of commit ``ref``, extracted under ``into`` (in a dir of ``side``'s); the tree's root."""
    archive = subprocess.run(
        ["git", "-C", str(common.REPO), "archive", "--format=tar", ref, "src"], check=True, capture_output=True
    ).stdout
    root = into / (side + ref.replace("/", "_"))
    root.mkdir(parents=True)
    tar_path = root / "src.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(root, filter="data")
    return root


def _round(tree: Path, mib: int, work: Path, settings: dict[str, str] | None = None) -> dict[str, float]:
    """One broker from ``tree`` (with ``settings`` over the defaults) and every load against it: MB/s per load,
    broker CPU seconds per GB."""
    import tests.brokertools as brokertools

    from .bench_broker import _cpu_seconds, _create_topic, _e2e_latency_at, _load_consume, _load_produce

    brokertools.REPO = tree  # BrokerProcess puts REPO/src first on the broker's PYTHONPATH
    out: dict[str, float] = {}
    with brokertools.BrokerProcess(work / "logs", {"num.partitions": "1", **(settings or {})}) as server:
        assert server.proc is not None
        pid = server.proc.pid
        _create_topic(server.bootstrap, "warm", 1)
        # The first produce a fresh broker serves (512 KiB in one request): what a one-off stall costs.
        first = _load_produce(server.bootstrap, "warm", 512, 1024, "1", "none", config={"linger.ms": 100})
        out["first produce ms"] = first["seconds"] * 1e3
        _load_produce(server.bootstrap, "warm", 512, 1024, "1", "none")
        _load_consume(server.bootstrap, "warm", 1024, 1)  # __consumer_offsets and the JIT before the clock
        shapes = {
            LOADS[0]: (1, 1024, "1", "none"),
            LOADS[1]: (16, 100, "1", "none"),
            LOADS[2]: (1, 1024, "all", "lz4"),
        }
        for name, (parts, size, acks, codec) in shapes.items():
            topic = name.replace(" ", "-").replace("=", "")
            records = (mib << 20) // size // (4 if size < 1024 else 1)
            _create_topic(server.bootstrap, topic, parts)
            before = _cpu_seconds(pid)
            answer = _load_produce(server.bootstrap, topic, records, size, acks, codec)
            out[name] = records * size / answer["seconds"] / 1e6
            out[name + " cpu s/GB"] = (_cpu_seconds(pid) - before) / (records * size / 1e9)
        _create_topic(server.bootstrap, "latency", 1)
        latency = _e2e_latency_at(server.bootstrap, "latency", 5000, 3.0)
        out["latency p50 ms at 5k msg/s"] = latency["p50_ms"]
        out["latency p99 ms at 5k msg/s"] = latency["p99_ms"]
        records = (mib << 20) // 1024
        before = _cpu_seconds(pid)
        answer = _load_consume(server.bootstrap, LOADS[0].replace(" ", "-").replace("=", ""), records, 1)
        out[LOADS[3]] = records * 1024 / answer["seconds"] / 1e6
        out[LOADS[3] + " cpu s/GB"] = (_cpu_seconds(pid) - before) / (records * 1024 / 1e9)
    return out


def _latency_round(tree: Path, work: Path, args: argparse.Namespace, producer: dict[str, Any]) -> dict[str, float]:
    """One broker from ``tree``, the latency load ``args.repeat`` times on fresh topics: the median of each
    percentile, the worst delay and producer lag, the records lost."""
    import tests.brokertools as brokertools

    from .bench_broker import _create_topic, _e2e_latency_at

    brokertools.REPO = tree
    runs = []
    with brokertools.BrokerProcess(work / "logs", {"num.partitions": "1"}) as server:
        for i in range(args.repeat):
            _create_topic(server.bootstrap, f"latency-{i}", 1)
            creator = None
            if args.create_during:  # another client's admin work meanwhile: topics made from 2 s in
                creator = threading.Timer(2.0, _create_topics, (server.bootstrap, f"side-{i}", args))
                creator.start()
            runs.append(_e2e_latency_at(server.bootstrap, f"latency-{i}", args.rate, args.seconds, producer))
            if creator is not None:
                creator.join()
    out = {f"{key[:-3]} ms": statistics.median(r[key] for r in runs) for key in ("p50_ms", "p99_ms", "p999_ms")}
    out["max ms"] = max(r["max_ms"] for r in runs)
    out["producer behind ms"] = max(r["producer_max_behind_ms"] for r in runs)
    out["lost"] = sum(r["sent"] - r["records"] for r in runs)
    return out


def _create_topics(bootstrap: str, prefix: str, args: argparse.Namespace) -> None:
    """``args.create_during`` topics of ``args.partitions`` partitions, one after another."""
    from .bench_broker import _create_topic

    for j in range(args.create_during):
        _create_topic(bootstrap, f"{prefix}-{j}", args.partitions)


def _create_stall_round(tree: Path, work: Path, args: argparse.Namespace) -> dict[str, float]:
    """One broker from ``tree``: ApiVersions round trips on one connection while topics are created on another."""
    import threading
    import time

    import tests.brokertools as brokertools

    from .bench_broker import _create_topic

    brokertools.REPO = tree
    with brokertools.BrokerProcess(work / "logs", {"num.partitions": "1"}) as server:
        _create_topic(server.bootstrap, "warm", 1)  # the admin client's first connection, before the clock
        rtts: list[float] = []
        creating = threading.Event()
        done = threading.Event()

        def ping() -> None:
            from kafka.protocol.metadata import ApiVersionsRequest

            with brokertools.RawClient(server.bootstrap, timeout=120) as client:
                request = ApiVersionsRequest(version=3, client_software_name="ab", client_software_version="1")
                while not done.is_set():
                    sent = time.perf_counter()
                    client.call(request, 3)
                    if creating.is_set():
                        rtts.append(time.perf_counter() - sent)
                    time.sleep(0.001)

        pinger = threading.Thread(target=ping, daemon=True)
        pinger.start()
        time.sleep(0.5)
        creating.set()
        start = time.perf_counter()
        for i in range(args.topics):
            _create_topic(server.bootstrap, f"created-{i}", args.partitions)
        elapsed = time.perf_counter() - start
        done.set()
        pinger.join(120)
    rtts.sort()
    return {
        "ping p50 ms": rtts[len(rtts) // 2] * 1e3,
        "ping p99 ms": rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1e3,
        "ping max ms": rtts[-1] * 1e3,
        "create s": elapsed,
        "pings": float(len(rtts)),
    }


def _pings(bootstrap: str, seconds: float) -> list[float]:
    """ApiVersions round trips on one connection, back to back (1 ms apart), for ``seconds``: each in seconds."""
    import time

    from kafka.protocol.metadata import ApiVersionsRequest

    import tests.brokertools as brokertools

    rtts = []
    request = ApiVersionsRequest(version=3, client_software_name="ab", client_software_version="1")
    with brokertools.RawClient(bootstrap, timeout=300) as client:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            sent = time.perf_counter()
            client.call(request, 3)
            rtts.append(time.perf_counter() - sent)
            time.sleep(0.001)
    return sorted(rtts)


def _cleaner_stall_round(tree: Path, work: Path, args: argparse.Namespace) -> dict[str, float]:
    """One broker from ``tree`` on a cold numba cache: ApiVersions round trips while its first clean runs."""
    import os

    from kafka.protocol.producer import ProduceRequest

    import tests.brokertools as brokertools

    from .bench_broker import _create_topic

    cache = work / "numba-cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(tree / "src")}
    warm = "from kafkalog.storage.validator import warm_up; warm_up()"  # the append path's kernels: not measured
    subprocess.run([sys.executable, "-c", warm], env=env, check=True, timeout=900)
    os.environ["NUMBA_CACHE_DIR"] = str(cache)
    brokertools.REPO = tree
    try:
        with brokertools.BrokerProcess(work / "logs", {"log.cleaner.backoff.ms": "200"}) as server:
            from confluent_kafka.admin import AdminClient, NewTopic

            config = {"cleanup.policy": "compact", "segment.bytes": "16384", "min.cleanable.dirty.ratio": "0.01"}
            admin = AdminClient({"bootstrap.servers": server.bootstrap, "log_level": 4})
            for future in admin.create_topics([NewTopic("compacted", 1, 1, config=config)]).values():
                future.result(60)
            _create_topic(server.bootstrap, "warm", 1)
            from kafkalog.record import RecordBatchBuilder

            P = ProduceRequest.TopicProduceData
            with brokertools.RawClient(server.bootstrap, timeout=300) as client:
                for i in range(args.keyed // 100):
                    builder = RecordBatchBuilder()
                    for j in range(100):
                        builder.append(b"key-%d" % (j % 50), b"v" * 100)
                    part = P.PartitionProduceData(index=0, records=builder.build())
                    request = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000,
                                             topic_data=[P(name="compacted", partition_data=[part])])  # fmt: skip
                    client.call(request, 7, correlation_id=i + 1)
            rtts = _pings(server.bootstrap, args.window)
            checkpoint = work / "logs" / "cleaner-offset-checkpoint"  # "topic partition offset" lines after 2
            lines = checkpoint.read_text().splitlines()[2:] if checkpoint.exists() else []
            cleaned = any(line.split()[:2] == ["compacted", "0"] and int(line.split()[2]) > 0 for line in lines)
    finally:
        os.environ.pop("NUMBA_CACHE_DIR", None)
    return {
        "ping p50 ms": rtts[len(rtts) // 2] * 1e3,
        "ping p99 ms": rtts[min(len(rtts) - 1, int(len(rtts) * 0.99))] * 1e3,
        "ping p99.9 ms": rtts[min(len(rtts) - 1, int(len(rtts) * 0.999))] * 1e3,
        "ping max ms": rtts[-1] * 1e3,
        "pings": float(len(rtts)),
        "cleaned in window": float(cleaned),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ab_broker", description=__doc__.splitlines()[0])
    parser.add_argument("old", help="commit A")
    parser.add_argument("new", nargs="?", help="commit B (default: the work tree)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mib", type=int, default=128, help="MiB per load (100-byte loads: a quarter)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--latency", action="store_true", help="only the produce-to-consume latency load")
    parser.add_argument("--rate", type=int, default=10_000, help="--latency: records per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="--latency: seconds per run")
    parser.add_argument("--repeat", type=int, default=1, help="--latency: runs per round (fresh topics)")
    parser.add_argument("--create-stall", action="store_true", help="only: other clients' delay while topics are made")
    parser.add_argument("--topics", type=int, default=5, help="--create-stall: topics created")
    parser.add_argument("--partitions", type=int, default=50, help="--create-stall: partitions per topic")
    parser.add_argument("--cleaner-stall", action="store_true", help="only: other clients' delay at the first clean")
    parser.add_argument("--keyed", type=int, default=20_000, help="--cleaner-stall: keyed records produced")
    parser.add_argument("--window", type=float, default=60.0, help="--cleaner-stall: seconds of round trips")
    parser.add_argument("--create-during", type=int, default=0, help="--latency: topics another client creates")
    parser.add_argument("--a-producer", type=json.loads, default={}, help="--latency: paced producer args of A")
    parser.add_argument("--b-producer", type=json.loads, default={}, help="--latency: paced producer args of B")
    parser.add_argument("--a-broker", type=json.loads, default={}, help="the default loads: broker settings of A")
    parser.add_argument("--b-broker", type=json.loads, default={}, help="the default loads: broker settings of B")
    args = parser.parse_args(argv)
    scratch = common.Scratch("ab")
    try:
        a_tree = _export(args.old, scratch.root, "A-")
        b_tree = _export(args.new, scratch.root, "B-") if args.new else common.REPO
        figures: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
        for i in range(args.rounds):
            for side, tree in (("A", a_tree), ("B", b_tree)) if i % 2 == 0 else (("B", b_tree), ("A", a_tree)):
                work = scratch.root / f"{side}{i}"
                if args.cleaner_stall:
                    figures[side].append(_cleaner_stall_round(tree, work, args))
                elif args.create_stall:
                    figures[side].append(_create_stall_round(tree, work, args))
                elif args.latency:
                    producer = args.a_producer if side == "A" else args.b_producer
                    figures[side].append(_latency_round(tree, work, args, producer))
                else:
                    settings = args.a_broker if side == "A" else args.b_broker
                    figures[side].append(_round(tree, args.mib, work, settings))
                subprocess.run(["rm", "-rf", str(work)], check=False)
                print(f"round {i} {side}: " + ", ".join(f"{k} {v:.1f}" for k, v in figures[side][-1].items()))
        result: dict[str, Any] = {"A": args.old, "B": args.new or "work tree", "rounds": args.rounds, "loads": {}}
        if args.latency:
            result["latency"] = {"rate": args.rate, "seconds": args.seconds, "repeat": args.repeat}
            result["producer"] = {"A": args.a_producer, "B": args.b_producer}
        elif args.a_broker or args.b_broker:
            result["broker_settings"] = {"A": args.a_broker, "B": args.b_broker}
        print(f"\nA = {args.old}, B = {args.new or 'work tree'}; medians of {args.rounds} alternating rounds")
        for key in figures["A"][0]:
            a = statistics.median(r[key] for r in figures["A"])
            b = statistics.median(r[key] for r in figures["B"])
            result["loads"][key] = {"A": a, "B": b, "B/A": b / a if a else float("nan")}
            print(f"  {key:40s} A {a:8.1f}  B {b:8.1f}  B/A {b / a if a else float('nan'):.3f}")
        result["each_round"] = figures
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
    finally:
        scratch.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())

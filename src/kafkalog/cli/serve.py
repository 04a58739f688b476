"""``kafkalog serve``: run a Kafka broker on the log dirs, as ``kafka-server-start.sh`` does.

A foreground process for systemd and containers: logs to stderr in Kafka's layout, stops cleanly on SIGTERM
or SIGINT (in-flight requests finish, logs are flushed and the clean-shutdown marker is written).
"""

from __future__ import annotations

import asyncio
import logging
import sys

import click

LOG_FORMAT = "[%(asctime)s] %(levelname)s %(message)s (%(name)s)"


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


@click.command("serve")
@click.argument("properties", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--override", "overrides", multiple=True, metavar="KEY=VALUE", help="Set a server property (repeatable).")
@click.option("--log-dirs", default=None, help="Shorthand for --override log.dirs=DIRS.")
@click.option(
    "--metrics-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Serve Prometheus metrics on this port (0: any free one); shorthand for --override metrics.port=PORT. "
    "Off unless set.",
)
@click.option(
    "--log-level",
    default="INFO",
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    show_default=True,
)
def serve_command(properties, overrides, log_dirs, metrics_port, log_level) -> None:
    """Serve Kafka's protocol on the listeners of PROPERTIES (server.properties) and --override settings.

    Without any, it listens on PLAINTEXT://127.0.0.1:9092 with log.dirs /tmp/kafka-logs, as Kafka's defaults.
    With metrics.port (or --metrics-port) it also serves /metrics for Prometheus, on metrics.host (default: every
    interface), with the names Kafka's JMX metrics get through the Prometheus JMX exporter.
    """
    from ..broker.config import KafkaConfig
    from ..broker.server import KafkaServer

    items = list(overrides)
    if log_dirs:
        items.append(f"log.dirs={log_dirs}")
    if metrics_port is not None:
        items.append(f"metrics.port={metrics_port}")
    config = KafkaConfig.load(properties, items)
    _configure_logging(log_level)
    asyncio.run(KafkaServer(config).serve_forever())

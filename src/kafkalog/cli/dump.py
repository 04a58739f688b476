"""``kafkalog dump``: Kafka's DumpLogSegments (``kafka-dump-log.sh``), line for line (spec section 14).

The click wrapper of ``kafkalog.inspect.dumper``: options as Kafka's tool names them, the decoder choice checked
here, errors printed as one ``Error:`` line on stderr with exit status 1. ``--offsets-decoder`` decodes
``__consumer_offsets`` records, ``--transaction-log-decoder`` ``__transaction_state`` records and
``--cluster-metadata-decoder`` KRaft metadata records; the deprecated ``kafka.serializer.*`` decoder names print
Kafka's deprecation line, as Kafka does.
"""

from __future__ import annotations

import contextlib
import os
import sys

import click

from ..errors import KafkaLogError
from ..inspect.decoders import DECODERS, DEPRECATED_DECODERS, STRING_DECODER, DumpError
from ..inspect.dumper import DEFAULT_MAX_MESSAGE_SIZE, Dumper, DumpOptions
from ..layout import INT32_MAX

EXIT_ERROR = 1


def _decoder_choice(value: str | None) -> str | None:
    if value is None:
        return None
    if value in DECODERS or value in DEPRECATED_DECODERS:
        return value
    names = ", ".join([*DECODERS, *DEPRECATED_DECODERS])
    raise click.BadParameter(f"unknown decoder class {value!r}; kafkalog knows: {names}")


# ------------------------------------------------------------------------------------------------- command


def _non_negative(ctx, param, value: int) -> int:
    if value < 0:
        raise click.BadParameter("must not be negative")
    return value


@click.command("dump")
@click.option(
    "--files",
    required=True,
    help="REQUIRED: the comma separated list of data and index log files to be dumped.",
)
@click.option("--deep-iteration", is_flag=True, help="Iterate records, not just batches (implied by printing).")
@click.option("--print-data-log", is_flag=True, help="Print keys and payloads (implied by any decoder option).")
@click.option("--verify-index-only", is_flag=True, help="Check an index against the log, printing only mismatches.")
@click.option(
    "--index-sanity-check",
    is_flag=True,
    help="Only run the sanity check a broker runs on startup to decide whether to rebuild an index.",
)
@click.option(
    "--max-bytes",
    type=int,
    default=INT32_MAX,
    show_default=True,
    callback=_non_negative,
    help="Read only the first N bytes of each .log file.",
)
@click.option(
    "--max-message-size",
    type=int,
    default=DEFAULT_MAX_MESSAGE_SIZE,
    show_default=True,
    callback=_non_negative,
    help="Size of the largest message (used to verify .index files).",
)
@click.option("--skip-record-metadata", is_flag=True, help="Omit the per-record metadata.")
@click.option(
    "--key-decoder-class",
    "key_decoder",
    callback=lambda ctx, param, value: _decoder_choice(value),
    help=f"Decoder of keys: {STRING_DECODER} (default), IntegerDecoder, LongDecoder, DefaultDecoder "
    "(org.apache.kafka.tools.api.* or the deprecated kafka.serializer.*), or hex.",
)
@click.option(
    "--value-decoder-class",
    "value_decoder",
    callback=lambda ctx, param, value: _decoder_choice(value),
    help="Decoder of values; same choices as --key-decoder-class.",
)
@click.option("--offsets-decoder", is_flag=True, help="Decode __consumer_offsets records (offset commits, groups).")
@click.option(
    "--cluster-metadata-decoder",
    is_flag=True,
    help="Decode KRaft cluster metadata records (__cluster_metadata segments and .checkpoint snapshots).",
)
@click.option("--transaction-log-decoder", is_flag=True, help="Decode __transaction_state records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (file, batch, record, entry, report).")
def dump_command(**opts) -> None:
    """Dump log segments, indexes, producer snapshots and transaction indexes, as kafka-dump-log.sh does."""
    files = opts.pop("files")
    out, err = sys.stdout, sys.stderr
    dumper = Dumper(DumpOptions(**opts), out, err)
    try:
        dumper.run(files)
    except BrokenPipeError:  # e.g. piped into head: stop quietly, as a Unix filter does
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(EXIT_ERROR)
    except (DumpError, KafkaLogError, OSError) as e:
        out.flush()
        err.write(f"Error: {e}\n")
        err.flush()
        sys.exit(EXIT_ERROR)
    err.flush()

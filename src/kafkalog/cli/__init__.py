"""The ``kafkalog`` command: Kafka's tools for log dirs (dump, verify, recover, explain, topics, produce/consume).

Each command lives in its own module and registers itself on ``main``. Errors print one clear line
(what and where) and exit non-zero; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys

import click

from ..errors import KafkaLogError

EXIT_ERROR = 1
EXIT_USAGE = 2


class KafkaLogGroup(click.Group):
    """A click group that turns kafkalog's errors and OS errors into one line on stderr."""

    def invoke(self, ctx: click.Context):
        from .common import process_guard

        with process_guard():  # SIGTERM, Ctrl-C and a closed stdout (`| head`), the same way for every command
            try:
                return super().invoke(ctx)
            except BrokenPipeError:
                raise
            except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
                raise  # click prints these itself (usage errors exit 2, data errors 1)
            except (KafkaLogError, OSError, ValueError) as e:
                if ctx.obj and ctx.obj.get("debug"):
                    raise
                click.echo(f"Error: {e}", err=True)
                sys.exit(EXIT_ERROR)
            except Exception as e:  # anything else (a client library's error, a bug): still one line, exit 1
                if ctx.obj and ctx.obj.get("debug"):
                    raise
                click.echo(f"Error: {type(e).__name__}: {e} (run with --debug for the traceback)", err=True)
                sys.exit(EXIT_ERROR)


@click.group(cls=KafkaLogGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.version_option(package_name="kafkalog")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """kafkalog: inspect, repair and use Kafka log directories, byte-compatible with Kafka."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


def _register() -> None:
    from . import commands

    commands.register(main)
    from .serve import serve_command

    main.add_command(serve_command)


_register()

"""The ``kraftlog`` command line."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from kraftlog.wire.discover import log_files


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kraftlog")
def main() -> None:
    """Decode, land, reconstruct and analyse Kafka's KRaft metadata log."""


@main.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--summary", is_flag=True, help="Print counts per type and version instead of records.")
@click.option("--no-redact", is_flag=True, help="Print secrets (config passwords, SCRAM keys, token ids).")
def dump(paths: tuple[Path, ...], summary: bool, no_redact: bool) -> None:
    """Print every record of PATHS (files or directories) as one JSON object per line.

    Keys: file, position, baseOffset, offset, partitionLeaderEpoch, timestamp, isControl, type, version,
    data, error. For metadata records type/version/data are what kafka-dump-log prints as payload.
    """
    from kraftlog.wire.dump import Summary, dump_lines

    files = log_files(paths)
    if not files:
        raise click.ClickException("no metadata log files (*.log, *.checkpoint) under the given paths")
    if summary:
        s = Summary()
        for path, info in files:
            s.add_file(path, info)
        click.echo(s.render())
        return
    out = sys.stdout
    try:
        for line in dump_lines(files, redact=not no_redact):
            out.write(line)
            out.write("\n")
    except BrokenPipeError:  # `kraftlog dump ... | head`
        sys.stderr.close()


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--warehouse", help="Where the Delta tables live (default: the profile's, ./warehouse).")
@click.option("--conf", "conf_file", type=click.Path(exists=True, dir_okay=False), help="TOML profile.")
@click.option("--quiet", is_flag=True, help="Only the one-line summary.")
def ingest(paths: tuple[str, ...], warehouse: str | None, conf_file: str | None, quiet: bool) -> None:
    """Land the KRaft data directories under PATHS (local or any Spark file system) in Delta tables.

    Incremental and idempotent: a re-run adds only what is new; a run killed half-way is completed by
    the next one.
    """
    import logging

    from kraftlog.config import Config
    from kraftlog.spark.ingest import ingest as run_ingest
    from kraftlog.spark.session import build_session

    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(asctime)s %(message)s",
                        datefmt="%H:%M:%S")
    config = Config.load(conf_file, **({"warehouse": {"path": warehouse}} if warehouse else {}))
    spark = build_session(config)
    result = run_ingest(spark, list(paths), config)
    click.echo(result.line())


if __name__ == "__main__":
    main()

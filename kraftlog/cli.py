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


if __name__ == "__main__":
    main()

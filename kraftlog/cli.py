"""The ``kraftlog`` command line."""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from kraftlog.logs import log_to_stderr
from kraftlog.wire.discover import log_files


class _Commands(click.Group):
    """The command group: kraftlog's own errors (``kraftlog.errors``) and what the operating system or a storage
    service refused (``OSError``: an unreachable endpoint, no permission, a full disk; its message names the path)
    end in one line and exit status 1; any other exception is a bug and keeps its traceback."""

    def invoke(self, ctx: click.Context) -> object:
        from kraftlog.errors import TOLD

        try:
            return super().invoke(ctx)
        except TOLD as e:
            raise click.ClickException(str(e)) from e


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kraftlog")
def main() -> None:
    """Decode, land, reconstruct and analyse Kafka's KRaft metadata log."""
    from kraftlog.spark.workers import retaining_arrow_pool

    retaining_arrow_pool()  # (the command's own Arrow buffers, as in its Python workers)


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
        raise click.ClickException("no metadata log files (*.log, *.checkpoint) under "
                                   + ", ".join(str(p) for p in paths))
    if summary:
        s = Summary()
        for path, info in files:
            s.add_file(path, info)
        click.echo(s.render())
        sys.exit(1 if s.error_count else 0)
    out = sys.stdout
    problems = Summary()
    try:
        for line in dump_lines(files, redact=not no_redact, problems=problems):
            out.write(line)
            out.write("\n")
    except BrokenPipeError:  # `kraftlog dump ... | head`
        sys.stderr.close()
        return
    if problems.error_count:  # like fsck: the output is all there, the status says it is not clean
        click.echo(f"{problems.error_count} problem(s), the first: {problems.errors[0]}", err=True)
        sys.exit(1)


def _one_cluster(paths: tuple[Path, ...], cluster: str | None, redact: bool):  # type: ignore[no-untyped-def]
    from kraftlog.identity import choose_cluster
    from kraftlog.state.local import load_clusters

    clusters = {c.cluster_id: c for c in load_clusters(paths, redact=redact)}
    return clusters[choose_cluster(sorted(clusters), cluster)]


_PROFILE = click.option("--profile", "conf_file", type=click.Path(exists=True, dir_okay=False),
                        help="TOML profile (conf/local.toml, conf/cluster.toml); default: the embedded local profile.")

def _known_kinds(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--kind`` values that are entity kinds; another is a usage error naming the kinds (a typo would otherwise
    print an empty state, or no change at all)."""
    from kraftlog.state.entities import KINDS

    known = [k.name for k in KINDS]
    unknown = [v for v in value if v not in known]
    if unknown:
        raise click.BadParameter(f"{', '.join(map(repr, unknown))}: not an entity kind; the kinds: {', '.join(known)}")
    return value


_KINDS = click.option("--kind", "kinds", multiple=True, callback=_known_kinds,
                      help="Only these entity kinds (brokers, partitions, ...).")

_POINT = ("an offset, a time (2026-11-21T03:14:00Z, ms:<epoch millis>, now, or ago: -30m, -1h, -7d) "
          "or latest (the end)")


def _period(start: str | None, end: str | None):  # type: ignore[no-untyped-def]
    """The ``--from``/``--to`` options as a report's period (a bad value: a usage error, exit status 2)."""
    from kraftlog.analytics.report import Period
    from kraftlog.errors import PointError
    from kraftlog.points import parse_bound, parse_time

    try:
        return Period(parse_time(start) if start else None, parse_bound(end))
    except PointError as e:
        raise click.BadParameter(str(e)) from e


_REPORT_FROM = click.option("--from", "start", help="Start of the period: a time (ISO-8601, ms:<epoch millis>, now, "
                            "or ago: -1h, -7d). Default: the start.")
_REPORT_TO = click.option("--to", "end", help="End of the period: the same, or latest. Default: the end of the log.")


def _spark_store(warehouse: str | None, conf_file: str | None):  # type: ignore[no-untyped-def]
    """(session, store, config) for the warehouse of the profile (or ``warehouse``)."""
    from kraftlog.spark.session import build_session
    from kraftlog.spark.store import store_for

    config = _config(warehouse, conf_file)
    spark = build_session(config)
    return spark, store_for(spark, config), config


def _config(warehouse: str | None, conf_file: str | None):  # type: ignore[no-untyped-def]
    """The profile (or the embedded default) with ``--warehouse`` over it."""
    from kraftlog.config import Config

    return Config.load(conf_file, **({"warehouse": {"path": warehouse}} if warehouse else {}))


class _States:
    """Images of one cluster at points of its log, from data directories or from a warehouse's histories."""

    def __init__(self, paths: tuple[Path, ...], warehouse: str | None, conf_file: str | None, cluster: str | None,
                 redact: bool):
        self.paths, self.cluster = paths, cluster
        if warehouse or not paths:
            if not redact:
                raise click.ClickException("--no-redact needs data directories: the tables hold redacted values")
            from kraftlog.identity import choose_cluster
            from kraftlog.spark.history import built_clusters, stale_histories

            _, self.store, _ = _spark_store(warehouse, conf_file)
            built = built_clusters(self.store)
            self.cluster_id = choose_cluster(sorted(built), cluster)
            if (stale := stale_histories(self.store, self.cluster_id, built[self.cluster_id]["last_offset"])):
                click.echo(f"warning: {stale}", err=True)
        else:
            self.store = None
            self.log = _one_cluster(paths, cluster, redact)
            self.cluster_id = self.log.cluster_id

    def at(self, point: str | None, kinds: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
        from kraftlog.points import parse_point

        offset, ts = parse_point(point)
        if self.store is not None:
            from kraftlog.spark.history import image_at

            return image_at(self.store, self.cluster_id, offset, ts, kinds or None)
        from kraftlog.state.local import state_at

        return state_at(self.log, offset, ts)

    def versions(self, kind: str, key: tuple):  # type: ignore[no-untyped-def]
        """Every version of one entity over the whole log."""
        if self.store is not None:
            from kraftlog.spark.history import versions_of

            return versions_of(self.store, self.cluster_id, kind, key)
        from kraftlog.state.local import replay

        found = []
        replay(self.log, on_change=lambda c: found.append(c) if (c.kind, c.key) == (kind, key) else None)
        return found


_SOURCES = [
    click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path)),
    click.option("--warehouse", help="Read the entity histories of this warehouse (Spark) instead of PATHS."),
    _PROFILE,
    click.option("--cluster", help="Cluster id, when there are several."),
]


def _sources(f):  # type: ignore[no-untyped-def]
    for decorator in reversed(_SOURCES):
        f = decorator(f)
    return f


@main.command()
@_sources
@click.option("--at", "point", help=f"Where in the log: {_POINT}. Default: the end.")
@_KINDS
@click.option("--no-redact", is_flag=True, help="Show secrets (data directories only).")
def state(paths: tuple[Path, ...], warehouse: str | None, conf_file: str | None, cluster: str | None,
          point: str | None, kinds: tuple[str, ...], no_redact: bool) -> None:
    """The cluster state (metadata image) at any offset or time, as JSON.

    From data directories (PATHS, no Spark) or from the entity histories of a warehouse (--warehouse,
    after `kraftlog reconstruct`); both give the same JSON.
    """
    import json

    from kraftlog.state.local import image_to_json

    src = _States(paths, warehouse, conf_file, cluster, not no_redact)
    doc = {"cluster_id": src.cluster_id, **image_to_json(src.at(point, kinds), kinds or None)}
    click.echo(json.dumps(doc, indent=1, default=str))


@main.command()
@_sources
@click.option("--from", "start", required=True, help=f"The earlier point: {_POINT}.")
@click.option("--to", "end", help=f"The later point: {_POINT}. Default: the end.")
@_KINDS
def diff(paths: tuple[Path, ...], warehouse: str | None, conf_file: str | None, cluster: str | None, start: str,
         end: str | None, kinds: tuple[str, ...]) -> None:
    """What changed between two points of the log: one JSON object per changed field."""
    import json

    from kraftlog.state.local import diff_images, diff_to_json, topic_names

    src = _States(paths, warehouse, conf_file, cluster, True)
    a, b = src.at(start, kinds), src.at(end, kinds)
    names = topic_names(*(src.at(p, ("topics",)) for p in (start, end))) if kinds and "topics" not in kinds else \
        topic_names(a, b)
    for row in diff_to_json(diff_images(a, b, kinds or None), names):
        click.echo(json.dumps(row, default=str))


def _build_command(f):  # type: ignore[no-untyped-def]
    """The options of the table-building commands (reconstruct, analyze)."""
    for decorator in reversed([
        click.option("--warehouse", help="Where the Delta tables live (default: the profile's, ./warehouse)."),
        _PROFILE,
        click.option("--cluster", "clusters", multiple=True, help="Only these clusters (default: all)."),
    ]):
        f = decorator(f)
    return main.command()(f)


def _build(run, warehouse: str | None, conf_file: str | None, clusters: tuple[str, ...]) -> None:  # type: ignore[no-untyped-def]
    """Run a table build ``run(spark, config, store, clusters)`` and print its one-line summary."""
    log_to_stderr()
    spark, store, config = _spark_store(warehouse, conf_file)
    click.echo(run(spark, config, store, list(clusters) or None).line())


@click.option("--full", is_flag=True, help="Replay every cluster from its base (default: go on from the last build "
              "where the log only grew).")
@_build_command
def reconstruct(warehouse: str | None, conf_file: str | None, clusters: tuple[str, ...], full: bool) -> None:
    """Bring the entity histories (<kind>_history tables) up to date with the landed tables.

    A cluster whose log only grew goes on from where the last build stopped; one whose landed log changed
    otherwise is replayed from its base. Run after `kraftlog ingest`.
    """
    from kraftlog.spark.history import reconstruct as run

    _build(functools.partial(run, full=full), warehouse, conf_file, clusters)


@click.option("--full", is_flag=True, help="Rebuild every cluster's events (default: go on from the last "
              "analysis where the histories only went on).")
@_build_command
def analyze(warehouse: str | None, conf_file: str | None, clusters: tuple[str, ...], full: bool) -> None:
    """Bring the event tables (leader_elections, isr_changes, broker_lifecycle, ...) up to date with the histories.

    A cluster whose histories only went on goes on from its last analysis: events before where they went
    on stand, later ones and windows still open are rebuilt. Run after `kraftlog reconstruct`.
    """
    from kraftlog.spark.analyze import analyze as run

    _build(functools.partial(run, full=full), warehouse, conf_file, clusters)


@main.command()
@click.option("--warehouse", help="Where the Delta tables live (default: the profile's, ./warehouse).")
@_PROFILE
@click.option("--cluster", help="Cluster id, when there are several.")
@_REPORT_FROM
@_REPORT_TO
@click.option("--out", help="HTML file to write: a path or a URI (s3://bucket/reports/x.html), or a folder to "
              "write report-<cluster>.html into (default: report-<cluster>.html here).")
def report(warehouse: str | None, conf_file: str | None, cluster: str | None, start: str | None, end: str | None,
           out: str | None) -> None:
    """One self-contained HTML page of a cluster's events (elections, ISR, brokers, controllers, audit, log health).

    Reads the event tables: run `kraftlog analyze` first.
    """
    from kraftlog.spark.reports import write_report

    period = _period(start, end)
    _, store, _ = _spark_store(warehouse, conf_file)
    click.echo(write_report(store, cluster, period, out))


def _retention(hours: float) -> float:
    """``--retention-hours``, checked before Spark starts (a bad value: a usage error, exit status 2)."""
    from kraftlog.errors import UsageError
    from kraftlog.spark.maintenance import check_retention

    try:
        return check_retention(hours)
    except UsageError as e:
        raise click.BadParameter(str(e)) from e


@main.command()
@click.option("--warehouse", help="Where the Delta tables live (default: the profile's, ./warehouse).")
@_PROFILE
@click.option("--z-order", is_flag=True, help="Z-order by cluster and time instead of compacting.")
@click.option("--retention-hours", type=float, default=168.0, show_default=True,
              callback=lambda _c, _p, hours: _retention(hours), help="Vacuum files unreferenced for longer than this.")
@click.option("--no-vacuum", is_flag=True, help="Compact only.")
def maintain(warehouse: str | None, conf_file: str | None, z_order: bool, retention_hours: float,
             no_vacuum: bool) -> None:
    """Table upkeep: compact small files clustered by cluster and time (or z-order), vacuum unreferenced ones; no
    row changes.

    Holds the warehouse's lease like ingest, reconstruct and analyze.
    """
    from kraftlog.spark.maintenance import maintain as run

    _, store, config = _spark_store(warehouse, conf_file)
    click.echo(run(store, config, z_order=z_order, vacuum=not no_vacuum, retention_hours=retention_hours).line())


@main.command("jvm-archive")
@click.argument("out", type=click.Path(path_type=Path))
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
def jvm_archive(out: Path, paths: tuple[str, ...]) -> None:
    """Write OUT, a class-data archive of the JVM classes a run of PATHS loads, for hourly applications.

    Runs the pipeline on PATHS (a data directory like those the hours read: samples/scenario-a will do) in a JVM of
    its own, on a warehouse of its own, then dumps the classes it loaded with the same Java and Spark jars (about a
    minute). Prints the driver's Java options that use it: each hour's JVM then starts without parsing and
    verifying those classes, and compiles less of what it runs once.
    """
    from kraftlog.spark.class_archive import write_archive

    archive = write_archive(out, list(paths))
    click.echo(f"wrote {archive.path}: {archive.classes} classes of {archive.java}\n"
               f"the driver's Java options of an hourly application (not a rebuild's):\n  {archive.options}\n"
               f"in a profile: [spark.conf] \"spark.driver.extraJavaOptions\" = \"{archive.options}\"\n"
               f"with spark-submit (client mode): --driver-java-options \"{archive.options}\"")


@main.command()
@click.argument("paths", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option("--warehouse", help="Verify the tables of this warehouse instead (Spark): its histories when they are "
              "up to date with its landed tables, else histories built from those aside.")
@_PROFILE
@click.option("--quiet", is_flag=True, help="Only differences and the totals.")
@click.option("--full", is_flag=True, help="On a warehouse: check every snapshot again, not only those no check of "
              "the same histories' lineage holds for (snapshot_checks).")
def verify(paths: tuple[Path, ...], warehouse: str | None, conf_file: str | None, quiet: bool, full: bool) -> None:
    """Replay the log to every snapshot it reaches and compare with the snapshot's own contents.

    PATHS are data directories (or folders above them); each path is checked on its own. Exit status
    0 only when nothing differs (like fsck); 1 when something does.
    """
    if warehouse or not paths:
        from kraftlog.spark.verify import verify_tables

        spark, store, config = _spark_store(warehouse, conf_file)
        report = verify_tables(spark, config, store, full=full)
    else:
        from kraftlog.state.local import load_clusters
        from kraftlog.state.local import verify as verify_cluster

        report = [(cl.cluster_id, verify_cluster(cl)) for p in paths for cl in load_clusters([p])]
    from kraftlog.state.local import verify_lines

    lines, differing = verify_lines(report, quiet)
    click.echo("\n".join(lines))
    sys.exit(1 if differing else 0)


@main.command()
@_sources
@click.option("--at", "point", help=f"Where in the log: {_POINT}. Default: the end.")
@click.option("--path", "node", help="Print this subtree and exit (for scripts); without it, an interactive prompt.")
@click.option("--no-redact", is_flag=True, help="Show config secrets, as kafka-metadata-shell does (data directories "
              "only).")
def shell(paths: tuple[Path, ...], warehouse: str | None, conf_file: str | None, cluster: str | None,
          point: str | None, node: str | None, no_redact: bool) -> None:
    """kafka-metadata-shell over the image at any offset or time (not only at a snapshot).

    Without --path: a prompt with ls, cd, pwd, cat, find, tree, `history PATH` (every version of a leaf) and
    `at <point>` to move in time.
    """
    from kraftlog.state.shell import MetadataShell, image_tree, node_at, tree_text

    src = _States(paths, warehouse, conf_file, cluster, not no_redact)
    if node is None:
        MetadataShell(src.at, point, versions=src.versions).cmdloop()
        return
    tree = node_at({"image": image_tree(src.at(point))}, [p for p in node.split("/") if p])
    if tree is None:
        raise click.ClickException(f"{node}: no such node")
    click.echo(tree_text(tree).rstrip("\n"))


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--warehouse", help="Where the Delta tables live (default: the profile's, ./warehouse).")
@_PROFILE
@click.option("--quiet", is_flag=True, help="Only the one-line summary.")
@click.option("--allow-empty", is_flag=True,
              help="Succeed when PATHS hold no KRaft data directory (default: an error).")
def ingest(paths: tuple[str, ...], warehouse: str | None, conf_file: str | None, quiet: bool,
           allow_empty: bool) -> None:
    """Land the KRaft data directories under PATHS (local or any Spark file system) in Delta tables.

    Incremental and idempotent: a re-run adds only what is new; a run killed half-way is completed by
    the next one.
    """
    from kraftlog.spark.ingest import ingest as run_ingest

    spark, config, found = _landing(paths, warehouse, conf_file, quiet, allow_empty)
    click.echo(run_ingest(spark, list(paths), config, allow_empty=allow_empty, found=found).line())


def _landing(paths: tuple[str, ...], warehouse: str | None, conf_file: str | None, quiet: bool,  # type: ignore[no-untyped-def]
             allow_empty: bool):
    """(session, config, data directories under ``paths``) of a run that lands ``paths``: what can be told
    without Spark (no data directory, an unreachable warehouse) is told before it starts."""
    import logging

    from kraftlog.spark.session import build_session
    from kraftlog.spark.store import check_warehouse
    from kraftlog.storage import normalize
    from kraftlog.wire.discover import find_data_dirs

    log_to_stderr(logging.WARNING if quiet else logging.INFO)
    config = _config(warehouse, conf_file)
    found = find_data_dirs([normalize(p) for p in paths], config.storage.lister(), allow_empty)
    check_warehouse(config.storage, config.warehouse)
    return build_session(config), config, found


@main.command("run")
@click.argument("paths", nargs=-1, required=True)
@click.option("--warehouse", help="Where the Delta tables live (default: the profile's, ./warehouse).")
@_PROFILE
@click.option("--verify", is_flag=True, help="Check the histories against every snapshot they reach; exit status 1 "
              "when one differs (the other steps still run).")
@click.option("--report-dir", help="Write report-<cluster>.html for every cluster and index.html here (a path or a "
              "URI).")
@_REPORT_FROM
@_REPORT_TO
@click.option("--quiet", is_flag=True, help="Only the steps' summaries.")
@click.option("--allow-empty", is_flag=True,
              help="Succeed when PATHS hold no KRaft data directory (default: an error).")
def run(paths: tuple[str, ...], warehouse: str | None, conf_file: str | None, verify: bool, report_dir: str | None,
        start: str | None, end: str | None, quiet: bool, allow_empty: bool) -> None:
    """Ingest PATHS, then bring the histories and event tables up to date, in one Spark session.

    The steps of `kraftlog ingest`, `reconstruct`, `verify` (with --verify), `analyze` and the reports (with
    --report-dir), each as its own command does it, sharing one start-up: what an hourly schedule runs.
    """
    from kraftlog.spark.pipeline import Steps, run_pipeline

    steps = Steps(verify, report_dir, _period(start, end), allow_empty)
    spark, config, found = _landing(paths, warehouse, conf_file, quiet, allow_empty)
    sys.exit(1 if run_pipeline(spark, config, list(paths), steps, found, click.echo) else 0)


if __name__ == "__main__":
    main()

"""Where a first build should evaluate Spark's expressions interpreted: the ``[spark] interpreted_below`` threshold.

    python benchmarks/bench_interpreted.py [--sizes 40000,100000,400000] [--rounds 2] [--cores 2]
                                           [--json out/bench-interpreted.json]

A build of fewer records than ``interpreted_below`` runs interpreted, planning each query once
(``kraftlog.spark.session.INTERPRETED``): a small build never earns back what compiling its queries costs, a big one
does. This measures where that turns, for first builds (a first build counts every record it landed):

* the bundled sample (``samples/scenario-a``), and generated big clusters (``bigcluster.py``) of ``--sizes``
  non-NoOp records (a tenth as many partitions, a hundredth as many topics);
* each landed once; then, from a copy of that warehouse each time, reconstruct + analyze forced interpreted and
  forced compiled, alternating in one process, after a warm-up round of each (a process's first builds pay
  for the JIT's start);
* reported per input: the records the threshold counts, the median seconds of each mode over ``--rounds``, the
  faster mode, and the mode the default threshold picks.
"""

from __future__ import annotations

import argparse
import copy
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bigcluster import generated
from common import ROOT, local_config, save_results, scratch_dir, with_warehouse

SAMPLE = ROOT / "samples" / "scenario-a"
MODES = {"interpreted": 1 << 40, "compiled": 0}  # thresholds that force each mode (0: never counted)


def first_build(spark: Any, landed: Path, config: Any, below: int) -> tuple[float, tuple[bool, bool]]:
    """Seconds of reconstruct + analyze from a copy of the ``landed`` warehouse, with ``interpreted_below`` =
    ``below``; and whether each of the two ran interpreted."""
    from kraftlog.config import Config
    from kraftlog.spark.analyze import analyze
    from kraftlog.spark.history import reconstruct

    data = copy.deepcopy(config.data)
    data["spark"]["interpreted_below"] = below
    forced = Config.load(**data)
    shutil.rmtree(forced.warehouse, ignore_errors=True)
    shutil.copytree(landed, forced.warehouse)
    t0 = time.perf_counter()
    built = reconstruct(spark, forced)
    events = analyze(spark, forced)
    return time.perf_counter() - t0, (built.interpreted, events.plan.interpreted)


def counted(spark: Any, landed: Path, work: Path) -> int:
    """The records a first build of the ``landed`` warehouse counts against the threshold: what ``reconstruct``
    counts (``LastBuilds.state_records``), on a copy given the empty ``replay_state`` a first build starts with."""
    from kraftlog.spark.history import landed as landed_tables
    from kraftlog.spark.increments import last_builds
    from kraftlog.spark.store import open_store
    from kraftlog.state.entities import replay_state_table

    copied = work / f"{landed.name}-counted"
    shutil.copytree(landed, copied)
    try:
        store = open_store(spark, str(copied))
        store.ensure(replay_state_table())
        return int(last_builds(spark, store, None, False).state_records(landed_tables(store)))
    finally:
        shutil.rmtree(copied, ignore_errors=True)


def default_mode(spark: Any, records: int, below: int) -> str:
    """The mode ``kraftlog.spark.session.interpreted`` picks for ``records`` under the threshold ``below``."""
    from kraftlog.spark.session import interpreted

    with interpreted(spark, lambda upto: records, below) as small:
        return "interpreted" if small else "compiled"


def measure(spark: Any, base: Any, work: Path, name: str, inputs: Path, rounds: int) -> dict[str, Any]:
    """One input's first builds in each mode (see the module docstring)."""
    from kraftlog.spark.ingest import ingest

    landing = with_warehouse(base, work, f"{name}-landed")
    ingest(spark, [str(inputs)], landing)
    landed = Path(landing.warehouse)
    records = counted(spark, landed, work)
    config = with_warehouse(base, work, f"{name}-built")
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    for r in range(rounds + 1):  # round 0 warms the process up, in both modes, and is not counted
        for mode, below in MODES.items():
            s, ran = first_build(spark, landed, config, below)
            if ran != (mode == "interpreted",) * 2:
                raise RuntimeError(f"{name}: forced {mode}, reconstruct and analyze ran interpreted: {ran}")
            if r:
                seconds[mode].append(round(s, 1))
    median = {mode: round(statistics.median(s), 1) for mode, s in seconds.items()}
    out = {"records": records, "seconds": seconds, "median": median,
           "faster": min(median, key=median.__getitem__),
           "default_picks": default_mode(spark, records, int(base.interpreted_below))}
    print(f"{name:<18} {records:>10,} {median['interpreted']:>12.1f} {median['compiled']:>9.1f}  "
          f"{out['faster']:<12} {out['default_picks']}", flush=True)
    shutil.rmtree(landed, ignore_errors=True)
    shutil.rmtree(config.warehouse, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="40000,100000,400000", help="non-NoOp records of the generated clusters")
    ap.add_argument("--rounds", type=int, default=2, help="counted rounds of each mode (after one warm-up round)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from kraftlog.spark.session import build_session

    base = local_config(args.cores)
    spark = build_session(base)
    inputs = [("sample", SAMPLE)] + [
        (f"big {n:,}", generated(ROOT / "out", n, max(1, n // 10), max(1, n // 100))[0])
        for n in (int(s) for s in args.sizes.split(",") if s)]
    results: dict[str, Any] = {"cores": args.cores, "interpreted_below": base.interpreted_below,
                               "python": sys.version.split()[0]}
    print(f"{'first build':<18} {'records':>10} {'interpreted':>12} {'compiled':>9}  {'faster':<12} default picks",
          flush=True)
    with scratch_dir("kraftlog-bench-interpreted-") as work:
        for name, where in inputs:
            results[name] = measure(spark, base, work, name.replace(" ", "").replace(",", ""), where, args.rounds)
    spark.stop()
    save_results(args.json, results)


if __name__ == "__main__":
    main()

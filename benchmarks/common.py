"""Helpers shared by the benchmarks: arguments, a local session, a copied corpus, memory readings, results."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[1]


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def jvm_pid(spark: Any) -> int:
    """The process id of a classic session's JVM (its driver; in local mode, the executors too)."""
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


# what a JVM's threads do, by the start of their names as Linux keeps them (15 characters)
JVM_THREADS = {"jit": ("C1 CompilerThre", "C2 CompilerThre"), "tasks": ("Executor task l",),
               "gc": ("GC Thread", "G1 ")}


JvmCpu = tuple[float, dict[str, tuple[str, float]]]


def _stat_fields(stat: str) -> list[str]:
    """The fields of a ``/proc`` ``stat`` line after the name, from the state on (``proc(5)``'s fields 3 on)."""
    return stat[stat.rindex(")") + 2:].split()


def _cpu_seconds(stat: str) -> tuple[str, float]:
    """The name and CPU seconds (user + system) in a ``/proc`` ``stat`` line."""
    fields = _stat_fields(stat)
    return stat[stat.index("(") + 1: stat.rindex(")")], (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def jvm_cpu(pid: int) -> JvmCpu:
    """CPU seconds JVM ``pid`` used so far (Linux ``/proc``): in all (threads that ended included), and per live
    thread, what it does (``JVM_THREADS``, else ``other``) and its seconds."""
    threads = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            name, seconds = _cpu_seconds((task / "stat").read_text())
        except OSError:
            continue  # (a thread that ended)
        threads[task.name] = (next((k for k, starts in JVM_THREADS.items() if name.startswith(starts)), "other"),
                              seconds)
    return _cpu_seconds(Path(f"/proc/{pid}/stat").read_text())[1], threads


def jvm_cpu_between(before: JvmCpu, after: JvmCpu) -> dict[str, float]:
    """The CPU seconds a JVM used between two ``jvm_cpu`` readings, by what its threads do: the JIT's compilers,
    Spark's tasks, the garbage collector; ``other`` (the rest: the driver's planning and scheduling, I/O) also holds
    what threads that ended in between used."""
    out = dict.fromkeys(JVM_THREADS, 0.0)
    for tid, (kind, seconds) in after[1].items():
        if kind in out:
            out[kind] += seconds - before[1].get(tid, (kind, 0.0))[1]
    return {**out, "other": after[0] - before[0] - sum(out.values())}


WorkerCpu = dict[tuple[int, int], float]
PythonCpu = tuple[WorkerCpu, float]


def _processes() -> dict[int, list[int]]:
    """Every process's ``/proc`` ``stat`` fields from the parent on, as integers (ppid at 0; utime, stime, cutime,
    cstime at 10..13; the start time at 18)."""
    stats = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue  # (a process that ended)
            stats[int(d.name)] = [int(x) for x in _stat_fields(stat)[1:20]]
    return stats


def workers_of(jvm: int, stats: dict[int, list[int]]) -> set[int]:
    """The Python workers of JVM ``jvm`` among ``stats`` (``_processes``): the processes it started (PySpark's
    daemon) and theirs (the daemon's forked workers), however deep. Another application's workers are not its."""
    found: set[int] = set()
    parents = {jvm}
    while parents:
        parents = {pid for pid, f in stats.items() if f[0] in parents}
        found |= parents
    return found


def worker_cpu(jvm: int, stats: dict[int, list[int]] | None = None) -> WorkerCpu:
    """CPU seconds (Linux ``/proc``) each Python worker of JVM ``jvm`` (``workers_of``) used so far, by process id and
    start time (a process id the kernel hands out again is another process), and under ``(jvm, -1)`` those of the
    JVM's children it reaped (a daemon that ended).

    A worker's CPU is gone from ``/proc`` once it ends: PySpark's daemon ignores ``SIGCHLD``, so the kernel reaps its
    forks and adds their CPU to no one's. Only a reading taken while it lived (``WorkerMemory.cpu``) keeps it."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = _processes() if stats is None else stats
    out = {(pid, stats[pid][18]): sum(stats[pid][10:14]) / ticks for pid in workers_of(jvm, stats)}
    out[(jvm, -1)] = sum(stats[jvm][12:14]) / ticks if jvm in stats else 0.0
    return out


def python_cpu(jvm: int, samplers: Iterable[threading.Thread] = (), seen: WorkerCpu | None = None) -> PythonCpu:
    """CPU seconds used so far by the Python workers of JVM ``jvm`` (``worker_cpu``; a worker that ended since
    counts as ``seen`` last, e.g. by ``WorkerMemory``) and by this process (the driver's Python), less this
    process's threads ``samplers`` (a benchmark's own, sampling memory)."""
    me = Path(f"/proc/{os.getpid()}")
    sampling = sum(_cpu_seconds((me / "task" / str(t.native_id) / "stat").read_text())[1] for t in samplers
                   if t.native_id is not None)
    return {**(seen or {}), **worker_cpu(jvm)}, _cpu_seconds((me / "stat").read_text())[1] - sampling


def python_cpu_between(before: PythonCpu, after: PythonCpu) -> dict[str, float]:
    """The CPU seconds the Python workers and the driver's Python used between two ``python_cpu`` readings. A worker
    read before and not after (it ended unseen) adds nothing: what it used before is not taken away."""
    workers = sum(seconds - before[0].get(key, 0.0) for key, seconds in after[0].items())
    return {"workers": workers, "driver": after[1] - before[1]}


class WorkerMemory(threading.Thread):
    """Samples the resident memory of JVM ``jvm``'s Python workers (``workers_of``: PySpark's daemon and its forks),
    every tenth of a second; ``peak_kb``: the largest a worker was; ``cpu``: each worker's CPU as last read
    (``worker_cpu``), those that ended since included."""

    def __init__(self, jvm: int) -> None:
        super().__init__(daemon=True)
        self.jvm = jvm
        self.peak_kb = 0
        self.cpu: WorkerCpu = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            stats = _processes()
            for pid in workers_of(self.jvm, stats):
                self.peak_kb = max(self.peak_kb, rss_kb(pid))
            self.cpu = {**self.cpu, **worker_cpu(self.jvm, stats)}
            self.stop.wait(0.1)


def copy_corpus(corpus: Path, dest: Path, copies: int) -> Path:
    for i in range(copies):
        for repo in sorted(corpus.iterdir()):
            target = dest / f"copy{i}_{repo.name}"
            if not target.exists():
                shutil.copytree(repo, target)
    return dest


def corpus_arguments(doc: str | None, argv: list[str] | None) -> argparse.Namespace:
    """The arguments of the Spark benchmarks: ``--corpus``, ``--copies``, ``--cores``, ``--repeat``, ``--json``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus" / "real")
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2, help="ingest runs per input in bench_ingest (the best counts)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if not args.corpus.exists():
        raise SystemExit(f"no corpus at {args.corpus}: pass --corpus")
    return args


def best_of(fn: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The least seconds of ``repeat`` calls of ``fn`` (at least one), and what the last call returned."""
    t = time.perf_counter()
    out = fn()
    best = time.perf_counter() - t
    for _ in range(repeat - 1):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def local_config(cores: int) -> Any:
    """The benchmarks' profile: ``local[cores]``, quiet, each top folder of the input its own cluster."""
    from kraftlog.config import Config

    return Config.load(spark={"master": f"local[{cores}]", "log_level": "ERROR",
                              "conf": {"spark.ui.showConsoleProgress": "false"}},
                       identity={"cluster": "{top}:{cluster.id}"})


def with_warehouse(config: Any, work: Path, name: str) -> Any:
    """``config`` writing to a fresh warehouse of its own under ``work`` for the input ``name``."""
    from kraftlog.config import Config

    return Config.load(**{**config.data, "warehouse": {"path": str(work / f"wh-{name.replace(' ', '')}")}})


def profile_toml(data: dict[str, Any], path: Path) -> Path:
    """A profile's ``data`` (``Config.data``: sections of scalars, nested) written as a TOML file for ``--profile``
    (a JSON string, number or boolean is a TOML one too)."""
    lines: list[str] = []

    def section(name: str, table: dict[str, Any]) -> None:
        lines.append(f"[{name}]")
        lines.extend(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in table.items() if not isinstance(v, dict | list))
        for k, v in table.items():
            if isinstance(v, dict):
                section(f"{name}.{json.dumps(k)}", v)
            elif isinstance(v, list) and v:
                raise ValueError(f"{name}.{k}: a list, not written")

    for name, table in data.items():
        section(json.dumps(name), table)
    path.write_text("\n".join(lines) + "\n")
    return path


def run_command(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    """Seconds ``cmd`` took from start to exit, and its standard output; its output's tail in the error if it
    fails."""
    t0 = time.perf_counter()
    run = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{(run.stdout + run.stderr)[-4000:]}")
    return time.perf_counter() - t0, run.stdout


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    """A directory for a benchmark's inputs and warehouses, removed with all it holds when the benchmark ends."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def save_results(path: Path | None, results: dict[str, Any]) -> None:
    """Write the results as JSON (``--json``), if asked."""
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=2))

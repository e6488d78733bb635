"""Helpers shared by the benchmarks: a copied corpus, memory readings."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_kb(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class WorkerMemory(threading.Thread):
    """Samples the resident memory of every pyspark worker process (``pyspark.daemon`` and its forks)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_kb = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for d in Path("/proc").iterdir():
                if d.name.isdigit():
                    try:
                        cmd = (d / "cmdline").read_bytes()
                    except OSError:
                        continue
                    if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
                        self.peak_kb = max(self.peak_kb, rss_kb(int(d.name)))
            self.stop.wait(0.1)


def copy_corpus(corpus: Path, dest: Path, copies: int) -> Path:
    for i in range(copies):
        for repo in sorted(corpus.iterdir()):
            target = dest / f"copy{i}_{repo.name}"
            if not target.exists():
                shutil.copytree(repo, target)
    return dest

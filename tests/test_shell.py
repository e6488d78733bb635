"""``kraftlog shell`` as a prompt, driven through a pseudo-terminal as a person would use it."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, SCENARIO_A, need


class _Terminal:
    """A command run in a pseudo-terminal: ``send`` a line, ``until`` some text shows."""

    def __init__(self, argv: list[str]):
        self.fd, child = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, cwd=ROOT, close_fds=True,
                                     env={**os.environ, "TERM": "dumb"})
        os.close(child)
        self.seen = ""

    def until(self, text: str, timeout: float = 60.0) -> str:
        """Everything printed until ``text`` shows (after what earlier calls consumed)."""
        end = time.monotonic() + timeout
        while text not in self.seen:
            left = end - time.monotonic()
            assert left > 0, f"no {text!r} in:\n{self.seen[-2000:]}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.fd, 65536).decode("utf-8", "replace").replace("\r\n", "\n")
                except OSError:  # the child closed the terminal
                    break
        i = self.seen.index(text) + len(text)
        out, self.seen = self.seen[:i], self.seen[i:]
        return out

    def send(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def ask(self, line: str) -> str:
        """Type a command; what it prints up to the next prompt."""
        self.send(line)
        return self.until("> ")

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            os.close(self.fd)


def test_the_shell_prompt_navigates_the_image_and_moves_in_time() -> None:
    node = need(SCENARIO_A / "node-2")
    t = _Terminal([sys.executable, "-m", "kraftlog.cli", "shell", str(node)])  # history too, from data directories
    try:
        t.until("/image > ")
        assert all(n in t.ask("ls") for n in ("acls", "cluster", "configs", "features", "topics"))
        t.send("cd topics/byName")
        assert "/image/topics/byName > " in t.until("byName > ")
        assert "orders" in t.ask("ls")
        assert "PartitionRegistration(replicas=" in t.ask("cat orders/0")
        t.send("cd ../../features")
        assert "/image/features" in t.until("features > ", 30) + t.ask("pwd")
        assert "/image/cluster/brokers/101" in t.ask("find /image/cluster/brokers")
        t.send("at 40")  # back in time: the topic did not exist yet (created at offset 46)
        assert "[offset 40]" in t.until("[offset 40]")
        t.until("> ")
        assert "orders" not in t.ask("ls /image/topics/byName")
        assert "before the first record" in t.ask("at 2001-01-01T00:00:00Z")  # outside the log; the shell goes on
        assert "no such node" in t.ask("cat /image/nowhere")
        assert "metadataVersion:" in t.ask("tree /image/features")
        t.send("at latest")
        t.until("> ")
        versions = t.ask("history /image/topics/byName/orders/0").splitlines()[1:-1]  # one line per version
        assert versions[0].startswith("offset 47 (") and "partitionEpoch=0)" in versions[0], versions  # its record
        assert len(versions) > 3 and all("PartitionRegistration(replicas=" in v for v in versions), versions
        assert "history is kept for the leaves" in t.ask("history /image/topics")
        t.send("exit")
        assert t.close() == 0
    finally:
        if t.proc.poll() is None:
            t.proc.kill()


def test_the_one_shot_form_stays_for_scripts(tmp_path: Path) -> None:
    node = need(SCENARIO_A / "node-2")
    out = subprocess.run([sys.executable, "-m", "kraftlog.cli", "shell", str(node), "--path", "/image/features"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and "metadataVersion:" in out.stdout

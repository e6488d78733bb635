"""The analyst notebooks run top to bottom against the bundled sample and draw their plots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT

# the notebooks the README promises: a missing one fails its run (a glob would just run fewer)
NOTEBOOKS = [ROOT / "notebooks" / f"{name}.ipynb" for name in (
    "01_state_at_a_time", "02_leader_elections", "03_isr_churn", "04_broker_flapping", "05_config_audit")]


def _text(nb: Any) -> str:
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            data = o.get("data", {})
            out.append(o.get("text", "") + "".join(str(v) for k, v in data.items() if k.startswith("text")))
    return "\n".join(out)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, sample_events: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    nbformat = pytest.importorskip("nbformat", reason="notebook tests need the dev extra (nbformat, nbclient)")
    nbclient = pytest.importorskip("nbclient", reason="notebook tests need the dev extra (nbformat, nbclient)")
    wh, _ = sample_events
    monkeypatch.setenv("KRAFTLOG_WAREHOUSE", str(wh))
    monkeypatch.delenv("MPLBACKEND", raising=False)
    nb = nbformat.read(path, as_version=4)
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit notebooks without outputs"
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()  # raises on any error
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
              if "image/png" in o.get("data", {})]
    assert images, "every notebook draws at least one plot"
    text = _text(nb)
    assert str(wh) in text and "T4vFxmI9RFCnFwCmltnwag" in text
    expected = {"02_leader_elections": "fragile", "03_isr_churn": "min_insync_replicas",
                "04_broker_flapping": "flapping", "05_config_audit": "retention.ms",
                "01_state_at_a_time": "changed leader"}
    assert expected[path.stem] in text

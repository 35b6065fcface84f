"""Report outputs: JSON round trip, markdown table, plot file."""

from __future__ import annotations

import json

from dpmtv.audit import MECHANISMS, AuditReport, audit_synthetic


def test_report_files_and_verdicts(tmp_path):
    points = (
        audit_synthetic(epsilon=1.0, delta=1e-5, trials=100, num_chunks=4, seed=0),
        audit_synthetic(
            epsilon=1.0, delta=1e-5, trials=100, num_chunks=4, mechanism=MECHANISMS["no-clip"], seed=0
        ),
        audit_synthetic(epsilon=8.0, delta=1e-5, trials=100, num_chunks=4, seed=0),
    )
    report = AuditReport("synthetic", points, {"note": "test"})
    paths = report.write(tmp_path / "out")
    data = json.loads(paths["json"].read_text())
    assert data["violation"] is True and len(data["points"]) == 3
    assert data["points"][1]["mechanism"] == "no-clip" and data["points"][1]["violation"] is True
    verdicts = [row[-1] for row in report.rows()]
    assert verdicts == ["ok", "VIOLATION", "beyond reach"]  # 50 held-out trials cannot reach ε = 8
    markdown = paths["markdown"].read_text()
    assert markdown.count("\n| ") == 4 and '"note": "test"' in markdown
    assert paths["plot"].stat().st_size > 1000
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["audit.json", "audit.md", "audit.png"]

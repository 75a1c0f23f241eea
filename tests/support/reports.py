"""Figures the tests record and a document renders: ``RELIABILITY.md`` and ``SECURITY.md``.

A ``Report`` is a set of tables, each with a title and its count columns. A test carrying the
report's pytest marker calls ``report.record(table, case, **counts)`` with what it tried and
what came of it, before it asserts the targets; a case measured over several examples adds up.
When ``ERMIS_REPORT_DIR`` names a directory, the session writes each report's rows there as
``<marker>.json`` at its end. ``python -m tests.support.reports <marker>`` (what
``scripts/reliability`` and ``scripts/security`` run) runs the marked tests that way and
renders the document; it fails when a test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Report:
    marker: str
    document: str
    intro: list[str]
    tables: dict[str, tuple[str, list[str]]]
    rows: list[dict] = field(default_factory=list)

    def record(self, table: str, case: str, **counts: int) -> None:
        if table not in self.tables or sorted(counts) != sorted(self.tables[table][1]):
            raise ValueError(f"{table!r} takes {self.tables.get(table, ('', []))[1]}, got {sorted(counts)}")
        row = next((row for row in self.rows if (row["table"], row["case"]) == (table, case)), None)
        if row is None:
            self.rows.append({"table": table, "case": case, **counts})
        else:
            for name, value in counts.items():
                row[name] += value

    def render(self, rows: list[dict], test_summary: str) -> str:
        title = self.document.removesuffix(".md").capitalize()
        when = f"{datetime.now(UTC):%Y-%m-%d %H:%M UTC}"
        lines = [f"# {title}", "", *self.intro, "", f"Last run: {when} — {test_summary}."]
        for table, (heading, columns) in self.tables.items():
            body = [row for row in rows if row["table"] == table]
            if not body:
                continue
            lines += ["", f"## {heading}", "", f"| case | {' | '.join(columns)} |", "|---" * (len(columns) + 1) + "|"]
            lines += [f"| {row['case']} | {' | '.join(f'{row[c]:,}' for c in columns)} |" for row in body]
            totals = {column: sum(row[column] for row in body) for column in columns}
            lines.append(f"| **total** | {' | '.join(f'**{totals[c]:,}**' for c in columns)} |")
        return "\n".join(lines) + "\n"


def write_reports(*reports: Report) -> None:
    directory = os.environ.get("ERMIS_REPORT_DIR")
    for report in reports:
        if directory and report.rows:
            Path(directory, f"{report.marker}.json").write_text(json.dumps(report.rows, indent=2))


def regenerate(report: Report, pytest_args: list[str]) -> int:
    """Run the tests marked ``report.marker`` and write ``report.document`` from their figures."""
    data = ROOT / ".data"
    data.mkdir(exist_ok=True)
    rows_file = data / f"{report.marker}.json"
    rows_file.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "-q", "-m", report.marker, "-p", "no:cacheprovider", *pytest_args]
    run = subprocess.run(command, env={**os.environ, "ERMIS_REPORT_DIR": str(data)}, capture_output=True, text=True)
    print(run.stdout[-5000:], run.stderr[-2000:], sep="\n")
    (data / f"{report.marker}.log").write_text(run.stdout + run.stderr)
    summaries = [line for line in run.stdout.splitlines() if line[:1].isdigit() and " in " in line]
    if not rows_file.exists():
        print(f"error: the {report.marker} tests recorded nothing (see .data/{report.marker}.log)", file=sys.stderr)
        return 1
    summary = summaries[-1].split(" in ")[0] if summaries else "no summary"
    (ROOT / report.document).write_text(report.render(json.loads(rows_file.read_text()), summary))
    print(f"wrote {report.document}")
    return run.returncode


if __name__ == "__main__":
    from tests.support.reliability import RELIABILITY
    from tests.support.security import SECURITY

    chosen = {report.marker: report for report in (RELIABILITY, SECURITY)}[sys.argv[1]]
    raise SystemExit(regenerate(chosen, sys.argv[2:]))

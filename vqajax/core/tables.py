"""Tables as Markdown, CSV and JSON (a list of row objects), written together: every file of a
command's tables (and of what it writes beside them) in one all-or-nothing write, so an output
the output rule refuses leaves none of them."""

from __future__ import annotations

import csv
import io
import os
from typing import Any, Sequence

from vqajax.core.files import write_atomic_many


def markdown(columns: Sequence[str], rows: Sequence[dict]) -> str:
  fmt = lambda v: "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)
  numeric = [any(isinstance(r.get(c), (int, float)) for r in rows) for c in columns]
  lines = ["| " + " | ".join(columns) + " |",
           "|" + "".join("---:|" if n else "---|" for n in numeric)]
  lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
  return "\n".join(lines) + "\n"


def csv_text(columns: Sequence[str], rows: Sequence[dict]) -> str:
  buf = io.StringIO()
  writer = csv.writer(buf, lineterminator="\n")
  writer.writerow(columns)
  writer.writerows([("" if r.get(c) is None else r.get(c)) for c in columns] for r in rows)
  return buf.getvalue()


def files(out_dir: str, tables: dict[str, tuple[Sequence[str], Sequence[dict]]]) -> dict[str, Any]:
  """{path: content} of out_dir/NAME.{md,csv,json} for each NAME: (columns, rows) of `tables`."""
  out = {}
  for name, (columns, rows) in tables.items():
    base = os.path.join(out_dir, name)
    out.update({base + ".md": markdown(columns, rows), base + ".csv": csv_text(columns, rows),
                base + ".json": [{c: r.get(c) for c in columns} for r in rows]})
  return out


def write_tables(out_dir: str, tables: dict[str, tuple[Sequence[str], Sequence[dict]]],
                 beside: dict[str, Any] | None = None) -> dict[str, str]:
  """Writes every table's files and `beside` ({path: content}) at once; returns {NAME: its Markdown}."""
  written = files(out_dir, tables)
  write_atomic_many({**(beside or {}), **written}, make_dirs=True)
  return {name: written[os.path.join(out_dir, name + ".md")] for name in tables}


def write_table(out_dir: str, name: str, columns: Sequence[str], rows: Sequence[dict]) -> str:
  """Writes out_dir/name.{md,csv,json} together; returns the Markdown."""
  return write_tables(out_dir, {name: (columns, rows)})[name]

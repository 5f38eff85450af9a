"""Tables as Markdown, CSV and JSON (a list of row objects), written together."""

from __future__ import annotations

import csv
import io
import os
from typing import Sequence

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


def write_table(out_dir: str, name: str, columns: Sequence[str], rows: Sequence[dict]) -> str:
  """Writes out_dir/name.{md,csv,json} together; returns the Markdown."""
  text = markdown(columns, rows)
  base = os.path.join(out_dir, name)
  write_atomic_many({base + ".md": text, base + ".csv": csv_text(columns, rows),
                     base + ".json": [{c: r.get(c) for c in columns} for r in rows]}, make_dirs=True)
  return text

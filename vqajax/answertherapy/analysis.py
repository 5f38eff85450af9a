"""VQA-AnswerTherapy dataset analysis (paper section 3.2) from the released annotations.

Per question, the answer groundings (masks at the image size, `data.masks`) are compared
pairwise by IoU. A question has a SINGLE grounding when every pair has IoU > 0.9, else
MULTIPLE groundings (`iou.single_grounding`, the rule `from_masks` applies to predicted masks); this decision is checked against the released `binary_label`. Each
pair of a multiple-grounding question has one relation, the first that holds of:
  disjoint     IoU = 0
  equal        IoU > 0.9
  contained    the intersection is the whole of the smaller region
  intersected  otherwise
Tables 1-3 use the decision computed here (not `binary_label`):
  table1   the 10 most common questions (lower-cased, stripped) of single and of multiple
  table2   share of multiple-grounding questions by the number of distinct relations (1-4)
  table3   share of multiple-grounding questions that have each relation
with the agreement, the relation counts of the pairs, the disagreements and the
degenerate polygons, overall ("all") and per source.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
from typing import Sequence

import numpy as np

from vqajax.answertherapy import masks
from vqajax.answertherapy.files import SOURCES, Sample, check_unique
from vqajax.answertherapy.iou import EQUAL_IOU, iou_from_counts, single_grounding
from vqajax.core import tables
from vqajax.core.errors import InputError

RELATIONS = ("disjoint", "equal", "contained", "intersected")
SINGLE, MULTIPLE = "single", "multiple"
ALL = "all"


@dataclasses.dataclass(frozen=True, eq=False)
class Grounded:
  """A sample with the IoU and relation of every pair (a, b), a < b, of its groundings."""
  sample: Sample
  ious: tuple[float, ...]
  relations: tuple[str, ...]
  problems: tuple[tuple[int, str], ...]  # (grounding, problem) of degenerate polygons

  @property
  def grounding(self) -> str:
    return SINGLE if single_grounding(np.array(self.ious, np.float64), xp=np) else MULTIPLE


def relation(intersection: int, area_a: int, area_b: int) -> str:
  """The relation of two groundings from their pixel counts (module docstring)."""
  value = iou_from_counts(intersection, area_a, area_b, np)
  if value == 0:
    return "disjoint"
  if value > EQUAL_IOU:
    return "equal"
  return "contained" if intersection == min(area_a, area_b) else "intersected"


def ground(sample: Sample) -> Grounded:
  rasters = [masks.rasterize(p, sample.height, sample.width) for p in sample.polygons]
  areas, inter = masks.overlaps([rle for rle, _ in rasters])
  pairs = list(itertools.combinations(range(len(areas)), 2))
  return Grounded(
      sample=sample,
      ious=tuple(float(iou_from_counts(inter[a, b], areas[a], areas[b], np)) for a, b in pairs),
      relations=tuple(relation(inter[a, b], areas[a], areas[b]) for a, b in pairs),
      problems=tuple((j, p) for j, (_, found) in enumerate(rasters) for p in found))


def analyze(samples: Sequence[Sample]) -> list[Grounded]:
  """Grounds every sample; refuses none, or a record repeated across files (`check_unique`)."""
  if not samples:
    raise InputError("the analysis needs at least one sample")
  check_unique(samples)
  return [ground(s) for s in samples]


def _sets(grounded: Sequence[Grounded]) -> list[tuple[str, list[Grounded]]]:
  """("all", everything), then each source present."""
  by_source = [(s, [g for g in grounded if g.sample.source == s]) for s in SOURCES]
  return [(ALL, list(grounded))] + [(s, gs) for s, gs in by_source if gs]


def _percent(count: int, total: int) -> float | None:
  return 100 * count / total if total else None


def agreement(grounded: Sequence[Grounded]) -> tuple[list[str], list[dict]]:
  """Per set: questions, single / multiple by binary_label and by grounding, agreement."""
  rows = []
  for name, gs in _sets(grounded):
    agree = sum(g.grounding == g.sample.label for g in gs)
    rows.append({
        "set": name, "questions": len(gs),
        "label single": sum(g.sample.label == SINGLE for g in gs),
        "label multiple": sum(g.sample.label == MULTIPLE for g in gs),
        "grounding single": sum(g.grounding == SINGLE for g in gs),
        "grounding multiple": sum(g.grounding == MULTIPLE for g in gs),
        "agree": agree, "agree %": _percent(agree, len(gs))})
  return list(rows[0]), rows


def disagreements(grounded: Sequence[Grounded]) -> tuple[list[str], list[dict]]:
  """The questions whose grounding decision differs from binary_label."""
  rows = [{"file": g.sample.path, "record": g.sample.index, "source": g.sample.source,
           "question": g.sample.question, "label": g.sample.label, "grounding": g.grounding,
           "IoUs": " ".join(f"{v:.4f}" for v in g.ious)}
          for g in grounded if g.grounding != g.sample.label]
  return ["file", "record", "source", "question", "label", "grounding", "IoUs"], rows


def _multiple(gs: Sequence[Grounded]) -> list[Grounded]:
  return [g for g in gs if g.grounding == MULTIPLE]


def relation_pairs(grounded: Sequence[Grounded]) -> tuple[list[str], list[dict]]:
  """Per set: the pairs of groundings of multiple-grounding questions by relation."""
  rows = []
  for name, gs in _sets(grounded):
    counts = collections.Counter(r for g in _multiple(gs) for r in g.relations)
    total = sum(counts.values())
    row = {"set": name, "pairs": total}
    for r in RELATIONS:
      row[r] = counts[r]
      row[f"{r} %"] = _percent(counts[r], total)
    rows.append(row)
  return list(rows[0]), rows


def table2(grounded: Sequence[Grounded]) -> tuple[list[str], list[dict]]:
  """Per set: % of multiple-grounding questions with 1, 2, 3, 4 distinct relations."""
  rows = []
  for name, gs in _sets(grounded):
    multiple = _multiple(gs)
    kinds = collections.Counter(len(set(g.relations)) for g in multiple)
    rows.append({"set": name, "multiple-grounding questions": len(multiple),
                 **{f"{n} %": _percent(kinds[n], len(multiple)) for n in range(1, 5)}})
  return list(rows[0]), rows


def table3(grounded: Sequence[Grounded]) -> tuple[list[str], list[dict]]:
  """Per set: % of multiple-grounding questions that have each relation."""
  rows = []
  for name, gs in _sets(grounded):
    multiple = _multiple(gs)
    rows.append({"set": name, "multiple-grounding questions": len(multiple),
                 **{f"{r} %": _percent(sum(r in g.relations for g in multiple), len(multiple))
                    for r in RELATIONS}})
  return list(rows[0]), rows


def table1(grounded: Sequence[Grounded], top: int = 10) -> tuple[list[str], list[dict]]:
  """The `top` most common questions (lower-cased, stripped) of single- and of
  multiple-grounding questions, with counts and % of their group (ties alphabetical)."""
  columns, rows = ["rank"], [{"rank": k + 1} for k in range(top)]
  for kind in (SINGLE, MULTIPLE):
    questions = [g.sample.question.strip().lower() for g in grounded if g.grounding == kind]
    ranked = sorted(collections.Counter(questions).items(), key=lambda qc: (-qc[1], qc[0]))
    columns += [f"{kind} question", f"{kind} count", f"{kind} %"]
    for row, (question, count) in zip(rows, ranked):
      row.update({f"{kind} question": question, f"{kind} count": count,
                  f"{kind} %": _percent(count, len(questions))})
  return columns, [r for r in rows if len(r) > 1]


def degenerate(grounded: Sequence[Grounded]) -> tuple[list[str], list[dict]]:
  """One row per problem of a degenerate polygon (`data.masks`)."""
  rows = [{"file": g.sample.path, "record": g.sample.index, "source": g.sample.source,
           "grounding": j, "problem": problem}
          for g in grounded for j, problem in g.problems]
  return ["file", "record", "source", "grounding", "problem"], rows


TABLES = {"agreement": agreement, "disagreements": disagreements,
          "relation_pairs": relation_pairs, "table1": table1, "table2": table2,
          "table3": table3, "degenerate": degenerate}


def write_report(grounded: Sequence[Grounded], out_dir: str) -> str:
  """Writes every table of `TABLES` as out_dir/NAME.{md,csv,json}; returns a summary:
  the Markdown of each table (the degenerate polygons as a count)."""
  made = {name: table(grounded) for name, table in TABLES.items()}
  parts = []
  for name, text in tables.write_tables(out_dir, made).items():
    if name == "degenerate":
      counts = collections.Counter(r["problem"] for r in made[name][1])
      text = ", ".join(f"{c} {p}" for p, c in sorted(counts.items())) or "none"
      parts.append(f"degenerate polygons: {text}\n")
    else:
      parts.append(f"{name}:\n{text}")
  return "\n".join(parts)

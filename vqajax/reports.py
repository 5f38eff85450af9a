"""Tables of results (Markdown)."""

from __future__ import annotations

COLUMNS = (("All", ""), ("Yes/No", "/yes/no"), ("Number", "/number"), ("Other", "/other"))


def accuracy_table(rows: dict[str, dict[str, float]]) -> str:
  """Markdown table: one row per run and task, columns All / Yes/No / Number / Other."""
  lines = ["| run | task | " + " | ".join(c for c, _ in COLUMNS) + " |",
           "|---|---|" + "---:|" * len(COLUMNS)]
  for name, metrics in rows.items():
    for task, key in (("open-ended", "accuracy"), ("multiple-choice", "mc_accuracy")):
      if key in metrics:
        cells = [metrics.get(key + suffix) for _, suffix in COLUMNS]
        lines.append(f"| {name} | {task} | " + " | ".join(
            "-" if v is None else f"{v:.2f}" for v in cells) + " |")
  return "\n".join(lines)


def metrics_from_official(scores: dict[str, dict]) -> dict[str, float]:
  """{task: official accuracy dict} -> the flat names of `accuracy_table`."""
  keys = {"OpenEnded": "accuracy", "MultipleChoice": "mc_accuracy"}
  metrics = {}
  for task, accuracy in scores.items():
    metrics[keys[task]] = accuracy["overall"]
    metrics.update({f"{keys[task]}/{t}": v for t, v in accuracy["perAnswerType"].items()})
  return metrics

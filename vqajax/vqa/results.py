"""The official results files of the VQA paper's models and baselines, with their scores.

`results_name` follows the official naming (`v2_OpenEnded_mscoco_val2014_<alg>_results.json`;
v1 and multiple choice without the `v2_` prefix).
"""

from __future__ import annotations

import os

from vqajax.core.files import write_atomic_many
from vqajax.vqa.accuracy import score


def results_name(prefix: str, task: str, info: dict, alg: str, kind: str = "results") -> str:
  """Official naming, e.g. v2_OpenEnded_mscoco_val2014_<alg>_results.json."""
  return f"{prefix}{task}_{info['data_type']}_{info['data_subtype']}_{alg}_{kind}.json"


def write_official(out_dir: str, config, data, alg: str, predicted: dict[str, dict[int, str]],
                   metrics: dict) -> dict[str, dict]:
  """Writes, all or nothing, the official results files of `predicted` ({task: {qid: answer}},
  task 'OpenEnded' / 'MultipleChoice'), their official `_accuracy` and `_evalQA` scores,
  and `metrics.json`; returns {task: official accuracy}."""
  annotations = [a for _, a in data.val_records]
  outputs, scores = {os.path.join(out_dir, "metrics.json"): metrics}, {}
  for task, results in predicted.items():
    prefix = config.data.results_prefix if task == "OpenEnded" else ""  # MC exists in v1 only
    name = lambda kind: os.path.join(out_dir, results_name(prefix, task, data.val_info, alg, kind))
    scores[task], per_question = score.accuracy_of(annotations, results)
    outputs[name("results")] = [{"question_id": q, "answer": a} for q, a in results.items()]
    outputs[name("accuracy")] = scores[task]
    outputs[name("evalQA")] = per_question
  write_atomic_many(outputs, make_dirs=True)
  return scores

"""The official results files of the VQA paper's models and baselines, with their scores,
and the evaluation servers' files of a test split.

`results_name` follows the official naming (`v2_OpenEnded_mscoco_val2014_<alg>_results.json`;
v1 and multiple choice without the `v2_` prefix). The servers name their uploads: VQA v2
(EvalAI) `v2_OpenEnded_mscoco_test-dev2015_<alg>_results.json`, VQA v1 (CodaLab)
`vqa_OpenEnded_mscoco_test-dev2015_<alg>_results.json` / `vqa_MultipleChoice_...` (one
competition each), each also zipped alone (the v1 server takes the zip); VizWiz-VQA
(EvalAI) a list of {"image", "answer"}.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

from vqajax.core.files import write_atomic_many
from vqajax.vqa.accuracy import score

COCO_SPLITS = ("train2014", "val2014", "test-dev2015", "test2015")  # the data_subtype of VQA v1 / v2 files


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


def _zipped(name: str, content: bytes) -> bytes:
  """A zip archive holding `content` as `name` (fixed timestamp: same bytes every run)."""
  buffer = io.BytesIO()
  with zipfile.ZipFile(buffer, "w") as archive:
    archive.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), content,
                     compress_type=zipfile.ZIP_DEFLATED)
  return buffer.getvalue()


def write_submission(out_dir: str, data_format, alg: str, info: dict, predicted: dict[str, list[dict]]) -> list[str]:
  """Writes, all or nothing, the server's files of `predicted` ({task: results records},
  task 'OpenEnded' / 'MultipleChoice') for a test split (`info`: its data_type, data_subtype
  and server version) of `data_format` (`formats.Format`: the files' names, zipped or not;
  module docstring); returns their paths."""
  outputs = {}
  for task, records in predicted.items():
    name = data_format.submission(task, info, alg)
    content = json.dumps(records).encode("utf-8")
    outputs[os.path.join(out_dir, name)] = content
    if data_format.zipped:
      outputs[os.path.join(out_dir, name[:-len(".json")] + ".zip")] = _zipped(name, content)
  write_atomic_many(outputs, make_dirs=True)
  return list(outputs)

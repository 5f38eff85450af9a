"""The predictions of both challenges for a test file, in the released format.

One record per visual question, with the released fields of its test record (image_id,
question_id for VQA-sourced samples, question, answers, width, height, answer_type) and
the prediction: `binary_label` "single" / "multiple" with `p_multiple` (challenge 1), or
`grounding_masks`, one COCO RLE per answer at the image's size, in answer order
(challenge 2). Written to `<test file stem>_<alg>_results.json` (e.g.
`VQA_test_<alg>_results.json`).
"""

from __future__ import annotations

import os

from vqajax.core.files import write_json_atomic


def released_record(sample) -> dict:
  """The released fields of a sample, without its labels."""
  record = {"image_id": sample.image_id}
  if sample.question_id is not None:
    record["question_id"] = sample.question_id
  return {**record, "question": sample.question, "answers": list(sample.answers), "width": sample.width,
          "height": sample.height, "answer_type": sample.answer_type}


def write(out_dir: str, alg: str, test, predictions: list[dict]) -> list[str]:
  """Writes each sample's record with its prediction; returns the file's path."""
  path = os.path.join(out_dir, f"{test.name}_{alg}_results.json")
  write_json_atomic(path, [{**released_record(s), **p} for s, p in zip(test.records, predictions)],
                    make_dirs=True)
  return [path]

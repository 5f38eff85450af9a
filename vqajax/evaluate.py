"""Evaluation: masked metric sums under jit, official results files on the host."""

from __future__ import annotations

import os

import jax
import numpy as np
from jax.experimental import multihost_utils

from vqajax import checkpoint
from vqajax import reports
from vqajax import score
from vqajax import sharding
from vqajax.data import pipeline
from vqajax.data.vqa_dataset import ANSWER_TYPES
from vqajax.experiment import Experiment
from vqajax.files import write_atomic_many
from vqajax.tasks import vqa as vqa_task


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


class Evaluator:
  """`run(params, step) -> {name: value}` over the val split; optionally writes results."""

  def __init__(self, config, data, model, mesh):
    self.config, self.data, self.mesh = config, data, mesh
    self.multiple_choice = "choice_index" in data.val
    self.keys = vqa_task.EVAL_KEYS + (vqa_task.MC_KEYS if self.multiple_choice else ())
    table_ids = jax.device_put(data.table_ids, sharding.replicated(mesh))
    num_types = (len(ANSWER_TYPES), len(data.question_types))

    @jax.jit
    def eval_step(params, batch):
      logits = model.apply({"params": params}, batch, train=False)
      predictions = vqa_task.predict(logits, batch, table_ids)
      return predictions, vqa_task.metric_sums(predictions, batch, *num_types)

    self._eval_step = eval_step

  def run(self, params, step: int, workdir: str | None = None) -> dict[str, float]:
    """Metrics in percent; with `workdir`, also the official results files of this step."""
    totals, kept = None, []
    batch_size = sharding.padded_batch_size(self.config.eval_batch_size, self.mesh)
    for local in pipeline.eval_batches(self.data.val, self.data.store, batch_size, self.keys):
      batch = sharding.to_global(local, self.mesh)
      predictions, sums = self._eval_step(params, batch)
      totals = sums if totals is None else jax.tree.map(lambda a, b: a + b, totals, sums)
      if workdir is not None:
        kept.append((predictions, batch["mask"]))
    metrics = self._summarise(jax.device_get(totals))
    if workdir is not None:
      self._write_results(kept, step, workdir, metrics)
    return metrics

  def _summarise(self, totals) -> dict[str, float]:
    metrics = {}
    for name in ("accuracy", "mc_accuracy"):
      if name not in totals:
        continue
      metrics[name] = 100 * totals[name] / totals["count"]
      for i, answer_type in enumerate(ANSWER_TYPES):
        count = totals["count_per_answer_type"][i]
        if count:
          metrics[f"{name}/{answer_type}"] = 100 * totals[f"{name}_per_answer_type"][i] / count
    return {k: float(v) for k, v in metrics.items()}

  def _write_results(self, kept, step, workdir, metrics) -> None:
    gathered = [jax.tree.map(lambda x: multihost_utils.process_allgather(x, tiled=True), item)
                for item in kept]
    if jax.process_index() > 0:
      return
    mask = np.concatenate([m for _, m in gathered]).astype(bool)
    take = lambda key: np.concatenate([p[key] for p, _ in gathered])[mask]
    questions = [q for q, _ in self.data.val_records]
    answers = self.data.answers.answers
    predicted = {"OpenEnded": {q["question_id"]: answers[i] for q, i in zip(questions, take("answer"))}}
    if self.multiple_choice:
      predicted["MultipleChoice"] = {q["question_id"]: q["multiple_choices"][c]
                                     for q, c in zip(questions, take("mc_choice"))}
    write_official(os.path.join(workdir, "results", f"step_{step}"), self.config, self.data,
                   self.config.name, predicted, {"step": step, **metrics})


def evaluate_checkpoints(config, workdir: str, step: int | None = None, every: bool = False) -> dict:
  """Evaluates saved checkpoints of `workdir` (latest, `step`, or all); returns {step: metrics}."""
  ckpt = checkpoint.Checkpointer(os.path.join(workdir, "checkpoints"), config.keep_checkpoints)
  saved = ckpt.steps()
  if not saved:
    raise FileNotFoundError(f"{workdir}: no checkpoints to evaluate")
  if step is not None and step not in saved:
    raise FileNotFoundError(f"{workdir}: no checkpoint at step {step} (saved: {saved})")
  steps = saved if every else [step if step is not None else max(saved)]
  exp = Experiment.build(config)
  evaluator = Evaluator(config, exp.data, exp.model, exp.mesh)
  target = exp.initial_state(abstract=True)
  results = {}
  for s in steps:
    state, _ = ckpt.restore(s, target)
    results[s] = evaluator.run(state.params, s, workdir=workdir)
    if jax.process_index() == 0:
      print(f"step {s}: results in {os.path.join(workdir, 'results', f'step_{s}')}")
      print(reports.accuracy_table({f"{config.name} @ {s}": results[s]}))
  ckpt.close()
  return results

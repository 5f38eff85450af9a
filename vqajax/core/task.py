"""The task contract: what train and eval need to know about one problem.

A task is a module of a paper package (`vqa/task.py`, `answertherapy/grounding_class.py`,
`answertherapy/grounding_mask.py`) that satisfies `Task`; the front door picks it by
`config.task` (`vqajax.commands.registry`, the one list of tasks) and hands it to `train_and_evaluate` / `Evaluator`,
whose jitted train and eval steps are the same for every task.

A task's data (`load`) holds `train` and `val`: dicts of numpy arrays with one row per
example, `store`: a `FeatureStore` (or None for text-only data), and `encoders`: what
turned the records into arrays, whose `tables()` are recorded with the run
(`core/encoders.py`) and give them back (`encoders_from_tables`) to answer without the
data. The arrays the core itself reads are named here.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

LABEL = "label"              # train split: its length is the train stream's length
IMAGE_ROW = "image_row"      # both splits, with a store: the example's row of the store


@runtime_checkable
class Task(Protocol):
  """The members of a task module."""

  PIPELINE_TAG: str                # the Hub's pipeline tag of its runs (an exported bundle's model card)
  BEST_METRIC: str                 # the val metric that picks the best checkpoint of runs without best_metric
  METRICS: str                     # a regular expression every metric name of its evaluations matches
  FIELDS: dict                     # {dotted config field: core.config.Rule}: what its configs may hold (but
                                   # config.model's fields besides name: those of the model it names)
  CHECKS: Sequence[Callable]       # its rules across config fields, (config) -> None raising InputError
  EVAL_DATA: Sequence[str]         # the config.data fields an evaluation may set (core/evals.py)
  TRAIN_KEYS: Sequence[str]        # the split arrays the train step reads (those present)
  LENGTHS: Mapping[str, str]       # {token array: its lengths' array}: cut to the batch's length bucket

  def rules(self, config) -> dict:
    """{dotted field: core.config.Rule} of every field of `config`: FIELDS and its model's (`core/model.py`)."""

  def load(self, config) -> Any:
    """The data of `config.data`: `.train`, `.val` (dicts of arrays), `.store`."""

  def load_eval(self, config, data) -> Any:
    """`data` (of `load`) with the val split that `config.data` names (an evaluation's own
    files: `core/evals.py`), encoded by `data.encoders`, and its feature store."""

  def sizes(self, data) -> dict[str, int]:
    """Data sizes recorded in run.json."""

  def open_store(self, config) -> Any:
    """The `FeatureStore` `config.data` names (None for text-only data)."""

  def encoders_from_tables(self, tables: dict) -> Any:
    """The encoders of their recorded tables (`data.encoders.tables()`)."""

  def build_model(self, model_config, encoders) -> Any:
    """A flax module sized by the encoders: `model.apply(vars, batch, train=...) -> outputs`."""

  def initial_params(self, model_config, shapes, encoders) -> Any:
    """Where the model starts from elsewhere (its entry's `initial_params`, e.g. a Hub checkpoint,
    `config.model.init_from`): the function from the fresh parameters to the initial ones,
    everything it will read checked now against the parameters' `shapes` (before the run is
    recorded); else None (the fresh parameters stay)."""

  def frozen(self, model_config) -> tuple[str, ...]:
    """The top-level parameter groups the optimizer leaves as they are (its entry's `frozen`: e.g.
    CLIPSeg's CLIP towers); () where everything trains."""

  def make_loss(self, config) -> Any:
    """`(outputs, batch) -> scalar`, jittable: the training loss `config` asks for."""

  def eval_keys(self, data) -> Sequence[str]:
    """The split arrays the eval step reads."""

  def make_eval_step(self, model, data, mesh) -> Any:
    """`(params, batch) -> (predictions, masked metric sums)`, jittable."""

  def summarise(self, totals: Mapping[str, np.ndarray]) -> dict[str, float]:
    """The metrics of the summed totals."""

  def write_results(self, out_dir: str, config, data, predictions, metrics) -> Mapping[str, float] | None:
    """The results files of one evaluation (host, process 0; predictions in val order);
    may return metrics computed from the predictions on the host (e.g. pixel-level
    scores), which join the step's metrics (and are written with them)."""

  def table(self, name: str, metrics: Mapping[str, float]) -> str:
    """A Markdown table for the console."""


@dataclasses.dataclass
class TestFile:
  """A questions-only file as its task read it (`Predicts.read_test`), for `vqajax submit`."""
  path: str
  name: str                          # the split's name, the default output folder (test-dev2015, VQA_test)
  records: list                      # the file's records in file order, as the task's writer needs them
  arrays: dict[str, np.ndarray]      # one row per record: the inputs, `image_row` of the store
  keys: tuple[str, ...] = ()         # the arrays the predict step reads
  info: dict[str, str] = dataclasses.field(default_factory=dict)  # what else names the output files


@runtime_checkable
class Predicts(Protocol):
  """What a task adds to predict a questions-only file for an evaluation server
  (`core/submission.py`)."""

  def read_test(self, config, encoders, store, path: str) -> TestFile:
    """The test file at `path`, its arrays a split without labels (`image_row` of `store`)."""

  def make_predict_step(self, model) -> Any:
    """`(params, batch) -> predictions`, jittable."""

  def write_submission(self, out_dir: str, config, encoders, test: TestFile, predictions) -> list[str]:
    """The server's files of the predictions (host arrays in test-file order); their paths."""

"""vqajax: Visual Question Answering research in JAX / Flax (see README.md).

`vqajax.load(path)` opens a trained run, a workdir or an export bundle, for answering.
"""


def load(path: str, step: int | None = None, *, best: bool = False, weights: str | None = None,
         data_dir: str | None = None):
  """The trained run at `path` (a workdir or a `vqajax export` bundle) at checkpoint `step`
  (default: the latest; `best`: the best by its config.best_metric): a `vqa.ask.Answerer` for a VQA
  run, an `answertherapy.ask.Grounder` for a grounding_mask run. `weights`: the image
  feature extractor's weights file, if it is not where the run recorded it; `data_dir`: a
  bundle's data folder on this machine (for its image ids)."""
  from vqajax import commands
  from vqajax.core import trained
  config = trained.read_config(path, commands.tasks(answering=True), data_dir)
  answering = commands.registry()[config.task].answering
  return answering.from_workdir(path, step, best=best, weights=weights, data_dir=data_dir)

"""The pretrained architectures any paper's task fine-tunes: `config.model.name` -> its
`core/model.Model` entry (the tasks it serves in its `tasks`), spread into each paper's registry
(`vqa/models.MODELS`, `answertherapy/models.MODELS`) so that no paper module names one."""

from vqajax.nn import clipseg_models, paligemma_models, vilt_models

MODELS = {"vilt": vilt_models.VILT, "clipseg": clipseg_models.CLIPSEG, "paligemma": paligemma_models.PALIGEMMA}


def serving(task: str) -> dict:
  """Those of `MODELS` built for `task`."""
  return {name: entry for name, entry in MODELS.items() if task in entry.tasks}

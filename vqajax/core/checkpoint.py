"""The only module that talks to orbax: save / restore the train state and its metadata.

A checkpoint holds the train state (step, params, optimizer state, RNG) and a JSON
record with the input position, so a resumed run reads exactly the batches the
interrupted one would have. The last `keep` checkpoints and the best one by
`best_metric` are kept. Orbax writes a step to a temporary directory and renames it when
complete, so a half-written checkpoint is never listed; one damaged later (truncated or
missing files) is skipped on resume by `restore_latest`.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp
from absl import logging
from orbax.checkpoint import checkpoint_managers as policies

from vqajax.core.errors import InputError


class Checkpointer:

  def __init__(self, directory: str, keep: int = 3, best_metric: str = "accuracy"):
    self._best_metric = best_metric
    policy = policies.AnyPreservationPolicy([
        policies.LatestN(n=keep),
        policies.BestN(get_metric_fn=lambda m: m[best_metric], n=1,
                       keep_checkpoints_without_metrics=False),
    ])
    options = ocp.CheckpointManagerOptions(preservation_policy=policy, create=True,
                                           enable_async_checkpointing=False)
    if "://" not in directory:  # orbax wants absolute local paths; gs:// etc. pass through
      directory = os.path.abspath(directory)
    self.directory = directory
    self.manager = ocp.CheckpointManager(directory, options=options, item_names=("state", "meta"))

  def save(self, step: int, state: Any, meta: dict, metrics: Optional[dict] = None) -> None:
    metrics = {self._best_metric: float(metrics[self._best_metric])} if metrics else None
    self.manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)), metrics=metrics, force=True)
    self.manager.wait_until_finished()

  def steps(self) -> list[int]:
    return list(self.manager.all_steps())

  def latest_step(self) -> Optional[int]:
    return self.manager.latest_step()

  def restore(self, step: int, target: Any) -> tuple[Any, dict]:
    """Restores `step` straight onto the shardings of `target` (arrays or shape structs)."""
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, target)
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
    return restored.state, restored.meta

  def restore_latest(self, target: Any) -> Optional[tuple[Any, dict, int]]:
    """(state, meta, step) of the newest checkpoint that restores, or None if there is none.

    Newer checkpoints that fail to restore while an older one succeeds are damaged: they
    are moved to `<directory>.unreadable/<step>` (kept for inspection, and so that the
    resumed run can save those steps again) and reported. When no checkpoint restores,
    nothing is moved and the error names each failure (typically a changed config).
    """
    failures = []
    for step in sorted(self.steps(), reverse=True):
      try:
        state, meta = self.restore(step, target)
      except Exception as e:  # pylint: disable=broad-except  # orbax / tensorstore: many kinds
        failures.append((step, e))
        continue
      for bad, error in failures:
        self._set_aside(bad, error, step)
      return state, meta, step
    if failures:
      reasons = "; ".join(f"step {step}: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                          for step, e in failures)
      raise InputError(f"{self.directory}: no checkpoint can be restored ({reasons})")
    return None

  def _set_aside(self, step: int, error: Exception, resumed: int) -> None:
    aside = os.path.join(self.directory + ".unreadable", str(step))
    os.makedirs(os.path.dirname(aside), exist_ok=True)
    shutil.move(os.path.join(self.directory, str(step)), aside)
    self.manager.reload()
    message = (f"checkpoint at step {step} cannot be restored ({type(error).__name__}); moved to "
               f"{aside}; resuming from step {resumed}")
    logging.warning(message)

  def close(self) -> None:
    self.manager.close()

"""The only module that talks to orbax: save / restore the train state and its metadata.

A checkpoint holds the train state (step, params, optimizer state, RNG) and a JSON
record with the input position, so a resumed run reads exactly the batches the
interrupted one would have. The last `keep` checkpoints and the best one by
`best_metric` are kept.
"""

from __future__ import annotations

import os
from typing import Any, Optional

import jax
import orbax.checkpoint as ocp
from orbax.checkpoint import checkpoint_managers as policies


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

  def close(self) -> None:
    self.manager.close()

"""One 1-D ('data',) mesh: batches are split over it, parameters are replicated."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from vqajax.core.errors import InputError


def data_mesh(devices=None) -> Mesh:
  return Mesh(np.asarray(devices if devices is not None else jax.devices()), ("data",))


def data_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P("data"))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def in_mesh(mesh: Mesh, fn):
  """`fn` traced with `mesh` as the abstract mesh, so models can place per-device work
  (`shard_map` over 'data', e.g. the question LSTM); jit the result."""

  def traced(*args, **kwargs):
    with jax.sharding.use_abstract_mesh(mesh.abstract_mesh):
      return fn(*args, **kwargs)

  return traced


def local_batch_size(global_batch: int, mesh: Mesh) -> int:
  """This host's share of a global batch; the batch must split evenly over devices."""
  if global_batch % mesh.devices.size:
    raise InputError(f"config.batch_size {global_batch} does not split over {mesh.devices.size} devices; "
                     "choose a multiple of the device count")
  return global_batch // jax.process_count()


def to_global(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles every host's slice into global arrays sharded over 'data'."""
  sharding = data_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def padded_batch_size(batch: int, mesh: Mesh) -> int:
  """`batch` rounded up to a multiple of the device count (eval batches are masked)."""
  return -(-batch // mesh.devices.size) * mesh.devices.size

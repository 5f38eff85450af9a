"""Image features kept on the devices: the host sends row ids, the step gathers the rows.

`config.data.features_on_device` chooses where a run's features live:

* "false": streamed; the host reads every batch's rows from the store (`pipeline`);
* "true": the rows the splits use form one table on the devices: replicated when it takes
  at most `DEVICE_SHARE` of one device's memory (or that memory is unknown), else its rows
  split over every device (the batch axes) when each device's part fits that share; refused
  when neither fits;
* "sharded": its rows split over every device whatever its size (tables too big to copy);
* "auto" (default): "true" when the table fits, "false" otherwise and on devices that do
  not report their memory (the CPU, whose "device memory" is the host's own RAM).

The table keeps the store's dtype (fc7 of all 123k COCO images at float16: ~1 GB); the
step casts the gathered rows to float32, the values the host path reads. Sharded, each
device looks up the rows it holds for the whole global batch and a reduce-scatter hands
every device its own rows (exact: one device contributes each row, the others zeros).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from vqajax.core import sharding
from vqajax.core.errors import InputError
from vqajax.core.task import IMAGE_ROW

CHOICES = ("auto", "true", "false", "sharded")
DEVICE_SHARE = 0.25  # of one device's memory (`bytes_limit`) a table may take: the rest is the model's
READ_ROWS = 8192     # rows read from the store at a time while the table is built


def layout(choice: str, table_bytes: int, mesh) -> str | None:
  """"replicated", "sharded" or None (streamed) for a table of `table_bytes` on `mesh`."""
  if choice not in CHOICES:
    raise InputError(f"config.data.features_on_device '{choice}' is not one of {CHOICES}")
  if choice in ("false", "sharded"):
    return None if choice == "false" else "sharded"
  stats = mesh.local_devices[0].memory_stats() or {}  # a device of this host (others' give no stats)
  budget = DEVICE_SHARE * stats["bytes_limit"] if "bytes_limit" in stats else None
  if budget is None:
    return "replicated" if choice == "true" else None
  if table_bytes <= budget:
    return "replicated"
  if table_bytes / mesh.devices.size <= budget:
    return "sharded"
  if choice == "true":
    raise InputError(f"config.data.features_on_device: the features take {table_bytes / 2**30:.2f} GiB, more "
                     f"than {DEVICE_SHARE:.0%} of the memory of {mesh.devices.size} devices; set it to "
                     '"false" (streamed) or "auto"')
  return None


@dataclasses.dataclass
class DeviceFeatures:
  """The feature table on the devices and the splits' arrays with `image_row` into it."""
  table: jax.Array
  sharded: bool
  splits: dict[str, dict[str, np.ndarray]]

  def gather(self, table: jax.Array, rows: jax.Array) -> jax.Array:
    """float32 features of `rows` (split over the batch axes); traced in the step under its mesh."""
    if not self.sharded:
      return table[rows].astype(jnp.float32)

    axes = sharding.BATCH

    def local(part, rows):
      wanted = jax.lax.all_gather(rows, axes, tiled=True) - jax.lax.axis_index(axes) * part.shape[0]
      held = (wanted >= 0) & (wanted < part.shape[0])
      found = part[jnp.clip(wanted, 0, part.shape[0] - 1)].astype(jnp.float32)
      found = jnp.where(held.reshape(held.shape + (1,) * (found.ndim - 1)), found, 0)
      return jax.lax.psum_scatter(found, axes, tiled=True)

    mesh = jax.sharding.get_abstract_mesh()
    return jax.shard_map(local, mesh=mesh, in_specs=(P(axes), P(axes)), out_specs=P(axes))(table, rows)


def step_batch(batch: dict, features: DeviceFeatures | None = None, table: jax.Array | None = None) -> dict:
  """The batch the model sees, in the step: `image` float32, from the host's batch (the
  store's dtype: float16 crosses to the devices as such) or gathered from the table."""
  batch = dict(batch)
  if features is not None:
    batch["image"] = features.gather(table, batch.pop(IMAGE_ROW))
  elif "image" in batch:
    batch["image"] = batch["image"].astype(jnp.float32)
  return batch


def place(choice: str, data, mesh) -> DeviceFeatures | None:
  """The table of the store rows that `data.train` / `data.val` use, on the devices of
  `mesh` when `choice` (config.data.features_on_device) puts it there; else None."""
  store = data.store
  if store is None:
    return None
  used = np.unique(np.concatenate([data.train[IMAGE_ROW], data.val[IMAGE_ROW]]))
  row_bytes = int(np.prod(store.shape, dtype=np.int64)) * store.dtype.itemsize
  where = layout(choice, len(used) * row_bytes, mesh)
  if where is None:
    return None
  num_rows = len(used) if where == "replicated" else -(-len(used) // mesh.devices.size) * mesh.devices.size
  spec = sharding.data_sharding(mesh) if where == "sharded" else sharding.replicated(mesh)

  def read(index):  # this device's rows of the table (all of them, replicated); padding is zeros
    rows = np.arange(num_rows)[index[0]]
    out = np.zeros((len(rows),) + store.shape, store.dtype)
    for start in range(0, len(rows), READ_ROWS):
      part = rows[start:start + READ_ROWS]
      part = part[part < len(used)]
      out[start:start + len(part)] = store.read(used[part], dtype=store.dtype)
    return out

  table = jax.make_array_from_callback((num_rows,) + store.shape, spec, read)
  splits = {name: dict(arrays, **{IMAGE_ROW: np.searchsorted(used, arrays[IMAGE_ROW]).astype(np.int32)})
            for name, arrays in (("train", data.train), ("val", data.val))}
  return DeviceFeatures(table, where == "sharded", splits)


def host_inputs(data, features: DeviceFeatures | None, split: str, keys):
  """(arrays, store, keys) the host pipeline reads for `split`: the store's rows, or (on
  the devices) only the table's row ids."""
  if features is None:
    return getattr(data, split), data.store, tuple(keys)
  return features.splits[split], None, tuple(keys) + (IMAGE_ROW,)

"""The ('data', 'fsdp') mesh: batches are split over both axes; parameters and optimizer state
are sharded over 'fsdp' by one rule for every model, replicated over 'data'.

`config.mesh.fsdp` = N groups the devices in N-device groups along 'fsdp' (N divides the device
count; 1, the default, is plain data parallelism: every parameter replicated, the programs those
of a 1-D data mesh). The rule is big_vision's FSDP rule: an array of at least
`config.mesh.min_shard_bytes` is split along its largest dimension that N divides (the first such
on ties; none: it stays replicated), so the big kernels and embeddings are split and biases,
LayerNorms and scalars are not. A parameter and its optimizer moments have one shape, hence one
layout; the step and the RNG stay replicated. A model needs no rules of its own: the rule reads
only shapes, which is also why a stacked (`nn.scan`) layer axis, short next to the widths, is
never the one split. Inside the step XLA gathers each sharded kernel where it is used and
reduce-scatters its gradient.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from vqajax.core.errors import InputError

AXES = ("data", "fsdp")
BATCH = AXES  # a batch's rows are split over every device, in device order (every axis: nn/ relies on it)


def data_mesh(devices=None, fsdp: int = 1) -> Mesh:
  """The (devices / fsdp, fsdp) mesh over `devices` (default: all) in their order, so each
  'fsdp' group is neighbouring devices; InputError unless `fsdp` divides their number."""
  devices = np.asarray(devices if devices is not None else jax.devices())
  if type(fsdp) is not int or fsdp < 1 or devices.size % fsdp:
    raise InputError(f"config.mesh.fsdp: expected a positive integer dividing the device count {devices.size}, "
                     f"got {fsdp!r}")
  return Mesh(devices.reshape(-1, fsdp), AXES)


def data_sharding(mesh: Mesh) -> NamedSharding:
  """A batch's: its leading axis over every device."""
  return NamedSharding(mesh, P(BATCH))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def fsdp_spec(shape: tuple[int, ...], itemsize: int, fsdp: int, min_bytes: int) -> P:
  """The FSDP rule (module docstring): the spec of an array of `shape` on an 'fsdp' axis of `fsdp` devices."""
  if fsdp == 1 or int(np.prod(shape, dtype=np.int64)) * itemsize < max(min_bytes, 1):
    return P()
  for dim in sorted(range(len(shape)), key=lambda d: -shape[d]):  # stable: the first of equal sizes
    if shape[dim] % fsdp == 0:
      return P(*(None,) * dim, "fsdp")
  return P()


def state_sharding(state, mesh: Mesh, min_bytes: int):
  """The shardings of a train state (arrays or shape structs with `params` and `opt_state`):
  both by the FSDP rule, everything else replicated."""
  fsdp = mesh.shape["fsdp"]
  by_rule = lambda tree: jax.tree.map(
      lambda x: NamedSharding(mesh, fsdp_spec(x.shape, np.dtype(x.dtype).itemsize, fsdp, min_bytes)), tree)
  everything = jax.tree.map(lambda _: replicated(mesh), state)
  return everything.replace(params=by_rule(state.params), opt_state=by_rule(state.opt_state))


def in_mesh(mesh: Mesh, fn):
  """`fn` traced with `mesh` as the abstract mesh, so models can place per-device work
  (`shard_map` over the batch axes, e.g. the question LSTM); jit the result."""

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
  """Assembles every host's slice into global arrays split over the batch axes."""
  sharding = data_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


def padded_batch_size(batch: int, mesh: Mesh) -> int:
  """`batch` rounded up to a multiple of the device count (eval batches are masked)."""
  return -(-batch // mesh.devices.size) * mesh.devices.size

"""What training and evaluation share: data, model, optimizer and the train state."""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import optax
from absl import logging

from vqajax.core import device_features, phases, pipeline, sharding
from vqajax.core.errors import InputError, RunFailed
from vqajax.core.task import LABEL, Task


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any
  rng: jax.Array


def learning_rate(cfg, num_train_steps: int = 0) -> float | optax.Schedule:
  """The learning rate of `config.optimizer` (by update count where it changes): rmsprop / adam
  decay it exponentially per step (`lr_decay_per_step` < 1); adamw warms it up
  linearly over the `warmup` share of `num_train_steps`, then decays it linearly to 0 at the
  last step. A constant rate is a number (a schedule would add a counter to the optimizer state)."""
  lr = cfg.learning_rate
  if cfg.name == "adamw":
    warmup = int(cfg.warmup * num_train_steps)
    return optax.join_schedules([optax.linear_schedule(0.0, lr, max(warmup, 1)),
                                 optax.linear_schedule(lr, 0.0, max(num_train_steps - warmup, 1))], [warmup])
  if cfg.lr_decay_per_step < 1:
    return optax.exponential_decay(lr, transition_steps=1, decay_rate=cfg.lr_decay_per_step)
  return lr


def make_optimizer(cfg, num_train_steps: int = 0, frozen: tuple[str, ...] = ()) -> optax.GradientTransformation:
  """`config.optimizer` with its `learning_rate` schedule; adamw with `weight_decay`; the top-level
  parameter groups `frozen` never change (no update, no decay)."""
  lr = learning_rate(cfg, num_train_steps)
  if cfg.name == "rmsprop":
    opt = optax.rmsprop(lr, decay=cfg.rmsprop_decay, eps=cfg.eps)
  elif cfg.name == "adam":
    opt = optax.adam(lr, eps=cfg.eps)
  elif cfg.name == "adamw":
    opt = optax.adamw(lr, eps=cfg.eps, weight_decay=cfg.weight_decay)
  else:
    raise InputError(f"config.optimizer.name '{cfg.name}' is not 'rmsprop', 'adam' or 'adamw'")
  opt = optax.chain(optax.clip(cfg.grad_clip), opt) if cfg.grad_clip > 0 else opt
  if not frozen:
    return opt
  labels = lambda params: {name: jax.tree.map(lambda _: "frozen" if name in frozen else "train", group)
                           for name, group in params.items()}
  return optax.multi_transform({"train": opt, "frozen": optax.set_to_zero()}, labels)


@dataclasses.dataclass
class Experiment:
  config: Any
  mesh: Any
  task: Task
  data: Any
  model: Any
  tx: optax.GradientTransformation
  features: device_features.DeviceFeatures | None  # None: streamed from the store by the host
  start: Callable | None = None  # the task's `initial_params` (fresh params -> the initial ones), or None

  @classmethod
  def build(cls, task: Task, config, devices=None) -> "Experiment":
    """The experiment of `config`, checked before by the front door (`evals.check_config`)."""
    mesh = sharding.data_mesh(devices, config.mesh.fsdp)
    sharding.local_batch_size(config.batch_size, mesh)
    data = task.load(config)
    if not len(data.train[LABEL]):
      raise InputError("config.data: no training example is left (e.g. no train answer is among the "
                       "config.data.num_answers most frequent)")
    if config.get("num_epochs", 0) > 0:  # the budget in epochs over this run's train split
      config.num_train_steps = max(1, math.ceil(config.num_epochs * len(data.train[LABEL]) / config.batch_size))
      logging.info("%g epochs of %d train examples: %d steps", config.num_epochs, len(data.train[LABEL]),
                   config.num_train_steps)
    model = task.build_model(config.model, data.encoders)
    with phases.timed("device transfer"):
      features = device_features.place(config.data.get("features_on_device", "auto"), data, mesh)
    tx = (make_optimizer(config.optimizer, config.num_train_steps, task.frozen(config.model))
          if config.num_train_steps else optax.set_to_zero())  # a run of no steps keeps no optimizer state
    exp = cls(config, mesh, task, data, model, tx, features)
    abstract = exp.initial_state(abstract=True)
    check_fits(abstract, mesh)
    exp.start = task.initial_params(config.model, abstract.params, data.encoders)  # what it reads, checked now
    return exp

  def _init(self):
    """`init(rng) -> TrainState`, a fresh state from the model's example batch."""
    example = pipeline.example_batch(self.data.train, self.data.store, 2, self.task.TRAIN_KEYS, self.task.LENGTHS)

    def init(rng):
      params_rng, rng = jax.random.split(rng)
      params = self.model.init(params_rng, example, train=False)["params"]
      return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=self.tx.init(params), rng=rng)

    return init

  @functools.cached_property
  def state_sharding(self) -> TrainState:
    """The train state's shardings on the mesh (`sharding.state_sharding`: FSDP over 'fsdp')."""
    shapes = jax.eval_shape(self._init(), jax.random.PRNGKey(0))
    return sharding.state_sharding(shapes, self.mesh, self.config.mesh.min_shard_bytes)

  def initial_state(self, abstract: bool = False) -> TrainState:
    """A fresh train state, created directly on its shardings (`state_sharding`: no whole copy
    first); with `abstract`, only its shapes, dtypes and shardings (a restore target: nothing
    is computed)."""
    shardings = self.state_sharding
    create = jax.jit(self._init(), out_shardings=shardings)
    key = jax.random.PRNGKey(self.config.seed)
    if abstract:
      return jax.eval_shape(create, key)
    with phases.timed("model init"):
      state = create(key)
      if self.start is not None:  # a checkpoint's (config.model.init_from)
        params = jax.device_put(self.start(state.params), shardings.params)
        state = state.replace(params=params, opt_state=jax.jit(self.tx.init, out_shardings=shardings.opt_state)(params))
      return jax.block_until_ready(state)


def check_fits(state: TrainState, mesh) -> None:
  """RunFailed when the train state alone (parameters and optimizer state, each device's shards)
  exceeds a device's memory, or on CPU devices this machine's: the run could not start."""
  per_device = sum(math.prod(leaf.sharding.shard_shape(leaf.shape)) * leaf.dtype.itemsize
                   for leaf in jax.tree.leaves(state))
  device = next(d for d in mesh.devices.flat if d.process_index == jax.process_index())  # this host's
  stats = device.memory_stats() or {}
  if "bytes_limit" in stats:
    limit = stats["bytes_limit"]
    where = f"the {limit / 2**30:.1f} GiB of a {device.device_kind}"
  else:  # CPU devices share the machine's memory
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    here = sum(d.process_index == jax.process_index() for d in mesh.devices.flat)
    limit = memory // here
    where = f"this machine's {memory / 2**30:.1f} GiB shared by {here} devices"
  if per_device > limit:
    raise RunFailed(f"the train state (parameters and optimizer state) needs {per_device / 2**30:.1f} GiB per device, "
                    f"more than {where}; choose a smaller model (config.model) or more devices")

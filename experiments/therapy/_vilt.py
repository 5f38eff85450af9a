"""The config of a ViLT row of either AnswerTherapy challenge (`vilt_class.py`, `vilt_mask.py`)."""

from vqajax.answertherapy import configs
from vqajax.nn import vilt_run


def vilt_config(arg: str, name: str, task: str):
  """The locked config of a ViLT row of `task`: `therapy_config`'s data and training, config.model
  the ViLT group (`nn/vilt_run.GROUP`, sized by `vilt_run.SIZES`: "", "cpu", "runlocal") with the
  inputs (I+Q+A) and, for the masks, their grid (14, the grid rows', so that grid-level metrics
  compare), the pixel store of the pictures at the row's size (made from the embedded pictures on
  first use), AdamW 5e-5 with a 10% linear warmup then linear decay, 20 epochs (the paper's
  fine-tuning of ViLT; "cpu": 5e-4, the model starting from scratch, and 10 epochs for the masks,
  ~30 minutes on 2 cores)."""
  flags = set(arg.split(",")) - {""}
  if "real" in flags:
    raise ValueError("'real' (the released files, no images) is not an argument of a ViLT row: it reads pixels")
  size = "runlocal" if "runlocal" in flags else "cpu" if "cpu" in flags else ""
  config = configs.therapy_config(arg, name, task, model="vilt", **vilt_run.sized(size))
  with config.unlocked():
    config.data.features = f"features/pixels{vilt_run.SIZES[size][0]}.npy"
    opt = config.optimizer
    opt.name, opt.learning_rate, opt.weight_decay, opt.warmup = "adamw", 5e-5, 0.01, 0.1
    config.num_epochs = 20.0
    if size == "cpu":
      opt.learning_rate = 5e-4
      config.num_epochs = 20.0 if task == "grounding_class" else 10.0  # a ViLT pass per answer slot: 4x a question
    if size == "runlocal":
      config.num_epochs = 0.0
      config.num_train_steps = 4
      config.eval_every_steps = config.log_every_steps = 2
  config.lock()
  return config

"""The front door: `vqajax VERB ...`; `vqajax VERB --help` lists the verb's flags.

Bad input is one line `vqajax VERB: error: ...` on stderr (naming the file, record or
config field and what was expected) and exit status 2; anything else is a bug and keeps
its traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

from vqajax.commands import (
  add_checkpoint_flags,
  add_data_dir_flag,
  baselines_config,
  check_config,
  check_workdir,
  prepare_data,
  prepare_run_data,
  task_of,
  tasks,
  train_config,
)
from vqajax.core import files, runtime
from vqajax.core.errors import ArgumentParser, exit_status

VERBS = {
    "train": "train a config with periodic evaluation and checkpoints (a rerun resumes)",
    "eval": "evaluate a workdir's checkpoints (with the run's recorded config by default)",
    "submit": "a workdir's predictions for a test split, in the evaluation server's files",
    "baselines": "the VQA paper's non-neural baselines on a config's data",
    "sweep": "run the points of a sweep file and collect Tables II / IV",
    "score": "the official VQA accuracy of a results file",
    "report": "the VQA paper's tables and figures from finished runs",
    "data": "write the embedded synthetic datasets",
    "therapy": "VQA-AnswerTherapy: dataset analysis (3.2), construction (3.1), tables across runs",
    "features": "image features with torchvision weights, into a feature store",
    "tfds": "prepare TFDS datasets from the official files",
    "convert": "other datasets' files (VizWiz-VQA) as the official VQA questions / annotations files",
    "ask": "a trained run's answers (or answer groundings) about images and questions of your own",
    "export": "one checkpoint of a workdir as a bundle to share (parameters, config, encoders, model card)",
    "demo": "a local web page asking a trained run about an image (needs the demo extra)",
}
_RUN_VERBS = ("train", "eval", "baselines")
_BASELINES = ("random", "prior", "q_type_prior", "nearest_neighbour")


def _run_parser(verb: str) -> argparse.ArgumentParser:
  parser = ArgumentParser(
      prog=f"vqajax {verb}", description=VERBS[verb],
      epilog="Any config field is set with --config.FIELD=VALUE (e.g. --config.batch_size=256); "
             "--print-config lists every field with its value.")
  parser.add_argument("--config", required=verb != "eval", metavar="FILE.py[:ARG]",
                      help="config file and argument, e.g. experiments/vqa/bow_q.py:cpu"
                      + (" (default: the workdir's run.json)" if verb == "eval" else ""))
  parser.add_argument("--workdir", type=files.path_arg, required=True, help="the run's folder: checkpoints, metrics, results")
  parser.add_argument("--print-config", action="store_true",
                      help="print the resolved config and the data sizes, then exit")
  _add_verbosity_flag(parser, "info")
  if verb == "train":
    parser.add_argument("--allow-changed-run", action="store_true",
                        help="continue a workdir whose recorded run has other settings (default: refused)")
  if verb == "eval":
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--step", type=int, help="the checkpoint step to evaluate (default: latest)")
    which.add_argument("--all", action="store_true", help="evaluate every saved checkpoint")
  if verb == "baselines":
    parser.add_argument("--baselines", default=",".join(_BASELINES),
                        help="comma-separated, of " + ", ".join(_BASELINES) + " (default: all)")
    parser.add_argument("--word_vectors", help="word2vec / GloVe text file for multiple choice")
  if verb in ("train", "eval"):
    parser.add_argument("--distributed", action="store_true",
                        help="call jax.distributed.initialize() (TPU pods, detected clusters)")
    parser.add_argument("--coordinator_address", help="host:port of process 0 (multi-host)")
    parser.add_argument("--num_processes", type=int, help="processes in a multi-host run")
    parser.add_argument("--process_id", type=int, help="this process' index in a multi-host run")
    runtime.add_compilation_cache_flag(parser)
    from vqajax import launch
    launch.add_flags(parser)
  return parser


def _split_overrides(parser: argparse.ArgumentParser, argv: Sequence[str]):
  """(namespace, [(field, text)]) of argv; `--config.a.b=v` or `--config.a.b v`."""
  args, rest = parser.parse_known_args(argv)
  overrides, i = [], 0
  while i < len(rest):
    item = rest[i]
    if not item.startswith("--config."):
      parser.error(f"unrecognized argument: {item}")
    key, eq, text = item[len("--config."):].partition("=")
    if not eq:
      if i + 1 >= len(rest):
        parser.error(f"{item}: expected a value")
      text, i = rest[i + 1], i + 1
    overrides.append((key, text))
    i += 1
  return args, overrides


def _initialise(args) -> None:
  import jax
  from absl import logging
  runtime.use_compilation_cache(getattr(args, "compilation_cache_dir", ""))
  if getattr(args, "coordinator_address", None) or getattr(args, "distributed", False):
    # CPU processes (tests, CPU clusters) exchange collectives over gloo; no effect elsewhere.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
  if getattr(args, "coordinator_address", None):
    jax.distributed.initialize(args.coordinator_address, args.num_processes, args.process_id)
  elif getattr(args, "distributed", False):
    jax.distributed.initialize()
  logging.info("process %d of %d, %d local / %d global devices", jax.process_index(),
               jax.process_count(), jax.local_device_count(), jax.device_count())


class _Stderr:
  """Whatever `sys.stderr` is when a line is logged (tests swap it per test)."""

  def write(self, text: str) -> None:
    sys.stderr.write(text)

  def flush(self) -> None:
    sys.stderr.flush()

  def close(self) -> None:  # absl closes its stream at exit; sys.stderr is not ours to close
    pass


def _add_verbosity_flag(parser: argparse.ArgumentParser, default: str) -> None:
  """`--verbosity` of every verb that logs (train, eval, baselines: info; submit, export: warning)."""
  parser.add_argument("--verbosity", default=default, choices=("warning", "info", "debug"),
                      help="log level (debug also shows the libraries' INFO lines) (default: %(default)s)")


def _setup_logging(verbosity: str) -> None:
  from absl import flags, logging

  from vqajax.core import runtime
  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  logging.set_verbosity(verbosity)
  logging.use_absl_handler()
  logging.get_absl_handler().python_handler.stream = _Stderr()
  runtime.init(verbose=verbosity == "debug")


def _resolved_config(verb: str, args, overrides):
  from vqajax.core import config as config_lib
  from vqajax.core import fs, run_record
  from vqajax.core.errors import InputError
  if verb == "eval" and not fs.isdir(args.workdir):
    raise InputError(f"--workdir {args.workdir}: no such run")
  if args.config is not None:
    config = config_lib.load_config(args.config)
  else:
    config = run_record.read_config(args.workdir)
    if config is None:
      raise InputError(f"--workdir {args.workdir}: no {run_record.RUN_FILE}; give --config")
  return check_config(config_lib.apply_overrides(config, overrides))


def _print_config(config) -> None:
  from vqajax.core import config as config_lib
  prepare_data(config)
  task = task_of(config)
  print("\n".join(config_lib.to_text(config)))
  print("\n".join(f"data.{k}: {v}" for k, v in task.sizes(task.load(config)).items()))


def _run_verb(verb: str, argv: Sequence[str]) -> int:
  parser = _run_parser(verb)
  args, overrides = _split_overrides(parser, argv)
  _setup_logging(args.verbosity)

  def run() -> int | None:
    import jax
    config = _resolved_config(verb, args, overrides)
    if args.print_config:
      _print_config(config)
      return
    if verb != "baselines":
      from vqajax import launch
      launch.check_chosen(args)
      if args.launcher != "local":
        return _launch(verb, args, argv)
    if verb == "baselines":
      from vqajax.vqa import reports
      names = [n for n in args.baselines.split(",") if n]
      print(reports.accuracy_table(baselines_config(config, args.workdir, names, args.word_vectors)))
      return
    _initialise(args)
    from vqajax.core import evals
    runtime.freeze_imported()
    task, specs = task_of(config), {spec.name: spec for spec in evals.specs(config)}
    table = lambda name, title, metrics: evals.TYPES[specs[name].type].table(task, title, metrics)
    if verb == "train":
      by_eval = train_config(config, args.workdir, args.allow_changed_run)
      if jax.process_index() == 0:
        for name, metrics in by_eval.items():
          print(table(name, config.name if len(by_eval) == 1 else f"{config.name} {name}", metrics))
      return
    prepare_data(config)
    check_workdir(args.workdir)
    results = evals.evaluate_checkpoints(task, config, args.workdir, step=args.step, every=args.all)
    if jax.process_index() == 0:
      for step, by_eval in results.items():
        for name, metrics in by_eval.items():
          print(f"step {step}: results in {specs[name].results_dir(args.workdir, step)}")
          print(table(name, f"{config.name} @ {step}" + (f" {name}" if len(by_eval) > 1 else ""), metrics))

  return exit_status(f"vqajax {verb}", run)


def _launch(verb: str, args, argv: Sequence[str]) -> int:
  """`vqajax VERB ARGV` (its config checked here) as one job of `--launcher`; waits for it
  unless `--slurm.detach`, then prints its log's last lines; the job's exit status."""
  from vqajax import launch
  from vqajax.core import fs
  from vqajax.core.errors import InputError, RunFailed
  if fs.is_url(args.workdir):
    raise InputError(f"--workdir {args.workdir}: --launcher slurm needs a folder the nodes share (its logs go "
                     "there), not a URL")
  slurm = launch.Slurm(launch.resources(args), args.poll)
  slurm.check()
  check_workdir(args.workdir)
  workdir = os.path.abspath(args.workdir)
  job_argv = (verb, *launch.without_flags(argv), "--launcher=local")  # also past an abbreviated flag
  key, = slurm.submit([launch.Step(workdir, job_argv)], f"vqajax-{verb}")
  log = launch.log_path(workdir, key)
  print(f"job {key}: vqajax {verb} on {slurm.request.tasks} task(s); log: {log}", flush=True)
  if args.detach:
    return 0
  try:
    state = slurm.wait({key: workdir}, lambda k, s: print(f"job {k}: {s}", flush=True))[key]
  except KeyboardInterrupt:
    print(f"job {key} goes on running (scancel {key} stops it)", file=sys.stderr)
    raise
  print(launch.tail(log, 40), flush=True)
  code = launch.exit_code(workdir, key)
  if code is None:
    raise RunFailed(f"job {key}: {state}; its log: {log}")
  if code:
    print(f"vqajax {verb}: job {key}: {state} with exit status {code}; its log: {log}", file=sys.stderr)
  return code


def _trained_parser(verb: str, description: str, out: str) -> argparse.ArgumentParser:
  """The flags of the verbs that use a trained run (a workdir, or a bundle for submit)."""
  parser = ArgumentParser(prog=f"vqajax {verb}", description=description)
  parser.add_argument("--workdir", type=files.path_arg, required=True, help="the trained run (a workdir" + (
      ", or an export bundle)" if verb == "submit" else ")"))
  add_checkpoint_flags(parser)
  parser.add_argument("--out", type=files.path_arg, required=verb == "export", help=out)
  _add_verbosity_flag(parser, "warning")
  runtime.add_compilation_cache_flag(parser)
  return parser


def _submit(argv: Sequence[str]) -> int:
  parser = _trained_parser("submit", VERBS["submit"] + " (a questions-only file: VQA v2 test-dev / test, "
                           "VQA v1 open-ended or multiple-choice test, VizWiz test.json, AnswerTherapy VQA_test / "
                           "VizWiz_test)", "output folder (default: WORKDIR/submissions/<split>; a bundle: required)")
  parser.add_argument("questions", help="the test split's questions file")
  add_data_dir_flag(parser)
  args = parser.parse_args(argv)
  _setup_logging(args.verbosity)

  def run() -> None:
    from vqajax.core import submission, trained
    config = trained.read_config(args.workdir, tasks(), args.data_dir)
    data_dir = prepare_run_data(config, args.workdir, args.data_dir)
    _initialise(args)
    step, paths = submission.write(args.workdir, tasks(), args.questions, args.out, args.step, args.best, data_dir)
    print(f"step {step} of {args.workdir} on {args.questions}:")
    print("\n".join(f"  {path}" for path in paths))

  return exit_status("vqajax submit", run)


def _export(argv: Sequence[str]) -> int:
  parser = _trained_parser("export", VERBS["export"], "the bundle's folder (new or empty)")
  parser.add_argument("--with-weights", action="store_true",
                      help="also ship the image feature extractor's weights (as .npz)")
  args = parser.parse_args(argv)
  _setup_logging(args.verbosity)

  def run() -> None:
    from vqajax import export
    paths = export.export(args.workdir, tasks(), args.out, args.step, args.best, args.with_weights)
    size = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    print(f"bundle of {args.workdir} in {args.out} ({len(paths)} files, {size / 2**20:.1f} MiB):")
    print("\n".join(f"  {path}" for path in paths))

  return exit_status("vqajax export", run)


def _delegate(verb: str) -> Callable[[Sequence[str], str], int]:
  """The `main(argv, prog)` of a verb with its own parser."""
  if verb == "sweep":
    from vqajax import sweep_cli as main_module
  elif verb == "ask":
    from vqajax import ask_cli as main_module
  elif verb == "score":
    from vqajax.vqa.accuracy import score_cli as main_module
  elif verb == "report":
    from vqajax.vqa import report_cli as main_module
  elif verb == "data":
    from vqajax.synthetic import cli as main_module
  elif verb == "therapy":
    from vqajax.answertherapy import cli as therapy_cli
    return lambda argv, prog: therapy_cli.main(argv, prog, tasks)
  elif verb == "demo":
    from vqajax import demo as main_module
  else:
    return _pipeline(verb)
  return main_module.main


def _pipeline(verb: str) -> Callable[[Sequence[str], str], int]:
  """The `main(argv, prog)` of an offline pipeline (`data_pipeline/`, imported only here, from
  its folder: inside the installed vqajax, or beside it in a checkout)."""
  from vqajax.core import config as config_lib
  config_lib.import_shipped("data_pipeline")
  if verb == "features":
    from data_pipeline.features import cli as main_module
  elif verb == "tfds":
    from data_pipeline.tfds import cli as main_module
  elif verb == "convert":
    from data_pipeline.convert import cli as main_module
  else:  # therapy construct
    from data_pipeline.answertherapy import cli as main_module
  return main_module.main


def _usage() -> str:
  width = max(map(len, VERBS))
  return ("usage: vqajax VERB [--help] ...\n\nverbs:\n"
          + "\n".join(f"  {verb:<{width}}  {text}" for verb, text in VERBS.items())
          + "\n\n`vqajax VERB --help` lists a verb's flags with their defaults.\n")


def main(argv: Sequence[str] | None = None) -> int:
  try:
    return _main(argv)
  finally:
    files.unprotect_all()  # the inputs were this command's only


def _main(argv: Sequence[str] | None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  if not argv or argv[0] in ("-h", "--help"):
    sys.stdout.write(_usage())
    return 0 if argv else 2
  verb, rest = argv[0], argv[1:]
  if verb not in VERBS:
    sys.stderr.write(f"vqajax: error: unknown verb '{verb}' (one of {', '.join(VERBS)})\n")
    return 2
  if verb in _RUN_VERBS:
    return _run_verb(verb, rest)
  if verb == "submit":
    return _submit(rest)
  if verb == "export":
    return _export(rest)
  _setup_logging("warning")  # these verbs print what they do; the libraries stay quiet
  if verb == "therapy" and rest[:1] == ["construct"]:
    return _pipeline("therapy construct")(rest[1:], "vqajax therapy construct")
  return _delegate(verb)(rest, f"vqajax {verb}")


def entry() -> None:
  sys.exit(main())

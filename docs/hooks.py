"""MkDocs hooks: the pages' generated parts, made from the code and the benchmarks' JSON at build
time so that no page copies a config default, a registry or a measured number by hand.

A page asks for one with a marker line:

  <!-- vqajax:config vqa -->      every config field of the VQA rows: its rule, defaults, comment
  <!-- vqajax:config therapy -->  the same for the VQA-AnswerTherapy challenges
  <!-- vqajax:registries -->      the tasks, models and question encoders chosen by name
  <!-- vqajax:benchmarks -->      one table per bench/records/*.json with its date, machine, command

An unknown marker fails the build.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MARKER = re.compile(r"^<!-- vqajax:(\w+)(?: (\w+))? -->$", re.M)
RECORDS = os.path.join(ROOT, "bench", "records")
# The configs whose values the tables show ((column, FILE.py:ARG)), the experiment files that hold
# the fields those lack, and the sources whose `alias.field = value  # comment` lines explain a field.
CONFIGS = {
    "vqa": {
        "columns": [('paper (`""`)', "experiments/vqa/deeper_lstm_norm_i.py:"),
                    ("`:cpu`", "experiments/vqa/deeper_lstm_norm_i.py:cpu"),
                    ("`:runlocal`", "experiments/vqa/deeper_lstm_norm_i.py:runlocal")],
        "others": ["experiments/vqa/transformer_q_norm_i.py", "experiments/vqa/attention.py", "experiments/vqa/vilt.py",
                   "experiments/vqa/paligemma.py"],
        "sources": ["vqajax/vqa/configs.py", "vqajax/vqa/models.py", "experiments/vqa/transformer_q_norm_i.py",
                    "vqajax/nn/vilt_run.py", "vqajax/nn/vilt_models.py", "vqajax/nn/paligemma_models.py"],
        "tasks": ("vqa",),
    },
    "therapy": {
        "columns": [('grounding_class `""`', "experiments/therapy/grounding_class.py:"),
                    ('grounding_mask `""`', "experiments/therapy/grounding_mask.py:"),
                    ("grounding_class `:real`", "experiments/therapy/grounding_class.py:real")],
        "others": ["experiments/therapy/vilt_class.py", "experiments/therapy/vilt_mask.py",
                   "experiments/therapy/clipseg_ground.py", "experiments/therapy/paligemma_zeroshot.py",
                   "experiments/therapy/paligemma_ground.py", "experiments/vqa/transformer_q_norm_i.py"],
        "sources": ["vqajax/answertherapy/configs.py", "vqajax/answertherapy/models.py", "vqajax/vqa/configs.py",
                    "vqajax/nn/vilt_run.py", "vqajax/nn/vilt_models.py", "vqajax/nn/clipseg_models.py",
                    "vqajax/nn/paligemma_models.py", "vqajax/nn/paligemma_ground.py"],
        "tasks": ("grounding_class", "grounding_mask"),
    },
}
ALIASES = {"config": "", "data": "data.", "m": "model.", "opt": "optimizer.", "t": "model.transformer."}
ASSIGNMENT = re.compile(r"^\s*(\w+)\.(\w+)\s*=[^=].*?#\s*(.*)$")
FIELD = re.compile(r'^\s*"(\w+)": Field\(.*?#\s*(.*)$')  # a model's config group (`core/model.py`): config.model


def on_page_markdown(markdown: str, page, config, files) -> str:
  return MARKER.sub(lambda m: _generate(m.group(1), m.group(2), page.file.src_path), markdown)


def _generate(kind: str, arg: str | None, where: str) -> str:
  if kind == "config" and arg in CONFIGS:
    return config_table(arg)
  if kind == "registries" and arg is None:
    return registries()
  if kind == "benchmarks" and arg is None:
    return benchmarks()
  raise ValueError(f"{where}: unknown marker vqajax:{kind} {arg or ''}")


def _cell(text) -> str:
  """`text` as one table cell: a pipe escaped outside code spans (a code span keeps its pipes in
  Python-Markdown's tables, and would show the backslash)."""
  parts = re.split(r"(`[^`]*`)", str(text).replace("\n", " "))
  return "".join(part if part.startswith("`") else part.replace("|", "\\|") for part in parts)


def _value(value) -> str:
  return _cell("`" + repr(value) + "`")


def comments(sources: list[str]) -> dict[str, str]:
  """{dotted field: the comment beside its assignment, with the comment lines aligned under it}."""
  found: dict[str, str] = {}
  for source in sources:
    key, column = None, -1
    for line in open(os.path.join(ROOT, source), encoding="utf-8"):
      m, f = ASSIGNMENT.match(line), FIELD.match(line)
      if m and m.group(1) in ALIASES and ALIASES[m.group(1)] + m.group(2) not in found:
        key, column = ALIASES[m.group(1)] + m.group(2), line.index("#")
        found[key] = m.group(3).strip()
      elif f and "model." + f.group(1) not in found:
        key, column = "model." + f.group(1), line.index("#")
        found[key] = f.group(2).strip()
      elif key and line.strip().startswith("#") and line.index("#") == column:
        found[key] += " " + line.strip()[1:].strip()
      else:
        key = None
  return found


def config_table(paper: str) -> str:
  """Every field the paper's configs have or its rules name: what it may hold, its values, its comment."""
  from vqajax.core import config as config_lib
  from vqajax.core import evals
  spec = CONFIGS[paper]
  rules = _rules(paper)
  load = lambda spec: config_lib.leaves(config_lib.load_config(os.path.join(ROOT, spec)))
  columns = [(label, load(spec)) for label, spec in spec["columns"]]
  keys = list(dict.fromkeys(k for _, leaves in columns for k in leaves))
  elsewhere = {}
  for other in spec["others"]:
    args = [s.partition(":")[2] for _, s in spec["columns"]]
    leaves = [load(f"{other}:{arg}") if _accepts(other, arg) else {} for arg in args]
    for key in dict.fromkeys(k for values in leaves for k in values):
      if key in rules and key not in keys and key not in elsewhere:
        elsewhere[key] = (other, leaves)
  notes = comments(spec["sources"])
  head = "| field | holds | " + " | ".join(label for label, _ in columns) + " | what it is |"
  lines = [head, "|" + "---|" * (3 + len(columns))]
  for key in [*keys, *elsewhere]:
    rule = rules.get(key) or evals.FIELDS.get(key.rpartition(".")[2] if key.startswith("evals.") else "")
    holds = _cell(rule.expected) if rule else ""
    if key in elsewhere:
      other, leaves = elsewhere[key]
      values = [_value(v[key]) if key in v else "" for v in leaves]
      note = f"(in `{other}`) " + notes.get(key, "")
    else:
      values = [_value(v[key]) if key in v else "" for _, v in columns]
      note = notes.get(key, "")
    lines.append(f"| `{key}` | {holds} | " + " | ".join(values) + f" | {_cell(note)} |")
  missing = sorted(set(rules) - set(keys) - set(elsewhere))
  if missing:
    raise ValueError(f"config rules of {paper} for fields no config shown has: {missing}")
  return "\n".join(lines)


def _accepts(path: str, arg: str) -> bool:
  from vqajax.core import config as config_lib
  from vqajax.core.errors import InputError
  try:
    config_lib.load_config(os.path.join(ROOT, f"{path}:{arg}"))
  except InputError:
    return False
  return True


def _rules(paper: str) -> dict:
  """The rules of the paper's config fields: its FIELDS, `model.name` and the group of every model of its
  tasks (`core/model.rules`)."""
  from vqajax.core.config import one_of
  if paper == "vqa":
    from vqajax.vqa import configs, models
  else:
    from vqajax.answertherapy import configs, models
  tasks = CONFIGS[paper]["tasks"]
  served = {name: model for name, model in models.MODELS.items() if set(tasks) & set(model.tasks)}
  groups = [model.rules(task) for model in served.values() for task in tasks if task in model.tasks]
  return {key: rule for rules in (configs.FIELDS, {"model.name": one_of(*served)}, *groups) for key, rule in rules.items()}


def registries() -> str:
  """The registries a config names its parts from: name, what it builds (the builder's docstring)."""
  from vqajax import commands
  from vqajax.answertherapy import models as therapy_models
  from vqajax.core.model import Model
  from vqajax.nn import question
  from vqajax.vqa import models as vqa_models
  tables = [("`config.task`", "`vqajax.commands.tasks()`", commands.tasks(), ()),
            ("`config.model.name` (VQA)", "`vqajax.vqa.models.MODELS`", vqa_models.MODELS, CONFIGS["vqa"]["tasks"]),
            ("`config.model.name` (AnswerTherapy)", "`vqajax.answertherapy.models.MODELS`", therapy_models.MODELS,
             CONFIGS["therapy"]["tasks"]),
            ("`config.model.question` (both)", "`vqajax.nn.question.ENCODERS`", question.ENCODERS, ())]
  lines = ["| config field | registry | name | what it is |", "|---|---|---|---|"]
  for field, registry, entries, tasks in tables:
    for name, target in entries.items():
      if isinstance(target, Model):  # its builder for the paper's first task it serves
        target = next(target.tasks[task] for task in tasks if task in target.tasks).build
      doc = (getattr(target, "__doc__", None) or "").strip().split("\n\n")[0]
      lines.append(f"| {field} | {registry} | `{name}` | {_cell(' '.join(doc.split()))} |")
  return "\n".join(lines)


def benchmarks() -> str:
  """One section per benchmark record: when, where, at what load and how it ran, then its figures
  (with each round's); a record made on a loaded machine is marked stale, its figures not facts."""
  paths = sorted(glob.glob(os.path.join(RECORDS, "*.json")))
  if not paths:
    raise ValueError(f"no benchmark records in {RECORDS}")
  out = []
  for path in paths:
    record = json.load(open(path, encoding="utf-8"))
    m, load = record["machine"], record["load"]
    busy = "" if load["others"] is None else (f", {load['busy_before']} cores busy just before, other processes "
                                              f"using {load['others']} during it")
    out += [f"### {record['bench']}", "",
            f"Run {record['date']} on {m['cpu']} ({m['cores']} cores; 1-minute load average {load['before']} before"
            f"{busy}; quiet: at most {load['limit']:g}), JAX {m['jax']} on {m['devices']} {m['platform']} device(s) "
            f"({m['device']}), Python {m['python']}:", ""]
    if not record["quiet"]:
      out += ["**Not quiet: stale until re-recorded.** The machine was loaded, which skews ratios (PyTorch's "
              "threads, for one, lose more to a busy box than XLA's): these figures are not facts about "
              "vqajax (`bash bench/record_all.sh` re-records every one on a quiet machine).", ""]
    measured = "measured" if record["quiet"] else "measured under load (stale)"
    out += [f"```bash\n{record['command']}\n```", "",
            f"| what | {measured} | target | rounds |", "|---|---:|---:|---|"]
    out += [f"| {_cell(r['what'])} | {_figure(r['value'], r['unit'])} | "
            f"{_cell(r['target'])}{' **missed**' if missed(r['target'], r['value']) else ''} | "
            f"{', '.join(_number(v) for v in r.get('rounds', []))} |"
            for r in record["rows"]]
    out.append("")
  recorded = {os.path.basename(p)[:-len(".json")] for p in paths}
  scripts = sorted(os.path.basename(p)[:-len(".py")] for p in glob.glob(os.path.join(ROOT, "bench", "bench_*.py")))
  missing = [name for name in scripts if name not in recorded]
  if missing:
    out.append("No record yet: " + ", ".join(f"`{n}`" for n in missing) + ".")
  return "\n".join(out)


def missed(target: str, value: float) -> bool:
  """Whether `value` misses a target written ">= N UNIT", "<= N UNIT" or "A-B UNIT" (no target: False)."""
  if m := re.match(r"(>=|<=)\s*([\d.]+)", target):
    bound = float(m.group(2))
    return value < bound if m.group(1) == ">=" else value > bound
  if m := re.match(r"([\d.]+)-([\d.]+)", target):
    return not float(m.group(1)) <= value <= float(m.group(2))
  return False


def _figure(value: float, unit: str) -> str:
  return f"{_number(value)}{'' if unit in ('x', '%') else ' '}{unit}"


def _number(value: float) -> str:
  return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"

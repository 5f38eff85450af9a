"""Nothing documented goes stale silently: every `vqajax ...` command in README.md, WORKSPACE.md and
the documentation site's pages parses with the real front door (its verb, sub-verb and every flag
exist; a `--config.FIELD=VALUE` names a field of that config and a value its rule accepts), every
config field a page names exists, the README's five commands run, and the site builds strictly
and quietly with the demo picture in it, each page rendered as written.

A command is checked in one of two ways. A runnable one goes through `vqajax.cli.main` with
argparse stopped right after parsing (nothing runs). A synopsis (placeholders such as `DIR` or
`N`, `[optional]` parts, `a|b` alternatives, shell variables) is checked flag by flag against
the verb's parser, as no real argument list is written down.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from vqajax.core import errors

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCUMENTS = ["README.md", "WORKSPACE.md", *sorted(os.path.relpath(p, ROOT) for p in glob.glob(
    os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))]
RUN_VERBS = ("train", "eval", "baselines")  # the verbs that take --config.FIELD=VALUE
FENCE = re.compile(r"^\s*```")
INLINE = re.compile(r"`(vqajax [^`]+)`")
# a command starts a line or follows &&, ;, ( or $( and ends at one of them, a pipe or a comment
IN_SHELL = re.compile(r"(?:^|&&|;|\$?\(|<\()\s*(vqajax\s.*?)\s*(?=&&|;|\)\s*$|\s\|\s|\s#|$)")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\w+)?$|[\[\]<>$|]|\.\.\.|^[A-Z]=")


def commands(text: str) -> list[tuple[int, str, bool]]:
  """(line number, command, whether it is a whole command) of every `vqajax ...` in a Markdown
  text: in shell blocks (whole commands), and in inline code outside them (a table's `\\|` read
  as `|`), where prose may name a verb or a flag without the rest of its command."""
  found, in_block, pending = [], False, ""
  for number, line in enumerate(text.splitlines(), 1):
    if FENCE.match(line):
      in_block, pending = not in_block, ""
      continue
    if not in_block:
      found += [(number, span.replace("\\|", "|"), False) for span in INLINE.findall(line)
                if not span.split()[1].endswith(":")]  # `vqajax VERB: error: ...` quotes a message
      continue
    line = pending + line.strip()
    if line.endswith("\\"):
      pending = line[:-1] + " "
      continue
    pending = ""
    found += [(number, " ".join(_balanced(m.group(1)).split()), True) for m in IN_SHELL.finditer(line)]
  return found


def _balanced(command: str) -> str:
  """`command` without the closing quote of the string it was quoted in (`--command="... vqajax ..."`)."""
  return command[:-1] if command.endswith('"') and command.count('"') % 2 else command


class _Parsed(Exception):
  def __init__(self, parser, namespace, extras):
    super().__init__()
    self.parser, self.namespace, self.extras = parser, namespace, extras


class _Refused(Exception):
  pass


@contextlib.contextmanager
def _parsing_only(capture_parser: bool = False):
  """argparse that stops the command right after the outermost parse (or, `capture_parser`,
  before it, handing over the parser) and raises its errors instead of exiting."""
  original, depth = argparse.ArgumentParser.parse_known_args, [0]

  def parse_known_args(self, args=None, namespace=None):
    if capture_parser and depth[0] == 0:
      raise _Parsed(self, None, [])
    depth[0] += 1
    try:
      namespace, extras = original(self, args, namespace)
    finally:
      depth[0] -= 1
    if depth[0] == 0:
      raise _Parsed(self, namespace, extras)
    return namespace, extras

  def error(self, message):
    raise _Refused(message)

  saved = argparse.ArgumentParser.parse_known_args, errors.ArgumentParser.error
  argparse.ArgumentParser.parse_known_args, errors.ArgumentParser.error = parse_known_args, error
  try:
    yield
  finally:
    argparse.ArgumentParser.parse_known_args, errors.ArgumentParser.error = saved


def _main(argv: list[str], capture_parser: bool = False):
  """What the front door's parsing makes of argv: _Parsed, or the problem as a string."""
  from vqajax import cli
  out = io.StringIO()
  try:
    with _parsing_only(capture_parser), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
      status = cli.main(argv)
  except _Parsed as parsed:
    return parsed
  except _Refused as e:
    return str(e)
  except SystemExit as e:  # --help
    return None if e.code == 0 else f"exit {e.code}: {out.getvalue().strip()}"
  return None if status == 0 else out.getvalue().strip()


def _tokens(command: str) -> list[str]:
  try:
    return shlex.split(command)
  except ValueError:  # an unbalanced quote of a synopsis
    return command.split()


def _subparsers(parser) -> dict:
  return next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {})


def _check_overrides(tokens: list[str], config_spec: str | None, where: str) -> list[str]:
  """The problems of the `--config.FIELD[=VALUE]` tokens against the config they change."""
  from vqajax import cli
  from vqajax.core import config as config_lib
  from vqajax.core.errors import InputError
  overrides = []
  for i, token in enumerate(tokens):
    if token.lstrip("[(").startswith("--config."):
      key, eq, value = token.lstrip("[(").rstrip("])")[len("--config."):].partition("=")
      if not eq and i + 1 < len(tokens):
        value = tokens[i + 1]
      overrides.append((key, value))
  if not overrides or not config_spec or PLACEHOLDER.search(config_spec):
    return []
  problems = []
  for key, value in overrides:
    try:
      config = config_lib.load_config(os.path.join(ROOT, config_spec))
      if PLACEHOLDER.search(key):
        continue
      if PLACEHOLDER.search(value) or not value:
        config_lib._field(config, key)
      else:
        cli.check_config(config_lib.apply_overrides(config, [(key, value)]))
    except InputError as e:
      problems.append(f"{where}: {e}")
  return problems


# What a mention in prose may leave out: the arguments a whole command needs.
PARTIAL = re.compile(r"the following arguments are required|argument --[\w-]+: expected one argument")


def check(command: str, where: str = "", whole: bool = True) -> list[str]:
  """The problems of one documented command ([] when it parses); `whole`: every required
  argument must be there too."""
  from vqajax import cli
  tokens = _tokens(command)
  where = f"{where}: {command}"
  if tokens[:1] != ["vqajax"] or len(tokens) == 1:
    return [f"{where}: not a vqajax command"]
  verb = tokens[1]
  if verb in ("--help", "-h") or verb == "VERB":
    return []
  if "|" in verb:  # `vqajax train|eval ...`: each of them
    return [p for v in verb.split("|") for p in check(" ".join(["vqajax", v, *tokens[2:]]), where, whole)]
  if verb not in cli.VERBS:
    return [f"{where}: unknown verb '{verb}'"]
  config = next((t.split("=", 1)[1] for t in tokens if t.startswith("--config=")), None)
  if config is None and "--config" in tokens[:-1]:
    config = tokens[tokens.index("--config") + 1]
  if any(PLACEHOLDER.search(t) for t in tokens[2:]):
    problems = _check_synopsis(tokens, where)
  else:
    parsed = _main(tokens[1:])
    if isinstance(parsed, str):
      return [] if not whole and PARTIAL.search(parsed) else [f"{where}: {parsed}"]
    extras = [] if parsed is None else parsed.extras
    stray = [t for t in extras if not (verb in RUN_VERBS and (t.startswith("--config.") or not t.startswith("-")))]
    problems = [f"{where}: unrecognized arguments {stray}"] if stray else []
  return problems + _check_overrides(tokens, config, where) + _check_sets(tokens, where)


def _check_sets(tokens: list[str], where: str) -> list[str]:
  """The problems of a sweep's `--set FIELD=VALUE`: the field must be in every point's config."""
  from vqajax.core import config as config_lib
  from vqajax.core.errors import InputError
  from vqajax.vqa import sweep
  sets = [value for flag, value in zip(tokens, tokens[1:]) if flag == "--set"]
  sets += [t[len("--set="):] for t in tokens if t.startswith("--set=")]
  if tokens[1] != "sweep" or not sets or PLACEHOLDER.search(tokens[2]):
    return []
  points, _ = sweep.load_sweep(tokens[2])
  problems = []
  for key in {item.partition("=")[0] for item in sets}:
    for point in points:
      try:
        config_lib._field(config_lib.load_config(point.config), key)
      except InputError as e:
        problems.append(f"{where}: --set {key}: point {point.name}: {e}")
        break
  return problems


def _check_synopsis(tokens: list[str], where: str) -> list[str]:
  verb, sub = tokens[1], (tokens[2] if len(tokens) > 2 else "")
  by_name = sub if re.fullmatch(r"[a-z][a-z0-9_-]*", sub) and (verb, sub) in (("features", "convert"),
                                                                               ("therapy", "construct")) else ""
  parsed = _main([verb, by_name] if by_name else [verb], capture_parser=True)
  if not isinstance(parsed, _Parsed):
    return [f"{where}: no parser found ({parsed})"]
  parsers = [parsed.parser]
  choices = _subparsers(parsed.parser)
  if choices and not by_name:
    if sub in choices:
      parsers = [parsed.parser, choices[sub]]
    elif re.fullmatch(r"[a-z][a-z0-9_-]*", sub):
      return [f"{where}: unknown sub-verb '{sub}' (one of {sorted(choices)})"]
    else:
      parsers = [parsed.parser, *choices.values()]
  flags = {flag for p in parsers for flag in p._option_string_actions}
  problems = []
  takes_words = any(not a.option_strings for p in parsers for a in p._actions)
  word = tokens[3 if by_name else 2] if len(tokens) > (3 if by_name else 2) else ""
  if not takes_words and re.fullmatch(r"[a-z][a-z0-9_-]*", word):
    problems.append(f"{where}: vqajax {verb} takes no argument '{word}'")
  for token in tokens[2:]:
    for alternative in token.lstrip("[(").rstrip("])").split("|"):
      name = alternative.lstrip("[(").partition("=")[0]
      if name.startswith("--") and not name.startswith("--config.") and name not in flags:
        problems.append(f"{where}: no flag {name} for vqajax {verb}" + (f" {sub}" if len(parsers) == 2 else ""))
  return problems


def documented_commands() -> list[tuple[str, str]]:
  out = []
  for path in DOCUMENTS:
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
      out += [(f"{path}:{number}", command, whole) for number, command, whole in commands(f.read())]
  return out


def test_the_documents_hold_commands_of_every_verb():
  from vqajax import cli
  verbs = {_tokens(command)[1] for _, command, _ in documented_commands()}
  assert set(cli.VERBS) - verbs == set()


def test_every_documented_command_parses():
  problems = [p for where, command, whole in documented_commands() for p in check(command, where, whole)]
  assert problems == []


@pytest.mark.parametrize("command, complaint", [
    # a flag renamed in the code (or mistyped in a page), in a runnable command and in a synopsis
    ("vqajax train --config=experiments/vqa/bow_q.py:runlocal --workdir=/tmp/w --allow-changed-runs",
     "unrecognized arguments ['--allow-changed-runs']"),
    ("vqajax ask --workdir=/tmp/w --image-id 3 --question 'what?' --topk 3", "unrecognized arguments"),
    ("vqajax export --workdir=DIR [--step N] --out=BUNDLE [--with-weight]", "no flag --with-weight for vqajax export"),
    ("vqajax report table2 RUN... --out DIR [--tops 50]", "no flag --tops for vqajax report table2"),
    ("vqajax features convert IN.pth OUT.npz --batch 3", "no flag --batch for vqajax features"),
    # a verb or sub-verb that is not there
    ("vqajax features extract --images DIR", "vqajax features takes no argument 'extract'"),
    ("vqajax report table9 RUN... --out DIR", "unknown sub-verb 'table9'"),
    ("vqajax fit --config=experiments/vqa/bow_q.py", "unknown verb 'fit'"),
    # a config field that is not there, or a value its rule refuses
    ("vqajax sweep experiments/sweeps/vqa_table2.py:runlocal --workdir=/tmp/t --set data.syntetic=False",
     "--set data.syntetic: point"),
    ("vqajax train --config=experiments/vqa/bow_q.py:runlocal --workdir=/tmp/w --config.model.lstm_dims=3",
     "the config has no field 'model.lstm_dims'"),
    ("vqajax train --config=experiments/vqa/bow_q.py --workdir=DIR --config.data.glimpses=N",
     "the config has no field 'data.glimpses'"),
    ("vqajax train --config=experiments/vqa/bow_q.py:runlocal --workdir=/tmp/w --config.model.lstm_impl=scann",
     "config.model.lstm_impl"),
])
def test_the_check_reports_a_stale_command(command, complaint):
  problems = check(command, "page.md:1")
  assert len(problems) == 1 and complaint in problems[0], problems


def test_the_check_passes_what_the_front_door_takes():
  assert check("vqajax train --config=experiments/vqa/bow_q.py:runlocal --workdir=/tmp/w --config.batch_size=64") == []
  assert check("vqajax report answers RUN... --out DIR [--top 50]") == []
  assert check("vqajax therapy construct --groundings G.json --out DIR [--seed S]") == []
  assert check("vqajax eval", whole=False) == [] and check("vqajax eval") != []  # a mention, not a command


def test_the_extraction_finds_commands_in_blocks_tables_and_prose():
  text = "\n".join([
      "Run `vqajax eval --workdir=W` later; `vqajax.load(path)` is Python.",
      "| `vqajax ask --workdir=RUN (--image FILE\\|FOLDER)` | asks |",
      "```bash",
      "pip install -e . && vqajax train --config=c.py \\",
      "  --workdir=w   # a comment",
      "mapfile -t c < <(vqajax sweep $S --print-commands | grep '^vqajax ')",
      "```",
  ])
  assert [(c, whole) for _, c, whole in commands(text)] == [
      ("vqajax eval --workdir=W", False), ("vqajax ask --workdir=RUN (--image FILE|FOLDER)", False),
      ("vqajax train --config=c.py --workdir=w", True), ("vqajax sweep $S --print-commands", True)]


# `config.a.b`, or `data.x` / `model.x` / `optimizer.x` in inline code, in the pages' prose
FIELD = re.compile(r"`(?:--)?config\.([a-z_]\w*(?:\.\w+)*)|`((?:data|model|optimizer)\.[a-z_]\w*(?:\.\w+)*)[`=]")


FILE_TYPES = ("json", "safetensors", "msgpack", "txt", "bin", "npz", "npy", "h5", "py", "md")  # `config.json`


def _all_fields() -> set[str]:
  from vqajax.core import config as config_lib
  fields = set()
  for path in glob.glob(os.path.join(ROOT, "experiments", "*", "*.py")):
    if os.path.basename(path).startswith("_") or "sweeps" in path:
      continue
    for arg in ("", "cpu", "runlocal", "real"):
      try:
        config = config_lib.load_config(f"{path}:{arg}")
      except Exception:  # an argument the file does not take
        continue
      fields.update(_names(config))
  return fields


def _names(group, prefix: str = "") -> set[str]:
  """Every dotted name of a config, its groups (empty ones too) included."""
  import ml_collections
  names = set()
  for key, value in group.items():
    names.add(prefix + key)
    if isinstance(value, ml_collections.ConfigDict):
      names |= _names(value, f"{prefix}{key}.")
  return names


def test_every_config_field_a_page_names_exists():
  known = _all_fields()
  missing = []
  for path in DOCUMENTS:
    for number, line in enumerate(open(os.path.join(ROOT, path), encoding="utf-8"), 1):
      for m in FIELD.finditer(line):
        field = (m.group(1) or m.group(2)).rstrip(".")
        if field.startswith("evals.") and len(field.split(".")) > 1:  # evals.NAME: a name the user picks
          field = "evals.val." + ".".join(field.split(".")[2:]) if len(field.split(".")) > 2 else "evals"
        if field.startswith("evals.val.data."):
          field = "data." + field[len("evals.val.data."):]
        if field not in known and not re.search(r"[A-Z]", field) and field.rpartition(".")[2] not in FILE_TYPES:
          missing.append(f"{path}:{number}: config.{field}")
  assert missing == []


def _readme_block(heading: str) -> list[str]:
  text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
  block = text.split(heading, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
  return [line for line in block.splitlines() if line.strip()]


@pytest.mark.slow
def test_the_readme_five_commands_train_evaluate_export_and_ask(tiny_data, tmp_path, one_device_env):
  """The README's "Train, evaluate, export, ask" block, run as written (the pip install aside),
  in a home of its own that holds the tiny embedded set where the cache would write it."""
  lines = _readme_block("## Train, evaluate, export, ask")
  assert len(lines) == 5 and lines[0].startswith("pip install")
  home = tmp_path / "home"
  shutil.copytree(tiny_data, home / ".cache" / "vqajax" / "synthetic-v3" / "tiny-seed0")
  env = {**one_device_env, "HOME": str(home), "PYTHONPATH": ROOT}
  outputs = []
  for line in lines[1:]:
    argv = shlex.split(line)
    assert argv[0] == "vqajax"
    done = subprocess.run([sys.executable, "-m", "vqajax", *argv[1:]], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (line, done.stderr[-3000:])
    outputs.append(done.stdout)
  assert re.search(r"\| open-ended \| \d+\.\d\d \|", outputs[1]), outputs[1]
  assert glob.glob(str(tmp_path / "workdirs" / "quick" / "results" / "step_*" / "v2_OpenEnded_*_results.json"))
  assert os.path.isfile(tmp_path / "workdirs" / "quick-bundle" / "vqajax.json")
  answers = [line for line in outputs[3].splitlines() if re.match(r"\s*\S.*\s0\.\d+\s*$", line)]
  assert len(answers) >= 3 and answers[0].split()[:2] == ["1.", "yes"], outputs[3]  # the answer the README gives


def test_ci_runs_the_readme_test_command():
  command = _readme_block("The tests (")
  assert len(command) == 1 and "pytest" in command[0]
  assert command[0] in open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read().splitlines()


@pytest.mark.slow
def test_the_answertherapy_construction_runs_as_documented(tmp_path, one_device_env):
  """docs/pages/real-data.md's construction block, run as written with /tmp/ moved into a test folder."""
  text = open(os.path.join(ROOT, "docs", "pages", "real-data.md"), encoding="utf-8").read()
  block = text[text.index("vqajax data therapy-raw --out /tmp/raw"):].split("```", 1)[0]
  lines = [command.replace("/tmp/", f"{tmp_path}/") for _, command, _ in commands(f"```bash\n{block}```")]
  assert [shlex.split(line)[1] for line in lines] == ["data", "therapy"]
  for line in lines:
    done = subprocess.run([sys.executable, "-m", "vqajax", *shlex.split(line)[1:]], cwd=tmp_path,
                          env={**one_device_env, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (line, done.stderr[-3000:])
  written = set(os.listdir(tmp_path / "therapy"))  # the released files and the reports beside them
  assert {"VQA_train.json", "VQA_val.json", "VQA_test.json", "construction.md", "splits.md"} <= written, written


@pytest.fixture(scope="module")
def site(tmp_path_factory):
  """The documentation site, built strictly (a broken link, anchor or generated table fails)."""
  pytest.importorskip("mkdocs")
  pytest.importorskip("material")
  folder = tmp_path_factory.mktemp("docs") / "site"
  done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f",
                         os.path.join(ROOT, "docs", "mkdocs.yml"), "-d", str(folder)],
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  # quiet: no warning, and no banner of the theme's (setup.cfg pins mkdocs-material below the releases that print one)
  assert done.stderr == "", done.stderr[-3000:]
  return folder


def test_the_site_builds_strictly_with_the_demo_picture(site):
  for page in ("index.html", "inference.html"):
    html = (site / page).read_text(encoding="utf-8")
    assert re.search(r'<img[^>]+src="images/demo\.png"', html), page
  picture = os.path.join(ROOT, "docs", "pages", "images", "demo.png")
  assert (site / "images" / "demo.png").read_bytes() == open(picture, "rb").read()
  configs = (site / "configs.html").read_text(encoding="utf-8")
  assert "model.lstm_impl" in configs and "data.features_on_device" in configs  # the generated reference
  performance = (site / "performance.html").read_text(encoding="utf-8")
  stale = 0
  for path in glob.glob(os.path.join(ROOT, "bench", "records", "*.json")):  # every record, its date and load
    with open(path, encoding="utf-8") as f:
      record = json.load(f)
    section = performance.split(f'id="{record["bench"]}"', 1)[1].split("<h3", 1)[0]
    assert record["date"] in section and f"1-minute load average {record['load']['before']} before" in section
    stale += not record["quiet"]
    assert ("<strong>Not quiet: stale until re-recorded.</strong>" in section) == (not record["quiet"])
  assert performance.count("measured under load (stale)") == stale


def _quotes_written(markdown: str) -> int:
  """The blockquotes a Markdown text asks for: runs of lines starting with `>` outside code blocks."""
  count, in_block, quoted = 0, False, False
  for line in markdown.splitlines():
    if FENCE.match(line):
      in_block = not in_block
    starts = not in_block and re.match(r" {0,3}>", line) is not None
    count += starts and not quoted
    quoted = starts
  return count


def test_the_pages_render_as_written(site):
  """Each page's HTML: no backslash of an escaped pipe left in view (Python-Markdown keeps a code
  span's pipes in a table, and its backslash too), and no blockquote that its Markdown did not
  write (a wrapped line that starts with `>=` becomes one)."""
  for path in sorted(glob.glob(os.path.join(ROOT, "docs", "pages", "*.md"))):
    name = os.path.basename(path)[:-len(".md")]
    html = (site / f"{name}.html").read_text(encoding="utf-8")
    shown = re.sub(r"<pre\b.*?</pre>", "", html, flags=re.S)  # code blocks show what they hold
    assert "\\|" not in shown, (name, shown[max(0, shown.index("\\|") - 200):shown.index("\\|") + 50])
    with open(path, encoding="utf-8") as f:
      assert html.count("<blockquote") == _quotes_written(f.read()), name


def test_the_records_missed_targets_are_marked_and_explained(site):
  performance = (site / "performance.html").read_text(encoding="utf-8")
  explained = performance.split('id="where-the-targets-are-missed-on-a-cpu"', 1)[1].split("<h2", 1)[0]
  missed = []
  for path in sorted(glob.glob(os.path.join(ROOT, "bench", "records", "*.json"))):
    with open(path, encoding="utf-8") as f:
      record = json.load(f)
    for row in record["rows"]:
      words = row["target"].replace(">=", ">= ").replace("<=", "<= ").split()
      if words and words[0] in (">=", "<="):
        bound = float(re.match(r"[\d.]+", words[1]).group())
        if (row["value"] < bound) if words[0] == ">=" else (row["value"] > bound):
          missed.append(record["bench"])
      elif words and "-" in words[0]:
        low, high = (float(x) for x in re.findall(r"[\d.]+", words[0])[:2])
        if not low <= row["value"] <= high:
          missed.append(record["bench"])
  assert performance.count("<strong>missed</strong>") == len(missed) + 1  # each row, and the section saying so
  for bench in set(missed):
    assert f"<code>{bench}</code>" in explained, bench


@pytest.mark.slow
def test_the_site_shows_the_demo_picture_in_a_browser(site):
  """Headless Chromium (as tests/test_demo.py drives it) loads the home page and its picture."""
  chromium = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
  if not (chromium and shutil.which("chromedriver")):
    pytest.skip("chromium / chromedriver not found (apt-get install -y chromium chromium-driver)")
  from selenium import webdriver
  from selenium.webdriver.chrome.service import Service
  options = webdriver.ChromeOptions()
  options.binary_location = chromium
  for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
    options.add_argument(flag)
  driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
  try:
    from selenium.webdriver.support.ui import WebDriverWait
    driver.get((site / "index.html").as_uri())
    # decoded, not merely requested: a loaded machine may return from `get` before the picture
    width, height = WebDriverWait(driver, 60).until(lambda d: d.execute_script(
        "const img = document.querySelector('img[src=\"images/demo.png\"]');"
        "return img && img.complete && img.naturalWidth ? [img.naturalWidth, img.naturalHeight] : null;"))
    from PIL import Image
    with Image.open(os.path.join(ROOT, "docs", "pages", "images", "demo.png")) as picture:
      assert (width, height) == picture.size
    assert "vqajax" in driver.title
  finally:
    driver.quit()

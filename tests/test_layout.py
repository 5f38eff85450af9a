"""The import rules of the layout (WORKSPACE.md, "Layout"): folders never import upward or sideways.

  core/, nn/       no paper package, no synthetic/, no features, no front door; nn/ no core/ but
                   core/errors (a Hub folder's reader, nn/vilt_hub.py, raises InputError),
                   core/config (the rules of an encoder's or a model's config fields sit beside it)
                   and core/official_files (a checkpoint's files are read as every input file is)
  vqa/ and answertherapy/   stand side by side: neither imports the other
  synthetic/       imported only by the front door (cli.py, commands.py) that writes the embedded
                   datasets (and tests)
  demo.py          the web demo sees both papers, so it sits beside cli.py, the only module that
                   imports it; it is the only Gradio user
  data_pipeline/   the offline pipelines sit above vqajax/: they import it, and of vqajax only
                   the front door (`vqajax/cli.py`, when it dispatches a verb) imports them;
                   its pipelines (features, tfds, answertherapy, convert) stand side by side
  tests/           no library module imports them (nor bench/, experiments/); bench/ imports nothing
                   from tests/ (tests may import bench/: its reference implementations)
  no cycles        no two vqajax modules import each other, directly or through others, at any
                   depth: the verbs' modules share the front door's helpers through commands.py
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("vqajax", "data_pipeline", "bench")
PIPELINES = ("features", "tfds", "answertherapy", "convert")  # data_pipeline's, side by side


def _imports(path):
  """Every absolute module name `path` imports (at any depth: lazy imports count)."""
  tree = ast.parse(open(path, encoding="utf-8").read(), path)
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      names.update(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
      names.add(node.module)
      names.update(f"{node.module}.{alias.name}" for alias in node.names)
  return names


def _modules():
  for package in PACKAGES:
    for folder, _, files in os.walk(os.path.join(ROOT, package)):
      for name in files:
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
          yield module.removesuffix(".__init__"), _imports(path)


MODULES = dict(_modules())


def _within(name, package):
  return name == package or name.startswith(package + ".")


def _violations(importer, forbidden, exempt=(), allowed=()):
  return sorted(f"{module} imports {name}" for module, names in MODULES.items()
                if _within(module, importer) and module not in exempt for name in names
                if any(_within(name, f) for f in forbidden) and not any(_within(name, a) for a in allowed))


# importer -> the modules of a forbidden folder it may import: nn/ raises InputError, declares
# its config fields' rules beside its encoders and models (core/config's Rule) and reads a
# checkpoint's files as every input file is read (core/official_files' check_file, load_json)
ALLOWED = {"vqajax.nn": ("vqajax.core.errors", "vqajax.core.config", "vqajax.core.official_files")}


@pytest.mark.parametrize("importer, forbidden", [
    ("vqajax.core", ("vqajax.vqa", "vqajax.answertherapy", "vqajax.synthetic", "vqajax.cli", "vqajax.commands",
                     "vqajax.features")),
    ("vqajax.nn", ("vqajax.vqa", "vqajax.answertherapy", "vqajax.synthetic", "vqajax.cli", "vqajax.commands",
                   "vqajax.features", "vqajax.core")),
    ("vqajax.features", ("vqajax.vqa", "vqajax.answertherapy", "vqajax.synthetic", "vqajax.cli", "vqajax.commands")),
    ("vqajax.vqa", ("vqajax.answertherapy", "vqajax.synthetic", "vqajax.cli", "vqajax.commands")),
    ("vqajax.answertherapy", ("vqajax.vqa", "vqajax.synthetic", "vqajax.cli", "vqajax.commands")),
    ("vqajax", ("tests", "bench", "experiments")),
    ("data_pipeline", ("tests", "bench", "experiments", "vqajax.cli", "vqajax.demo")),
    ("bench", ("tests",)),
    *((f"data_pipeline.{p}", tuple(f"data_pipeline.{o}" for o in PIPELINES if o != p)) for p in PIPELINES),
])
def test_no_module_imports_upward_or_sideways(importer, forbidden):
  assert _violations(importer, forbidden, allowed=ALLOWED.get(importer, ())) == []


def test_of_vqajax_only_the_front_door_imports_data_pipeline():
  assert _violations("vqajax", ("data_pipeline",), exempt={"vqajax.cli"}) == []


def test_only_the_front_door_imports_synthetic():
  importers = {module for module, names in MODULES.items()
               if not _within(module, "vqajax.synthetic")
               and any(_within(name, "vqajax.synthetic") for name in names)}
  assert importers <= {"vqajax.cli", "vqajax.commands"}, importers


def test_the_demo_is_reached_only_through_the_front_door_and_alone_imports_gradio():
  demo_importers = {m for m, names in MODULES.items() if any(_within(n, "vqajax.demo") for n in names)}
  gradio_importers = {m for m, names in MODULES.items() if any(_within(n, "gradio") for n in names)}
  assert demo_importers == {"vqajax.cli"} and gradio_importers == {"vqajax.demo"}


def test_the_rules_see_the_modules():
  """The checks above are not vacuous: the scan finds every package of both folders, and a
  rule that real imports break is reported, in vqajax/ and in data_pipeline/ (where the
  front door's lazy imports are what the one exemption lets through)."""
  packages = {tuple(module.split(".")[:2]) for module in MODULES if module.count(".") >= 1}
  assert {("vqajax", p) for p in ("core", "nn", "vqa", "answertherapy", "synthetic", "features")} <= packages
  assert {("data_pipeline", p) for p in PIPELINES} <= packages
  assert "vqajax.core.official_files.load_json" in MODULES["vqajax.vqa.files"]
  assert "vqajax.vqa.files imports vqajax.core.official_files" in _violations("vqajax.vqa", ("vqajax.core",))
  assert "vqajax.cli" in {m for m, names in MODULES.items()
                          if any(_within(n, "vqajax.synthetic") for n in names)}
  assert "vqajax.cli imports data_pipeline.tfds.cli" in _violations("vqajax", ("data_pipeline",))
  assert "data_pipeline.tfds.base imports vqajax.features.store" in _violations(
      "data_pipeline.tfds", ("vqajax.features",))


def _cycle(graph):
  """One cycle of `graph` ({module: modules it imports}) as [a, b, ..., a], or None."""
  state = {}  # module -> "open" while on the path, "done" after

  def visit(module, path):
    state[module] = "open"
    for other in sorted(graph[module]):
      if state.get(other) == "open":
        return path[path.index(other):] + [other]
      if other not in state:
        found = visit(other, path + [other])
        if found:
          return found
    state[module] = "done"
    return None

  return next((c for m in sorted(graph) if m not in state for c in [visit(m, [m])] if c), None)


def _import_graph(prefix):
  """{module: the modules of MODULES it imports}, for the modules under `prefix` (an imported
  name `a.b.f` counts as module `a.b`)."""
  graph = {module: {n if n in MODULES else n.rpartition(".")[0] for n in names} - {module}
           for module, names in MODULES.items() if _within(module, prefix)}
  return {module: names & set(graph) for module, names in graph.items()}


def test_no_import_cycles_among_vqajax_modules():
  assert _cycle(_import_graph("vqajax")) is None
  assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
  assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None

"""Only `vqajax` is installed as a top-level package: the offline pipelines (data_pipeline/) and
the configs (experiments/) sit beside it in the repository and ship inside it, as
vqajax/data_pipeline/ and vqajax/experiments/, where the front door finds them by path
(`vqajax/cli.py`, `core/config.load_module`). The rest of the metadata is in setup.cfg."""

from setuptools import find_packages, setup

SHIPPED = ("data_pipeline", "experiments")  # repository folders installed inside vqajax/

setup(packages=find_packages(include=["vqajax", "vqajax.*"])
      + [f"vqajax.{name}" for name in find_packages(include=[f"{s}{tail}" for s in SHIPPED for tail in ("", ".*")])],
      package_dir={f"vqajax.{name}": name for name in SHIPPED})

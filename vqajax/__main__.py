"""`python -m vqajax VERB ...` is `vqajax VERB ...`."""

from vqajax.cli import entry

entry()

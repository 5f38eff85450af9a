"""Errors that are the user's input, not a bug: reported as one line, exit status 2."""


class InputError(ValueError):
  """Bad input: the message names the file, the record and what was expected."""

"""What a folder holds, to check that a command left a user's files byte-identical."""

import hashlib
import os


def digests(folder, only=None) -> dict[str, str]:
  """{relative path: sha256} of every regular file below `folder` (links skipped), or of
  those of the relative paths `only` that it holds."""
  if only is None:
    only = [os.path.relpath(os.path.join(parent, name), folder) for parent, _, names in os.walk(folder)
            for name in names]
  out = {}
  for relative in only:
    path = os.path.join(folder, relative)
    if os.path.isfile(path) and not os.path.islink(path):
      with open(path, "rb") as f:
        out[relative] = hashlib.sha256(f.read()).hexdigest()
  return out

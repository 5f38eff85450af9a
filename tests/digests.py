"""What a folder holds, to check that a command left a user's files byte-identical."""

import hashlib
import os


def digests(folder) -> dict[str, str]:
  """{relative path: sha256} of every regular file below `folder` (links skipped)."""
  out = {}
  for parent, _, names in os.walk(folder):
    for name in names:
      path = os.path.join(parent, name)
      if not os.path.islink(path):
        with open(path, "rb") as f:
          out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
  return out

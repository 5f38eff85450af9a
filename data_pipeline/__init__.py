"""Offline data tools (features, TFDS builders, AnswerTherapy construction); never
imported by `vqajax`."""

"""The offline pipelines that prepare data once (README.md beside this file): image features
over a folder into a store, the TFDS builders, the AnswerTherapy construction and converters
from other datasets' files into the official VQA files. They import `vqajax`; of `vqajax`, only
the front door (`vqajax/cli.py`) imports them, when it dispatches their verbs."""

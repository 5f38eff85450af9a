"""TFDS builders of the official VQA v1/v2, VizWiz-VQA and VQA-AnswerTherapy files
(read from a manual directory, nothing downloaded); `python -m data_pipeline.tfds build`."""

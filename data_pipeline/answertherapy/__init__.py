"""VQA-AnswerTherapy dataset construction (paper section 3.1): `construct`, its raw input
readers `raw` and the seeded synthetic raw input `synthetic_raw`."""

"""``elasticps serve MODEL_DIR``: scores raw rows over HTTP with the newest version of a model
directory (:mod:`elasticps.trainer.model_dir`), following it as new versions are exported.

builder.py (the model's code, named on the command line), scoring.py (one loaded version:
rows -> scores), follower.py (polls the directory, loads off the request path, swaps),
metrics.py (Prometheus), server.py (HTTP), cli.py (the command).
"""

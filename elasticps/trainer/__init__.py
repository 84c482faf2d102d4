"""The trainer: PyTorch binding (sparse embedding, dense sync), training loop, events, export.

Import what you need from the submodules; ``elasticps`` re-exports the public names lazily so
that the master and pserver processes never import torch.
"""

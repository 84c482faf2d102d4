"""train.py's click model rebuilt from an export, in plain PyTorch, for ``elasticps serve``.

    elasticps serve /tmp/online/models --model examples/online/score.py:build --port 8500

``build(tensors, manifest)`` returns the module: the export's ``user`` and ``item`` rows (an id
the export does not hold was never trained and reads a zero row) and its ``bias``, combined as
``train.py``'s ``ClickModel`` combines them. It reads a batch's ``ids`` by column, as the
trainer's layers do; nothing of elasticps runs in it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


class Rows(nn.Module):
    """The exported rows of one table (sorted ``ids``) and a zero row for any other id."""

    def __init__(self, ids: torch.Tensor, rows: torch.Tensor) -> None:
        super().__init__()
        self.ids: torch.Tensor
        self.rows: torch.Tensor
        self.register_buffer("ids", ids.to(torch.int64))
        self.register_buffer("rows", torch.cat([rows.to(torch.float32),
                                                torch.zeros(1, rows.shape[1])]))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(torch.int64).reshape(-1)
        count = self.ids.numel()
        if count == 0:
            return self.rows[-1].expand(ids.numel(), -1)
        where = torch.searchsorted(self.ids, ids).clamp(max=count - 1)
        known = self.ids[where] == ids
        return self.rows[torch.where(known, where, torch.full_like(where, count))]


class ServedClickModel(nn.Module):
    """``train.py``'s ClickModel over exported rows."""

    def __init__(self, user: Rows, item: Rows, bias: torch.Tensor) -> None:
        super().__init__()
        self.user, self.item = user, item
        self.bias: torch.Tensor
        self.register_buffer("bias", bias.to(torch.float32).reshape(1))

    def forward(self, batch: Any) -> torch.Tensor:
        user, item = self.user(batch.ids["user"]), self.item(batch.ids["item"])
        return (self.bias + user[:, -1] + item[:, -1]
                + (user[:, :-1] * item[:, :-1]).sum(1))


def build(tensors: Mapping[str, torch.Tensor], manifest: Mapping[str, Any]) -> nn.Module:
    """The served model of one version (eval mode)."""
    tables = {name: Rows(tensors[f"sparse/{name}/ids"], tensors[f"sparse/{name}/rows"])
              for name in ("user", "item")}
    return ServedClickModel(tables["user"], tables["item"], tensors["bias"]).eval()

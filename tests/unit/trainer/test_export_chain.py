"""Delta exports: base + deltas, loaded by the plain loader, equal a full export of the same
state; a delta applies only on its own parent, and a corrupt link is refused by name."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from elasticps.errors import ConfigError
from elasticps.trainer import export_chain
from elasticps.trainer.export import export_model
from elasticps.trainer.export_chain import ExportChainError, apply_link, load_export, read_link

LAYERS = {"emb": {"table": "t", "dim": 3, "kind": "embedding", "columns": "c"}}
Tables = dict[str, tuple[np.ndarray, np.ndarray]]


def state(seed: int, ids: np.ndarray) -> tuple[dict[str, np.ndarray], Tables]:
    rng = np.random.default_rng(seed)
    dense = {"w": rng.normal(size=(2, 3)).astype(np.float32)}
    return dense, {"t": (ids, rng.normal(size=(ids.size, 3)).astype(np.float32))}


def evolve(tables: Tables, seed: int, change: int, add: np.ndarray, drop: np.ndarray) -> Tables:
    """Another table state: ``change`` rows moved, ids ``add`` new, ids ``drop`` gone."""
    rng = np.random.default_rng(seed)
    ids, rows = tables["t"]
    rows = rows.copy()
    rows[rng.choice(ids.size, change, replace=False)] += 1.0
    keep = ~np.isin(ids, drop)
    new_rows = rng.normal(size=(add.size, 3)).astype(np.float32)
    return {"t": (np.r_[ids[keep], add], np.concatenate([rows[keep], new_rows]))}


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def test_base_and_deltas_equal_a_full_export_also_after_evictions(tmp_path: Path) -> None:
    dense, tables = state(0, np.arange(0, 2000, 2))  # 1,000 rows
    export_model(tmp_path / "e0", dense, tables, LAYERS)
    later = evolve(tables, 1, change=10, add=np.array([1, 3, 5]), drop=np.arange(0, 40, 2))
    dense1 = {"w": dense["w"] + 1}
    export_model(tmp_path / "e1", dense1, later, LAYERS, parent=tmp_path / "e0")
    last = evolve(later, 2, change=5, add=np.array([7]), drop=np.array([1, 100]))
    export_model(tmp_path / "e2", dense1, last, LAYERS, parent=tmp_path / "e1")
    export_model(tmp_path / "full", dense1, last, LAYERS)

    chained, manifest = load_export(tmp_path / "e2")
    full, _ = load_export(tmp_path / "full")
    assert_same(chained, full)
    assert manifest["sparse"]["t"]["count"] == 1000 - 20 + 3 + 1 - 2
    # The deltas hold what changed and what went, no more.
    first = json.loads((tmp_path / "e1" / "manifest.json").read_text())
    assert first["kind"] == "delta"
    assert first["parent"]["path"] == "../e0"
    assert first["sparse"]["t"]["removed"] == 20
    assert 3 <= first["sparse"]["t"]["count"] <= 13  # 3 new, up to 10 changed (some dropped)
    second = json.loads((tmp_path / "e2" / "manifest.json").read_text())
    assert second["sparse"]["t"]["removed"] == 2
    assert second["sparse"]["t"]["count"] <= 6
    evicted = np.r_[np.arange(0, 40, 2), [1, 100]]
    assert not np.isin(evicted, chained["sparse/t/ids"].numpy()).any()


def test_a_delta_applies_only_on_its_own_parent(tmp_path: Path) -> None:
    dense, tables = state(0, np.arange(10))
    export_model(tmp_path / "a", dense, tables, LAYERS)
    export_model(tmp_path / "b", dense, evolve(tables, 1, 2, np.array([50]), np.array([0])),
                 LAYERS, parent=tmp_path / "a")
    other_dense, other = state(9, np.arange(10))
    export_model(tmp_path / "other", other_dense, other, LAYERS)
    on_other = export_chain.load_state(tmp_path / "other")
    with pytest.raises(ExportChainError, match="not of the one applied"):
        apply_link(on_other, read_link(tmp_path / "b"))
    with pytest.raises(ExportChainError, match="needs its parent"):
        apply_link(None, read_link(tmp_path / "b"))
    # The parent re-exported in place (another state) breaks the chain: refused, not mixed.
    export_model(tmp_path / "a", other_dense, other, LAYERS)
    with pytest.raises(ExportChainError, match="refusing to apply"):
        load_export(tmp_path / "b")


def test_a_corrupt_delta_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    dense, tables = state(0, np.arange(100))
    export_model(tmp_path / "a", dense, tables, LAYERS)
    export_model(tmp_path / "b", dense, evolve(tables, 1, 5, np.array([500]), np.array([3])),
                 LAYERS, parent=tmp_path / "a")
    weights = tmp_path / "b" / "model.safetensors"
    good = weights.read_bytes()
    flipped = bytearray(good)
    flipped[-5] ^= 0xFF
    weights.write_bytes(bytes(flipped))
    with pytest.raises(ExportChainError, match=r"b/model.safetensors does not match the SHA-256"):
        load_export(tmp_path / "b")
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(ExportChainError, match="does not match the SHA-256"):
        load_export(tmp_path / "b")
    weights.write_bytes(good)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    del manifest["sparse"]["t"]["tombstones"]
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ExportChainError, match=r"b/manifest.json is malformed.*tombstones"):
        load_export(tmp_path / "b")
    (tmp_path / "b" / "manifest.json").write_text('{"format": "elasticps.model/1", "ki')
    with pytest.raises(ExportChainError, match=r"b/manifest.json is not JSON"):
        load_export(tmp_path / "b")


def test_a_delta_of_another_model_is_refused_before_writing(tmp_path: Path) -> None:
    dense, tables = state(0, np.arange(10))
    export_model(tmp_path / "a", dense, tables, LAYERS)
    with pytest.raises(ConfigError, match=r"cannot export a delta of .*dense"):
        export_model(tmp_path / "b", {"w": np.zeros((3, 3), np.float32)}, tables, LAYERS,
                     parent=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"no readable manifest\.json"):
        export_model(tmp_path / "c", dense, tables, LAYERS, parent=tmp_path / "missing")
    assert not (tmp_path / "b").exists()
    assert not (tmp_path / "c").exists()


def test_the_loader_imports_nothing_of_elasticps() -> None:
    tree = ast.parse(Path(export_chain.__file__).read_text())
    modules = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for alias in node.names}
    modules |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert {m.split(".")[0] for m in modules} <= {
        "__future__", "hashlib", "json", "os", "dataclasses", "pathlib", "typing", "numpy",
        "safetensors", "torch"}

"""Score eviction (evict=SCORE, Paddle's CTR accessor): pure decisions over arrays, the shard
against an eager reference model (decay every row at every pass end, then delete below the
threshold, as Paddle's Shrink does), validation, and restore through base + delta."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from elasticps.errors import InvalidArgumentError
from elasticps.proto import pserver_pb2
from elasticps.pserver import sparse_policy
from elasticps.pserver.checkpoint.files import ShardCheckpoints
from elasticps.pserver.dense_table import normalize_spec
from elasticps.pserver.shard import BatchKey, ShardState

OPT = pserver_pb2.OptimizerSpec
SPEC = pserver_pb2.TableSpec
POLICY = pserver_pb2.SparsePolicy


def _score_policy(**settings: float) -> pserver_pb2.SparsePolicy:
    policy = POLICY(evict=POLICY.SCORE, **settings)  # type: ignore[arg-type]
    sparse_policy.fill_score_defaults(policy)
    return policy


# -- pure decisions ------------------------------------------------------------------------


def test_counts_decay_once_per_pass_ended() -> None:
    policy = _score_policy(score_decay=0.5)
    counts = np.array([8.0, 8.0, 8.0, 8.0], np.float32)
    since = np.array([3, 2, 0, 5], np.int32)
    got = sparse_policy.decayed(policy, counts, since, 3)
    # Three, one and no pass ends; a row stored as of a later pass is not grown.
    np.testing.assert_array_equal(got, [8.0, 4.0, 1.0, 8.0])


def test_the_score_weighs_shows_without_clicks_and_clicks() -> None:
    policy = _score_policy()  # Paddle's 0.1 and 1.0
    score = sparse_policy.show_click_score(policy, np.array([10, 10, 1], np.float32),
                                           np.array([0, 2, 1], np.float32))
    np.testing.assert_allclose(score, [1.0, 0.8 + 2.0, 1.0], rtol=1e-6)


def test_rows_below_the_threshold_go_unless_protected() -> None:
    policy = _score_policy(delete_threshold=0.8)
    scores = np.array([0.1, 0.9, 0.79, 0.8, 0.0], np.float32)
    got = sparse_policy.below_threshold(policy, scores, np.array([4]))
    np.testing.assert_array_equal(got, [0, 2])


def test_the_lowest_score_leaves_first_ties_by_smaller_id() -> None:
    policy = _score_policy()
    scores = np.array([0.5, 0.2, 0.9, 0.2, 0.2], np.float32)
    ids = np.array([10, 40, 5, 30, 20], np.int64)
    hits = np.ones(5, np.uint32)
    touched = np.zeros(5)
    got = sparse_policy.victims(policy, hits, touched, 2, np.zeros(0, np.int64), ids, scores)
    np.testing.assert_array_equal(got, [3, 4])  # the 0.2s with ids 30 and 20, not 40
    spared = sparse_policy.victims(policy, hits, touched, 2, np.array([4]), ids, scores)
    np.testing.assert_array_equal(spared, [1, 3])


def test_paddle_defaults_fill_in_so_both_spellings_declare_alike() -> None:
    plain = normalize_spec(SPEC(name="t", kind=SPEC.SPARSE, dim=2,
                                optimizer=OPT(kind=OPT.SGD, lr=0.1),
                                policy=POLICY(evict=POLICY.SCORE)))
    spelled = normalize_spec(SPEC(name="t", kind=SPEC.SPARSE, dim=2,
                                  optimizer=OPT(kind=OPT.SGD, lr=0.1),
                                  policy=POLICY(evict=POLICY.SCORE, score_decay=0.98,
                                                delete_threshold=0.8, nonclk_coeff=0.1,
                                                click_coeff=1.0)))
    assert plain == spelled
    assert (plain.policy.score_decay, plain.policy.delete_threshold,
            plain.policy.nonclk_coeff, plain.policy.click_coeff) == (0.98, 0.8, 0.1, 1.0)
    lru = normalize_spec(SPEC(name="t", kind=SPEC.SPARSE, dim=2,
                              optimizer=OPT(kind=OPT.SGD, lr=0.1),
                              policy=POLICY(evict=POLICY.LRU, max_rows=5)))
    assert not lru.policy.HasField("score_decay")  # other modes are left as they were


@pytest.mark.parametrize(("policy", "named"), [
    (POLICY(evict=POLICY.SCORE, score_decay=0.0), "score_decay=0.0"),
    (POLICY(evict=POLICY.SCORE, score_decay=1.5), "score_decay=1.5"),
    (POLICY(evict=POLICY.SCORE, delete_threshold=-1.0), "delete_threshold=-1.0"),
    (POLICY(evict=POLICY.SCORE, nonclk_coeff=float("nan")), "nonclk_coeff=nan"),
    (POLICY(evict=POLICY.SCORE, click_coeff=float("inf")), "click_coeff=inf"),
    (POLICY(evict=POLICY.LRU, max_rows=3, score_decay=0.9), "score_decay=0.9"),
])
def test_bad_score_settings_name_the_table_and_the_setting(
        policy: pserver_pb2.SparsePolicy, named: str) -> None:
    state = ShardState(0, 1)
    spec = SPEC(name="ctr", kind=SPEC.SPARSE, dim=2, optimizer=OPT(kind=OPT.SGD, lr=0.1),
                policy=policy)
    with pytest.raises(InvalidArgumentError, match=rf"table 'ctr': {named}"):
        state.declare([spec])
    assert state.tables == {}


# -- the shard against an eager model ------------------------------------------------------


def _state(policy: pserver_pb2.SparsePolicy) -> ShardState:
    state = ShardState(0, 1, clock=lambda: 0.0)
    state.declare([SPEC(name="emb", kind=SPEC.SPARSE, dim=2, optimizer=OPT(kind=OPT.SGD, lr=0.1),
                        policy=policy)])
    state.init_dense({})
    return state


def _push(state: ShardState, pass_id: int, seq: int, ids: np.ndarray, shows: np.ndarray,
          clicks: np.ndarray) -> None:
    state.push(BatchKey(pass_id, 0, seq), {},
               {"emb": (ids, np.full((ids.size, 2), 0.5, np.float32))},
               counts={"emb": (shows, clicks)})


class EagerModel:
    """Paddle's way, one Python dict: every row's counts decay at every pass end, then rows
    below the threshold go (except those the push that began the pass trains)."""

    def __init__(self, policy: pserver_pb2.SparsePolicy) -> None:
        self.p = policy
        self.rows: dict[int, list[float]] = {}
        self.current = 0

    def push(self, pass_id: int, ids: np.ndarray, shows: np.ndarray,
             clicks: np.ndarray) -> None:
        if pass_id > self.current:
            for _ in range(pass_id - self.current):
                for counts in self.rows.values():
                    counts[0] *= self.p.score_decay
                    counts[1] *= self.p.score_decay
            pushed = {int(i) for i in ids}
            for key in [k for k, (s, c) in self.rows.items() if k not in pushed and
                        (s - c) * self.p.nonclk_coeff + c * self.p.click_coeff
                        < self.p.delete_threshold]:
                del self.rows[key]
            self.current = pass_id
        for i, s, c in zip(ids.tolist(), shows.tolist(), clicks.tolist(), strict=True):
            counts = self.rows.setdefault(i, [0.0, 0.0])
            counts[0] += s
            counts[1] += c


def _random_push(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ids = rng.integers(0, 300, 60).astype(np.int64)  # duplicates: counts add up
    shows = rng.integers(1, 4, ids.size).astype(np.float32)
    clicks = np.minimum(rng.binomial(1, 0.2, ids.size), shows).astype(np.float32)
    return ids, shows, clicks


def test_the_shard_evicts_as_an_eager_model_over_random_passes() -> None:
    policy = _score_policy(score_decay=0.7, delete_threshold=0.5)
    state, model = _state(policy), EagerModel(policy)
    rng = np.random.default_rng(3)
    evicted_by_pass = []
    for seq in range(40):
        pass_id = seq // 5
        ids, shows, clicks = _random_push(rng)
        _push(state, pass_id, seq, ids, shows, clicks)
        model.push(pass_id, ids, shows, clicks)
        table = state.tables["emb"]
        assert sorted(table.ids[:table.size].tolist()) == sorted(model.rows), f"push {seq}"
        evicted_by_pass.append(table.evicted)
    assert evicted_by_pass[-1] > 100  # the passes did evict: the check could have failed
    assert evicted_by_pass[:5] == [0] * 5  # nothing leaves before the first pass ends


def test_clicked_rows_outlive_rows_shown_without_clicks() -> None:
    state = _state(_score_policy(score_decay=0.5))  # threshold 0.8, coefficients 0.1 / 1.0
    ids = np.array([1, 2, 3], np.int64)
    # id 1: 20 shows, 5 clicks (score 6.5: 3.25, 1.625, 0.8125, 0.41 after 1-4 pass ends);
    # id 2: 20 shows, no click (2.0: 1.0, 0.5); id 3: 2 shows (0.2: 0.1)
    _push(state, 0, 0, ids, np.array([20, 20, 2], np.float32), np.array([5, 0, 0], np.float32))
    held = []
    for pass_id in range(1, 5):
        _push(state, pass_id, pass_id, np.array([1000 + pass_id], np.int64),
              np.array([100], np.float32), np.zeros(1, np.float32))
        rows = state.pull_held("emb", ids)[1]
        assert rows is not None
        held.append(rows.tolist())
    assert held == [[True, True, False], [True, False, False], [True, False, False],
                    [False, False, False]]


def test_without_counts_each_pushed_id_is_shown_once() -> None:
    state = _state(_score_policy(score_decay=1.0, delete_threshold=0.25))
    ids = np.array([4, 4, 5], np.int64)
    for seq in range(2):
        state.push(BatchKey(0, 0, seq), {}, {"emb": (ids, np.ones((3, 2), np.float32))})
    table = state.tables["emb"]
    shows = dict(zip(table.ids[:table.size].tolist(), table.shows[:table.size].tolist(),
                     strict=True))
    assert shows == {4: 2.0, 5: 2.0}  # one show per push, duplicates within a push once


def test_max_rows_evicts_the_lowest_score_first() -> None:
    state = _state(_score_policy(max_rows=128))
    ids = np.arange(128, dtype=np.int64)
    clicks = (ids % 2).astype(np.float32)  # odd ids clicked
    _push(state, 0, 0, ids, np.full(128, 2, np.float32), clicks)
    _push(state, 0, 1, np.array([500], np.int64), np.ones(1, np.float32),
          np.zeros(1, np.float32))
    table = state.tables["emb"]
    gone = sorted(set(range(128)) - set(table.ids[:table.size].tolist()))
    assert gone == [0, 2, 4]  # 1 + 128 // 64 victims: the unclicked, smallest ids first


@pytest.mark.parametrize(("shows", "clicks", "match"), [
    (np.ones(2, np.float32), np.ones(3, np.float32), r"clicks for table 'emb' must be float32 "
                                                     r"\[2\]"),
    (np.ones(2, np.float64), np.ones(2, np.float32), r"shows for table 'emb' must be float32"),
    (np.ones(2, np.float32), np.array([0, 2], np.float32), r"click 2.0 at position 1"),
    (np.array([1, np.nan], np.float32), np.zeros(2, np.float32), r"show nan"),
])
def test_bad_counts_are_refused_and_change_nothing(shows: np.ndarray, clicks: np.ndarray,
                                                   match: str) -> None:
    state = _state(_score_policy())
    _push(state, 0, 0, np.array([7], np.int64), np.ones(1, np.float32), np.zeros(1, np.float32))
    before, version = state.pull_sparse("emb", np.array([7, 8], np.int64)), state.version
    with pytest.raises(InvalidArgumentError, match=match):
        _push(state, 1, 1, np.array([7, 8], np.int64), shows, clicks)
    np.testing.assert_array_equal(state.pull_sparse("emb", np.array([7, 8], np.int64)), before)
    assert state.version == version
    assert state.current_pass == 0  # the refused push ended no pass


# -- checkpoints ---------------------------------------------------------------------------


def _view(state: ShardState) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ids, values and scores now, by id (a restored shard holds its rows in another order)."""
    table = state.tables["emb"]
    order = np.argsort(table.ids[:table.size])
    return (table.ids[:table.size][order], table.values[:table.size][order],
            table.row_scores(state.current_pass)[order])


def test_a_restore_through_base_and_delta_evicts_as_the_saved_shard(tmp_path: Path) -> None:
    policy = _score_policy(score_decay=0.7, delete_threshold=0.5, max_rows=150)
    saved = _state(policy)
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1, deltas=1)
    rng = np.random.default_rng(5)
    for seq in range(20):
        _push(saved, seq // 4, seq, *_random_push(rng))
        if seq in (9, 19):  # a full checkpoint, then a delta on it (two passes later)
            checkpoints.save(saved.snapshot(delta=checkpoints.wants_delta())[0])
    loaded = checkpoints.load_newest()
    assert loaded is not None
    assert loaded[1].parent  # restored through the chain
    restored = ShardState(0, 1, clock=lambda: 0.0)
    restored.restore(loaded[0], loaded[1].id)
    before = saved.tables["emb"].evicted
    for seq in range(20, 36):  # the same pushes to both, over four more pass ends
        push = _random_push(rng)
        _push(saved, seq // 4, seq, *push)
        _push(restored, seq // 4, seq, *push)
        for got, want in zip(_view(restored), _view(saved), strict=True):
            np.testing.assert_array_equal(got, want)
    assert saved.tables["emb"].evicted > before  # pass ends after the restore evicted
    assert restored.tables["emb"].counters() == saved.tables["emb"].counters()


def test_a_checkpoint_without_scores_restores_rows_as_shown_once(tmp_path: Path) -> None:
    saved = _state(_score_policy())
    _push(saved, 0, 0, np.arange(10, dtype=np.int64), np.full(10, 50, np.float32),
          np.zeros(10, np.float32))
    snap, _ = saved.snapshot()
    book = snap.sparse["emb"].bookkeeping
    assert book is not None
    book.scores = None  # what a file from before scores holds
    checkpoints = ShardCheckpoints(str(tmp_path), 0, 1)
    checkpoints.save(snap)
    loaded = checkpoints.load_newest()
    assert loaded is not None
    restored = ShardState(0, 1)
    restored.restore(loaded[0], loaded[1].id)
    table = restored.tables["emb"]
    assert table.shows[:table.size].tolist() == [1.0] * 10


def test_checkpoint_inspect_shows_the_scores(tmp_path: Path) -> None:
    from elasticps.pserver.checkpoint.inspection import format_report, inspect_url

    state = _state(_score_policy(score_decay=0.5))
    _push(state, 0, 0, np.array([1, 2], np.int64), np.array([10, 4], np.float32),
          np.array([4, 0], np.float32))
    _push(state, 2, 1, np.array([3], np.int64), np.ones(1, np.float32), np.ones(1, np.float32))
    ShardCheckpoints(str(tmp_path), 0, 1).save(state.snapshot()[0])
    report = inspect_url(str(tmp_path))[0]
    score = report["tables"][0]["score"]
    # As of pass 2: row 1 decayed twice (shows 2.5, clicks 1.0: score 1.15), row 3 not at all;
    # row 2 (score 0.4 * 0.25) left when pass 2 began.
    assert (score["shows"], score["clicks"], score["pass"]) == (3.5, 2.0, 2)
    assert score["below_threshold"] == 0
    assert report["tables"][0]["rows"] == 2
    assert "score eviction (decay 0.5, delete below 0.8" in format_report(report)

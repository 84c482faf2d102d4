"""`elasticps scale` of a local job: what it writes where the launcher follows it, and what it
refuses (a whole command, against a real embedded store)."""

from __future__ import annotations

from pathlib import Path

import pytest

from elasticps.cli import main
from elasticps.errors import StoreValueError
from elasticps.store import open_store
from elasticps.store.keys import (
    DESIRED_PSERVERS,
    DESIRED_TRAINERS,
    PSERVER_LAYOUT,
    PServerLayout,
    decode_desired_pservers,
    read_events,
)


def test_scale_asks_the_launcher_for_pservers_and_says_so_on_the_timeline(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"file://{tmp_path}/job.db"
    assert main(["scale", "j", "--store", url, "--pservers", "3"]) == 0
    assert "asked for 3 pserver(s)" in capsys.readouterr().out
    with open_store(url, "j") as store:
        kv = store.get(DESIRED_PSERVERS)
        assert kv is not None
        assert decode_desired_pservers(kv.value) == 3
        assert store.get(DESIRED_TRAINERS) is None
        assert [e.subject for e in read_events(store, 10)] == ["pservers"]


@pytest.mark.parametrize(("argv", "message"), [
    (["--pservers", "0"], "--pservers=0 must be within"),
    ([], "--trainers N and/or --pservers M"),
])
def test_scale_refuses_a_bad_request_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str],
        message: str) -> None:
    url = f"file://{tmp_path}/job.db"
    assert main(["scale", "j", "--store", url, *argv]) != 0
    assert message in capsys.readouterr().err
    with open_store(url, "j") as store:
        assert store.get(DESIRED_PSERVERS) is None


def test_the_layout_and_desired_pservers_records_are_read_strictly() -> None:
    assert PServerLayout.decode(PServerLayout(3, 2).encode(), PSERVER_LAYOUT) == \
        PServerLayout(3, 2)
    for bad in (b'{"shards": 0, "generation": 1}', b'{"shards": 2, "generation": 0}',
                b'{"shards": "2", "generation": 1}', b"[]"):
        with pytest.raises(StoreValueError, match="pserver/layout"):
            PServerLayout.decode(bad, PSERVER_LAYOUT)
    for bad in (b"0", b"-1", b"x", b"12345"):
        with pytest.raises(StoreValueError, match="desired_pservers"):
            decode_desired_pservers(bad)

"""Fuzz: every value a client reads from the store (the codecs of ``store/keys.py``) given any
bytes, or JSON near the real documents; only StoreValueError comes out, and what decodes is
typed and bounded (an address a client would dial is host:port)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from elasticps.errors import StoreValueError
from elasticps.store import keys
from tests.security.fuzz.common import FUZZ, json_values, with_fields

CODECS: dict[str, tuple[Callable[[bytes], Any], dict[str, Any]]] = {
    "process": (lambda raw: keys.ProcessInfo.decode(raw, "master/candidate/x"),
                {"pid": 7, "host": "h"}),
    "master": (lambda raw: keys.MasterAddress.decode(raw),
               {"grpc": "10.0.0.1:7164", "http": "10.0.0.1:8080", "node": "m", "pid": 1,
                "host": "h", "http_scheme": "https", "status_url": "https://10.0.0.1:8080/"}),
    "slot": (lambda raw: keys.PServerSlot.decode(raw, "pserver/slot/0"),
             {"address": "10.0.0.2:7164", "pid": 3, "host": "h"}),
    "trainer": (lambda raw: keys.TrainerRegistration.decode(raw, "trainer/t"),
                {"pid": 4, "host": "h", "leaving": True}),
    "init": (lambda raw: keys.InitMarker.decode(raw, "pserver/init/done"),
             {"by": "t", "what": "initialised", "time": 1.7e9}),
    "progress": (lambda raw: keys.TrainerProgress.decode(raw, "job/progress/t"),
                 {"pass": 1, "samples": 10, "batches": 2, "loss": 0.5, "train_s": 3.0,
                  "tasks": 1, "timers": {"forward": 0.1}}),
}


def _decode(name: str, raw: bytes) -> Any:
    decode = CODECS[name][0]
    try:
        value = decode(raw)
    except StoreValueError:
        return None
    for field in ("grpc", "http", "address"):
        address = getattr(value, field, None)
        if address is not None:  # what a client would dial
            host, _, port = address.rpartition(":")
            assert host
            assert 0 < int(port) < 65536
    return value


@pytest.mark.timeout(60)
@FUZZ
@given(name=st.sampled_from(sorted(CODECS)), data=st.data())
def test_json_near_the_real_documents(name: str, data: st.DataObject) -> None:
    base = CODECS[name][1]
    doc = data.draw(with_fields(base, sorted(base)) | json_values)
    _decode(name, json.dumps(doc).encode())


@pytest.mark.timeout(60)
@FUZZ
@given(name=st.sampled_from(sorted(CODECS)), raw=st.binary(max_size=120))
def test_any_bytes(name: str, raw: bytes) -> None:
    _decode(name, raw)


@pytest.mark.timeout(60)
@FUZZ
@given(raw=st.binary(max_size=40) | st.text(max_size=20).map(str.encode)
       | st.sampled_from([b"12", b"\xc2\xb2", b"1" * 80, b" 3 ", b"-1"]))
def test_desired_trainers_and_slot_keys(raw: bytes) -> None:
    try:
        count = keys.decode_desired_trainers(raw)
    except StoreValueError:
        count = None
    assert count is None or 0 <= count < 10**6
    slot = keys.slot_of("pserver/slot/" + raw.decode(errors="replace"))
    assert slot is None or 0 <= slot < 10**6


@pytest.mark.timeout(60)
@FUZZ
@given(doc=json_values)
def test_the_job_result(doc: Any) -> None:
    class One:
        def get(self, key: str) -> Any:
            return type("KV", (), {"value": json.dumps(doc).encode()})()

    try:
        result = keys.read_result(One())  # type: ignore[arg-type]
    except StoreValueError:
        return
    assert isinstance(result, dict)


@pytest.mark.parametrize("name", sorted(CODECS))
def test_the_real_documents_decode(name: str) -> None:
    assert _decode(name, json.dumps(CODECS[name][1]).encode()) is not None

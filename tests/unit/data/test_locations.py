"""Where a dataset's files may be: chunk paths inside the dataset, schemes a job allows."""

from __future__ import annotations

import pytest

from elasticps.data.locations import check_relative, check_scheme, resolve, schemes_of
from elasticps.errors import DataError


@pytest.mark.parametrize("path", ["part-00000.parquet", "sub/part-1.parquet", "test",
                                  "year=2024/day=01/part.parquet", "vocab.txt"])
def test_relative_paths_inside_the_dataset_resolve_under_it(path: str) -> None:
    assert resolve("s3://bucket/ds/", path) == f"s3://bucket/ds/{path}"


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "http://evil/x",
                                  "file:///etc/passwd", "", ".", "a//b", "a/./b", ".hidden",
                                  "a\\..\\b", "x" * 2000, 7, None, "C:/x"])
def test_anything_else_is_refused(path: object) -> None:
    with pytest.raises(DataError):
        check_relative(path, "chunk")


def test_schemes_of_urls_and_chains() -> None:
    assert schemes_of("/data/ds") == ["file"]
    assert schemes_of("S3://b/k") == ["s3"]
    assert schemes_of("simplecache::s3://b/k") == ["simplecache", "s3"]
    assert check_scheme("/data/ds", ["file"]) == "/data/ds"
    with pytest.raises(DataError, match="PADDLE_DATA_SCHEMES=file"):
        check_scheme("http://host/ds", ["file"])
    with pytest.raises(DataError, match="simplecache"):
        check_scheme("simplecache::s3://b/k", ["file", "s3"])

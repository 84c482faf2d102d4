"""elasticps data convert text: a corpus -> N-gram rows, a vocabulary beside them, a test split."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elasticps.data import open_dataset
from elasticps.data.text_ngram import TextOptions, convert_text, ngram_rows, tokenize
from tests.helpers import run_cli

CORPUS = """The cat sat on the mat.
The dog sat on the log!

A cat's toy: 'the' ball.
the end
"""


def test_tokens_are_lowercased_runs_of_letters_digits_and_inner_apostrophes() -> None:
    import pyarrow as pa

    tokens, counts = tokenize(pa.array(["Hello, World! It's 2nd", "", "'quoted' naïve—dash"]),
                              keep_case=False)
    assert tokens.to_pylist() == ["hello", "world", "it's", "2nd", "quoted", "naïve", "dash"]
    assert counts.tolist() == [4, 0, 3]


def test_rows_are_padded_contexts_and_the_next_word() -> None:
    rows = ngram_rows(np.array([5, 6, 7, 8]), np.array([3, 1]), 3)
    bos, eos = 0, 2
    assert rows.tolist() == [
        [bos, bos, 5], [bos, 5, 6], [5, 6, 7], [6, 7, eos],
        [bos, bos, 8], [bos, 8, eos],
    ]


def test_a_corpus_converts_with_its_vocabulary_and_a_held_out_split(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS)
    out = tmp_path / "words"
    done = run_cli("data", "convert", "text", str(text), "--ngram", "3", "--out", str(out),
                   "--test-fraction", "0.3", "--seed", "1", "--no-progress")
    assert done.returncode == 0, done.stderr
    ds = open_dataset(str(out))
    vocab = (out / ds.manifest.files["vocab"]).read_text().splitlines()
    assert vocab[:3] == ["<s>", "<unk>", "</s>"]
    assert vocab[3] == "the"  # the most frequent training word
    schema = ds.schema
    assert schema.label_kind == "class"
    assert schema.num_classes == len(vocab) == schema.tables["words"].id_space
    assert [c.name for c in schema.columns] == ["w1", "w2"]
    assert {c.ids for c in schema.columns} == {"passthrough"}
    test = ds.split("test")
    assert (out / "test" / test.manifest.files["vocab"]).read_text().splitlines() == vocab
    # Every sentence is in exactly one split: its words plus </s> make its rows.
    words = [line.lower().replace(".", "").replace("!", "").replace(":", "").split()
             for line in CORPUS.splitlines() if line]
    assert ds.num_rows + test.num_rows == sum(len(w) + 1 for w in words)
    assert test.num_rows > 0
    # Read back in words: the training split's sentences, word by word.
    (batch,) = ds.iter_batches(1000)
    said = [vocab[int(i)] for i in batch.label]
    sentences = " ".join(said).split("</s>")
    assert "the dog sat on the log " in [s.lstrip() for s in sentences]
    assert batch.ids["w2"][0] == 0  # <s> before the first word
    # Words only in the held-out sentences are <unk> there.
    (held,) = test.iter_batches(1000)
    assert set(vocab[int(i)] for i in held.label) <= set(vocab)


def test_vocab_size_and_min_count_cap_the_vocabulary(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS)
    report = convert_text([str(text)], str(tmp_path / "w"),
                          TextOptions(ngram=2, vocab_size=5, min_count=1, test_fraction=0.0))
    assert report.vocabulary == ("<s>", "<unk>", "</s>", "the", "on")
    assert report.test_manifest is None
    (batch,) = open_dataset(str(tmp_path / "w")).iter_batches(1000)
    assert int((batch.label == 1).sum()) > 0  # <unk> stands in for the rest
    report = convert_text([str(text)], str(tmp_path / "w2"),
                          TextOptions(ngram=2, min_count=2, test_fraction=0.0))
    assert report.vocabulary == ("<s>", "<unk>", "</s>", "the", "on", "sat")

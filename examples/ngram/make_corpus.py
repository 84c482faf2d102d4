"""Write a text corpus from a planted word model, so the best achievable test perplexity is known.

    python examples/ngram/make_corpus.py --sentences 20000 --out /tmp/words
    elasticps data convert text /tmp/words/corpus.txt --ngram 3 --out /tmp/words/data

writes ``corpus.txt`` (one sentence per line, lowercase words separated by spaces) and
``planted.json`` with the perplexity of the true model on the sentences that ``elasticps data
convert text`` holds out as its test split (with the same ``--test-fraction`` and ``--seed``):
no model of the next word can do better on that test set in expectation.

The true model is a Markov chain over the words and the end of the sentence: a sentence's first
word is drawn from a start distribution, every next token (a word, or ``</s>``) from a
distribution that depends only on the word before it. Words fall into ``--classes`` classes (as
words fall into parts of speech), and the words of a class share their next-token distribution:
a few likely followers drawn from a sparse Dirichlet, mixed with a little of the uniform
distribution so that every word turns up in a corpus of a few thousand sentences, and the
class's probability of ending the sentence. That shared behaviour is what word embeddings learn
(words that behave alike get similar vectors); followers drawn independently for each of 400
words would be a full-rank table that a 32-dimensional embedding cannot hold (we tried: a
trained model stayed at perplexity 43 where counting bigrams reached 32 and the truth 29).

The planted figure counts what the converter's rows ask a model to predict: one row per word,
whose context is the preceding words (``<s>`` before the first), and one row per sentence end,
whose label is ``</s>``. A model that sees the previous word (an N-gram model with N >= 2) can
therefore reach it.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "zu", "pe", "do", "fi", "ga", "hu"]
UNIFORM_SHARE = 0.02  # of every next-word distribution, so that no word is unreachable


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES, int(rng.integers(2, 4)))))
    return sorted(words)


def splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def held_out(lines: int, test_fraction: float, seed: int) -> np.ndarray:
    """The lines ``elasticps data convert text --test-fraction F --seed S`` puts in its test
    split: line i when ``splitmix64((S << 40) + i) / 2**64 < F`` (docs/data.md)."""
    index = np.arange(lines, dtype=np.uint64)
    draw = splitmix64((np.uint64(seed) << np.uint64(40)) + index)
    return draw.astype(np.float64) / 2.0**64 < test_fraction


class MarkovModel:
    """Start distribution over the words; from each word, a distribution over the words and
    the end of the sentence (the last column), shared by the words of its class."""

    def __init__(self, size: int, seed: int, classes: int) -> None:
        rng = np.random.default_rng([seed, 5])
        self.words = vocabulary(size, rng)
        self.start = rng.dirichlet(np.full(size, 0.3))
        self.word_class = rng.integers(0, classes, size)
        followers = rng.dirichlet(np.full(size, 0.03), size=classes)  # sparse rows
        followers = (1 - UNIFORM_SHARE) * followers + UNIFORM_SHARE / size
        stop = rng.uniform(0.06, 0.2, classes)  # sentences of about 8 words
        by_class = np.concatenate([followers * (1 - stop)[:, None], stop[:, None]], axis=1)
        self.next = by_class[self.word_class]

    @property
    def end(self) -> int:
        return len(self.words)

    def sentence(self, rng: np.random.Generator, first: np.ndarray, cumulative: np.ndarray
                 ) -> tuple[list[int], float]:
        """One sentence's word indices and its negative log-likelihood (its words and its end);
        ``first`` and ``cumulative`` are the start and next distributions, cumulated."""
        word = min(int(np.searchsorted(first, rng.random())), self.end - 1)
        sentence, nll = [word], -math.log(self.start[word])
        while True:
            nxt = min(int(np.searchsorted(cumulative[word], rng.random())), self.end)
            nll -= math.log(self.next[word, nxt])
            if nxt == self.end:
                return sentence, nll
            sentence.append(nxt)
            word = nxt

    def sentences(self, count: int, rng: np.random.Generator
                  ) -> tuple[list[list[int]], np.ndarray]:
        first, cumulative = np.cumsum(self.start), np.cumsum(self.next, axis=1)
        drawn = [self.sentence(rng, first, cumulative) for _ in range(count)]
        return [s for s, _ in drawn], np.array([nll for _, nll in drawn])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=20_000)
    parser.add_argument("--vocab", type=int, default=400, help="distinct words")
    parser.add_argument("--classes", type=int, default=20,
                        help="word classes: words of a class have the same followers")
    parser.add_argument("--seed", type=int, default=1, help="the corpus's seed")
    parser.add_argument("--test-fraction", type=float, default=0.1,
                        help="as convert text's --test-fraction (default 0.1)")
    parser.add_argument("--split-seed", type=int, default=0,
                        help="as convert text's --seed (default 0)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = MarkovModel(args.vocab, args.seed, args.classes)
    sentences, nll = model.sentences(args.sentences, np.random.default_rng([args.seed, 1]))
    (out / "corpus.txt").write_text(
        "\n".join(" ".join(model.words[w] for w in s) for s in sentences) + "\n")
    test = held_out(len(sentences), args.test_fraction, args.split_seed)
    tokens = np.array([len(s) + 1 for s in sentences])  # its words and its </s>
    train_words = {w for s, t in zip(sentences, test, strict=True) if not t for w in s}
    unseen = sum(w not in train_words for s, t in zip(sentences, test, strict=True) if t
                 for w in s)
    best = math.exp(nll[test].sum() / tokens[test].sum())
    (out / "planted.json").write_text(json.dumps({
        "best_test_perplexity": best, "test_sentences": int(test.sum()),
        "test_tokens": int(tokens[test].sum()), "test_words_unseen_in_training": unseen,
        "vocab": args.vocab, "classes": args.classes, "seed": args.seed,
        "test_fraction": args.test_fraction, "split_seed": args.split_seed}))
    print(f"wrote {out}/corpus.txt ({len(sentences):,} sentences, {int(tokens.sum()):,} "
          f"tokens with </s>); best achievable test perplexity {best:.2f} over "
          f"{int(test.sum()):,} held-out sentences ({args.vocab} words)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

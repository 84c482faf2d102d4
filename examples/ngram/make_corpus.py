"""Write a text corpus from a planted word model, so the best achievable perplexity is known.

    python examples/ngram/make_corpus.py --sentences 20000 --out /tmp/words

writes ``train.txt`` and ``test.txt`` (one sentence per line, lowercase words separated by
spaces) and ``planted.json`` with the test set's perplexity under the true model: no model of
the next word can do better on that test set in expectation. The true model is a Markov chain:
a sentence's first word is drawn from a start distribution, every next word from a
distribution that depends on the word before it (each word has a few likely followers, drawn
from a sparse Dirichlet). Sentence lengths are drawn independently (an end of sentence is not
predicted), so a model that sees the previous word (an N-gram model with N >= 2) can reach the
planted perplexity.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "zu", "pe", "do", "fi", "ga", "hu"]


def vocabulary(size: int, rng: np.random.Generator) -> list[str]:
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rng.choice(SYLLABLES, int(rng.integers(2, 4)))))
    return sorted(words)


class MarkovModel:
    def __init__(self, size: int, seed: int) -> None:
        rng = np.random.default_rng([seed, 5])
        self.words = vocabulary(size, rng)
        self.start = rng.dirichlet(np.full(size, 0.3))
        self.next = rng.dirichlet(np.full(size, 0.03), size=size)  # sparse rows

    def sentences(self, count: int, rng: np.random.Generator) -> tuple[list[list[int]], float]:
        """``count`` sentences as word indices, and their summed negative log-likelihood."""
        out: list[list[int]] = []
        nll = 0.0
        cumulative = np.cumsum(self.next, axis=1)
        for length in rng.integers(4, 13, count):
            word = int(rng.choice(len(self.words), p=self.start))
            sentence = [word]
            nll -= math.log(self.start[word])
            for u in rng.random(int(length) - 1):
                nxt = min(int(np.searchsorted(cumulative[word], u)), len(self.words) - 1)
                nll -= math.log(self.next[word, nxt])
                sentence.append(nxt)
                word = nxt
            out.append(sentence)
        return out, nll


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=20_000, help="training sentences")
    parser.add_argument("--test-sentences", type=int, default=None, help="(sentences/10)")
    parser.add_argument("--vocab", type=int, default=400, help="distinct words")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = MarkovModel(args.vocab, args.seed)
    best = None
    for name, count, stream in (("train", args.sentences, 1),
                                ("test", args.test_sentences or max(500, args.sentences // 10),
                                 2)):
        sentences, nll = model.sentences(count, np.random.default_rng([args.seed, stream]))
        text = "\n".join(" ".join(model.words[w] for w in s) for s in sentences) + "\n"
        (out / f"{name}.txt").write_text(text)
        if name == "test":
            best = math.exp(nll / sum(len(s) for s in sentences))
    (out / "planted.json").write_text(json.dumps({"best_test_perplexity": best,
                                                  "vocab": args.vocab, "seed": args.seed}))
    print(f"wrote {out}/train.txt and {out}/test.txt; best achievable test perplexity "
          f"{best:.2f} over {args.vocab} words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

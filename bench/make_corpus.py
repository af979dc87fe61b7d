#!/usr/bin/env python3
"""The bench corpus: 2,000 English-like sentences of 5-60 words, generated deterministically
(Python's seeded Mersenne Twister) from a fixed vocabulary. Writes one sentence per line.

Usage: python bench/make_corpus.py > bench/corpus.txt
"""

import random
import sys

WORDS = """the a database stores vectors for every row and search finds similar sentences quickly while
users write new documents about coffee trains music weather tests queries passages models tables
indexes servers networks cities rivers mountains children students teachers books libraries museums
engineers build reliable systems that answer questions in milliseconds under heavy load each night
when the market opens prices move up or down by small amounts before lunch after dinner during
winter summer spring autumn people travel walk read cook play learn think remember forget explain
""".split()

PUNCT = [".", ".", ".", "?", "!"]


def main() -> int:
    rng = random.Random(20261122)
    out = []
    for _ in range(2000):
        n = rng.randint(5, 60)
        words = [rng.choice(WORDS) for _ in range(n)]
        words[0] = words[0].capitalize()
        out.append(" ".join(words) + rng.choice(PUNCT))
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

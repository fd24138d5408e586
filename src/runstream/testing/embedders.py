"""A deterministic local embedder with no weights: hashed words and character n-grams.

:class:`HashEmbedder` maps a text to a fixed-size vector by feature hashing: every lowercased
word and every character trigram of each word (padded with spaces) adds ``±1`` at a position
given by a hash of the feature (the first 8 bytes of its SHA-256, little-endian: the bucket is
that number modulo the dimension, the sign its top bit), and the vector is scaled to unit
length. The conformance runner's copy (``tests/conformance_extra/mastra-runner-semantic-recall.patch``)
computes the same vectors in JavaScript, so Mastra and runstream recall the same messages. Texts that share words and word pieces get a high cosine similarity ("cats" is near
"cat", "Paris" near "paris"), the same text always the same vector, on every machine. Good for
tests, demos and examples; not a language model (synonyms are not near).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from runstream.vector.embedders import BatchingEmbedder

_WORD = re.compile(r"\w+", re.UNICODE)


class HashEmbedder(BatchingEmbedder):
    """``HashEmbedder(dimension=256)``: ``await embedder.embed(["text", ...])``."""

    def __init__(self, dimension: int = 256, *, max_batch_size: int = 256, ngram: int = 3) -> None:
        super().__init__(
            f"hash-{dimension}", dimension=dimension, max_batch_size=max_batch_size, max_retries=0
        )
        self.calls: list[list[str]] = []
        """Every batch the embedder was asked to embed (tests read it)."""
        self._size = dimension
        self._ngram = ngram

    def vector(self, text: str) -> list[float]:
        values = [0.0] * self._size
        for word in _WORD.findall(text.lower()):
            features = [f"w:{word}"]
            padded = f" {word} "
            features += [
                f"g:{padded[i : i + self._ngram]}" for i in range(max(1, len(padded) - self._ngram + 1))
            ]
            for feature in features:
                number = int.from_bytes(hashlib.sha256(feature.encode()).digest()[:8], "little")
                values[number % self._size] += 1.0 if number >> 63 else -1.0
        norm = math.sqrt(sum(v * v for v in values))
        return [v / norm for v in values] if norm else values

    async def _call(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self.vector(text) for text in texts]

    def embed_now(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors, without awaiting (scripts and benchmarks)."""
        return [self.vector(text) for text in texts]


__all__ = ["HashEmbedder"]

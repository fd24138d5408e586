"""Random ids (``str(uuid.uuid4())`` form) for runs, messages and responses, made cheaply.

``uuid.uuid4()`` asks the OS for 16 random bytes and builds a ``UUID`` object through several
Python-level steps; a run makes two ids before its first chunk and one per model step. Here the
bytes come from ``os.urandom`` 64 ids at a time and the version and variant bits are set on them
directly: the same randomness and the same string, a few times cheaper.
"""

from __future__ import annotations

import os

_BATCH = 64
_pool: list[bytes] = []
"""Random 16-byte blocks not used yet (``list.pop`` hands each out once, across threads)."""


def _refill() -> None:
    block = os.urandom(16 * _BATCH)
    _pool.extend(block[i : i + 16] for i in range(0, len(block), 16))


os.register_at_fork(after_in_child=_pool.clear)  # a child process never reuses its parent's


def new_id() -> str:
    """A random (version 4) UUID as a string, exactly as ``str(uuid.uuid4())`` gives it."""
    try:
        raw = bytearray(_pool.pop())
    except IndexError:
        _refill()
        raw = bytearray(_pool.pop())
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"

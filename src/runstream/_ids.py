"""Random ids (``str(uuid.uuid4())`` form) for runs, messages and responses, made cheaply.

``uuid.uuid4()`` asks the OS for 16 random bytes and builds a ``UUID`` object through several
Python-level steps; a run makes three ids on its way to its first text. Here the random bytes
come from ``os.urandom`` 64 ids at a time, as hex, and each id is that hex with the version and
variant digits set: the same randomness and the same string, a few times cheaper.
"""

from __future__ import annotations

import os

_BATCH = 64
_pool: list[str] = []
"""Random 32-digit hex strings not used yet (``list.pop`` hands each out once, across threads)."""

_VARIANT = {digit: "89ab"[int(digit, 16) & 0x3] for digit in "0123456789abcdef"}
"""A random hex digit with its top two bits set to the RFC 4122 variant (``10``)."""


def _refill() -> None:
    digits = os.urandom(16 * _BATCH).hex()
    _pool.extend(digits[i : i + 32] for i in range(0, len(digits), 32))


os.register_at_fork(after_in_child=_pool.clear)  # a child process never reuses its parent's


def new_id() -> str:
    """A random (version 4) UUID as a string, exactly as ``str(uuid.uuid4())`` gives it."""
    try:
        h = _pool.pop()
    except IndexError:
        _refill()
        h = _pool.pop()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"

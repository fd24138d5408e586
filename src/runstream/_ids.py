"""Random ids (``str(uuid.uuid4())`` form) for runs, messages and responses.

``str(uuid.uuid4())`` builds a ``UUID`` object through several Python-level steps, and each
``os.urandom`` call is a system call (0.7 µs on a virtual machine, more than the rest of an id);
a tool step makes one or two ids, a run three before its first text. Here the operating system's
random bytes are drawn 64 ids at a time (one system call), kept as hex text, and each id is its
32 digits with the version and variant digits set: the same randomness and the same string.

The draw is handed out by a C-level iterator, so two threads never get the same id (``next``
on it is one step under the GIL), and a forked child drops the parent's draw (its ids would
repeat the parent's).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

_VARIANT = {digit: "89ab"[int(digit, 16) & 0x3] for digit in "0123456789abcdef"}
"""A random hex digit with its top two bits set to the RFC 4122 variant (``10``)."""

_IDS_PER_DRAW = 64
_DIGITS = 32
_SLICES = tuple(slice(i * _DIGITS, (i + 1) * _DIGITS) for i in range(_IDS_PER_DRAW))

_draw: Iterator[str] = iter(())
"""The current draw's ids still to hand out, as 32 random hex digits each."""


def _new_draw() -> Iterator[str]:
    global _draw
    digits = os.urandom(_IDS_PER_DRAW * _DIGITS // 2).hex()
    _draw = map(digits.__getitem__, _SLICES)
    return _draw


def _forget_draw() -> None:
    global _draw
    _draw = iter(())


os.register_at_fork(after_in_child=_forget_draw)


def new_id() -> str:
    """A random (version 4) UUID as a string, exactly as ``str(uuid.uuid4())`` gives it."""
    h = next(_draw, None) or next(_new_draw())
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:]}"

"""A small asyncio abort signal, shared by the loop, tools and model providers.

Modelled on the web platform's ``AbortSignal``: one controller fires it once, with a reason;
anyone can check ``aborted``, await ``wait()``, or register a callback. It deliberately depends
on nothing else in runstream, so providers and tools can use it without importing the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from runstream.errors import RunstreamError


class AbortError(RunstreamError):
    """Raised by code that stops because its abort signal fired."""

    name = "AbortError"

    def __init__(self, reason: object = None) -> None:
        super().__init__(str(reason) if reason is not None else "This operation was aborted")
        self.reason = reason


class AbortSignal:
    """Fires once; carries the reason it fired with."""

    __slots__ = ("_callbacks", "_event", "aborted", "reason")

    def __init__(self) -> None:
        self.aborted = False
        self.reason: object = None
        self._callbacks: list[Callable[[object], Any]] = []
        self._event: asyncio.Event | None = None

    def add_listener(self, callback: Callable[[object], object]) -> Callable[[], None]:
        """Call ``callback(reason)`` when the signal fires (at once if it already has).

        Returns a function that removes the listener again.
        """
        if self.aborted:
            callback(self.reason)
            return lambda: None
        self._callbacks.append(callback)

        def remove() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return remove

    async def wait(self) -> object:
        """Wait until the signal fires; returns its reason."""
        if not self.aborted:
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        return self.reason

    def raise_if_aborted(self) -> None:
        if self.aborted:
            raise AbortError(self.reason)

    def _fire(self, reason: object) -> None:
        if self.aborted:
            return
        self.aborted = True
        self.reason = reason
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(reason)

    @classmethod
    def any(cls, *signals: AbortSignal | None) -> AbortSignal:
        """A signal that fires as soon as any of ``signals`` fires."""
        combined = cls()
        for signal in signals:
            if signal is not None:
                signal.add_listener(combined._fire)
        return combined


async def sleep(seconds: float, signal: AbortSignal | None = None) -> bool:
    """Sleep, waking early if ``signal`` fires; returns whether it did."""
    if signal is None:
        await asyncio.sleep(seconds)
        return False
    if signal.aborted:
        return True
    try:
        await asyncio.wait_for(signal.wait(), seconds)
    except TimeoutError:
        return False
    return True


class AbortController:
    """Owns an :class:`AbortSignal` and is the only one that can fire it."""

    __slots__ = ("signal",)

    def __init__(self) -> None:
        self.signal = AbortSignal()

    def abort(self, reason: object = None) -> None:
        self.signal._fire(reason if reason is not None else AbortError())

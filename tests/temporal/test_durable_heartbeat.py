"""A durable step's heartbeat loop ends with its step, whatever the Redis client under it does
with cancellation (one that swallows ``CancelledError`` mid-command kept a finished step
heartbeating until its 1-hour timeout)."""

from __future__ import annotations

import asyncio

from runstream.abort import AbortController
from runstream.durable.activities import watch_step


async def test_the_heartbeat_stops_when_the_step_ends_under_a_client_that_swallows_cancellation() -> None:
    beats = 0
    in_command = asyncio.Event()
    swallowed = 0

    def beat() -> None:
        nonlocal beats
        beats += 1

    async def abort_requested() -> str | None:
        """A Redis call whose client turns the cancellation into an ordinary answer."""
        nonlocal swallowed
        in_command.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            swallowed += 1
        return None

    done = asyncio.Event()
    watch = asyncio.create_task(watch_step(beat, abort_requested, AbortController(), 0.01, done))
    await asyncio.wait_for(in_command.wait(), 5)
    # the step ends: as run_step's finally does
    done.set()
    watch.cancel()
    await asyncio.wait_for(watch, 5)  # ended, though its cancellation was swallowed
    assert swallowed == 1
    assert beats == 1
    assert watch.done() and not watch.cancelled()


async def test_the_heartbeat_beats_and_aborts_the_run_when_asked() -> None:
    beats = 0
    asked = asyncio.Event()

    def beat() -> None:
        nonlocal beats
        beats += 1
        if beats == 3:
            asked.set()

    async def abort_requested() -> str | None:
        return "client went away" if asked.is_set() else None

    controller = AbortController()
    aborted = asyncio.Event()
    controller.signal.add_listener(lambda _reason: aborted.set())
    done = asyncio.Event()
    watch = asyncio.create_task(watch_step(beat, abort_requested, controller, 0.001, done))
    await asyncio.wait_for(aborted.wait(), 5)
    assert controller.signal.reason == "client went away"
    assert beats >= 3
    done.set()
    watch.cancel()
    await asyncio.gather(watch, return_exceptions=True)
    assert watch.done()

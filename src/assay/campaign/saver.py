"""Group commit of a campaign's finished runs.

A store transaction costs far more CPU than the rows in it (on SQLite about 2-3 ms for BEGIN,
the statements and COMMIT, against well under 1 ms per run's rows), so runs that finish while
another save is being written are written together in the next transaction
(`Store.save_runs`). Nothing waits for company: a run that finishes alone is written at once,
and each run's save returns only once its run is committed, as before. One writer at a time
runs in a worker thread, off the event loop.

A run whose task is cancelled (Ctrl-C) while its save is queued or being written is still
stored: the write goes on, and `RunSaver.flush` (awaited as a campaign ends) waits for every
queued save.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from assay.record import Event, RunRecord
from assay.store import Store
from assay.store.saves import SAVE_BATCH, SaveOutcome


class RunSaver:
    """Saves runs to one store, writing those queued together in one transaction."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queued: list[tuple[RunRecord, Sequence[Event], asyncio.Future[bool]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def save(self, record: RunRecord, events: Sequence[Event]) -> bool:
        """Store the run (`Store.save_run`): True when stored, False when its key was
        already finished; raises what its save raised."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self._queued.append((record, events, done))
        if self._writer is None or self._writer.done():
            self._writer = loop.create_task(self._write_queued())
        return await asyncio.shield(done)

    async def flush(self) -> None:
        """Wait until every queued save is written."""
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def _write_queued(self) -> None:
        while self._queued:
            batch = self._queued[:SAVE_BATCH]
            del self._queued[:SAVE_BATCH]
            try:
                outcomes = await asyncio.to_thread(self.store.save_runs, [(r, e) for r, e, _ in batch])
            except Exception as e:  # save_runs returns each run's error; this is the thread failing to run it
                outcomes = [SaveOutcome(r, ev) for r, ev, _ in batch]
                for o in outcomes:
                    o.error = e
            for (_r, _e, done), out in zip(batch, outcomes, strict=True):
                if out.error is not None:
                    done.set_exception(out.error)
                    # The waiter may have been cancelled (Ctrl-C): mark the error as seen so asyncio
                    # does not log it again; a waiter still there gets it raised all the same.
                    done.add_done_callback(_seen)
                else:
                    done.set_result(bool(out.stored))


def _seen(f: asyncio.Future[bool]) -> None:
    f.exception()

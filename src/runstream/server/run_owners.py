"""Who owns a run: recorded in storage once, when the server creates the run, and never changed.

A run id is claimed before the run starts (``Storage.claim_snapshot``: of racing claims exactly
one wins), so a caller who learns another caller's run id (it is in every chunk) cannot take the
run over by starting a run with the same id. Ids are claimed as stored: a confined caller's
in its own namespace (:mod:`runstream.server.run_ids`), where another tenant's id is simply
another run; a clash within a namespace is refused with 409 and nothing runs.
The record lives in the runtime's storage, so it survives a restart and every process sharing the
storage sees it. Every route that acts on a run (approve, decline, resume, suspended-run
listings) asks :meth:`RunOwners.check` first; another resource's run is a 404, like a missing one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TypedDict

from runstream._clock import iso_datetime
from runstream._json import JsonMapping
from runstream.server.auth import Principal
from runstream.server.errors import ApiError
from runstream.server.run_ids import run_key
from runstream.storage import Storage
from runstream.storage.records import utc_now

NAMESPACE = "server-run-owners"


class RunOwnerJson(TypedDict):
    principalId: str
    resourceId: str | None


@dataclass(frozen=True, slots=True)
class RunOwner:
    principal_id: str
    resource_id: str | None

    def to_json(self) -> RunOwnerJson:
        return {"principalId": self.principal_id, "resourceId": self.resource_id}

    @classmethod
    def from_json(cls, data: JsonMapping) -> RunOwner:
        resource = data.get("resourceId")
        return cls(str(data.get("principalId")), resource if isinstance(resource, str) else None)


class RunOwners:
    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    async def claim(self, run_id: str | None, principal: Principal, resource_id: str | None) -> str:
        """Record ``principal`` (confined to ``resource_id``) as the owner of a new run and return
        the id it is stored under (:func:`~runstream.server.run_ids.run_key`: a confined
        caller's ids are its own; a fresh one when the client sent none). 409 when another
        owner of the same namespace (an unconfined caller, or a principal of the same
        resource) has the id."""
        run_id = run_key(principal, run_id or str(uuid.uuid4()))
        owner = RunOwner(principal.id, resource_id)
        record = {**owner.to_json(), "createdAt": iso_datetime(utc_now())}
        stored = RunOwner.from_json(await self.storage.claim_snapshot(NAMESPACE, run_id, record))
        if stored != owner:
            raise ApiError(409, f"Run id {run_id} is already in use: send another runId, or none")
        return run_id

    async def owner(self, run_id: str) -> RunOwner | None:
        data = await self.storage.load_snapshot(NAMESPACE, run_id)
        return None if data is None else RunOwner.from_json(data)

    async def check(self, run_id: str, principal: Principal) -> RunOwner | None:
        """The run's owner, or 404 if ``principal`` may not act on the run.

        A run the server did not create (started in Python code) has no owner record: only an
        unconfined principal may act on it.
        """
        owner = await self.owner(run_id)
        if not principal.owns(owner.resource_id if owner is not None else None):
            raise ApiError(404, f"Run {run_id} not found")
        return owner

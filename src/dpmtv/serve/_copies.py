"""What each copy of the server loads when one command runs several (Ray Serve replicas, worker
processes): its spec, the loading with ``dpmtv serve``'s checks, and the response header that
names the copy that answered."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpmtv.models.loading import LoadOptions, load_options
from dpmtv.serve._settings import ServeSettings

if TYPE_CHECKING:
    from dpmtv.serve._served import ServedModel

REPLICA_HEADER = "x-dpmtv-replica"


@dataclass(frozen=True)
class ReplicaSpec:
    """What each copy (replica or worker) loads: the arguments of
    :func:`dpmtv.serve.load_served_model`, the command's model options (revision, adapter spec and
    weights, remote code, attention), the server's settings and torch's thread count (None:
    torch's default in the copy)."""

    model: str
    vectors: tuple[tuple[str, Path], ...]
    settings: ServeSettings
    dtype: str = "float32"
    device: str = "cpu"
    patch_mode: str | None = None
    threads: int | None = None
    load: LoadOptions = field(default_factory=LoadOptions)


def load_copy(spec: ReplicaSpec) -> ServedModel:
    """The model and vectors one copy of the server loads, with ``dpmtv serve``'s checks (a
    vector that fails them raises), its torch threads set first."""
    import torch

    from dpmtv.serve import load_served_model

    if spec.threads is not None:
        torch.set_num_threads(spec.threads)
    with load_options(**dataclasses.asdict(spec.load)):  # the model the command checked
        return load_served_model(
            spec.model,
            spec.vectors,
            dtype=spec.dtype,
            device=spec.device,
            patch_mode=spec.patch_mode,
            trusted_keys=spec.settings.trusted_keys,
        )


class CopyHeader:
    """Pure ASGI middleware naming the server copy (a Ray replica, a worker process) that answered
    in one header of every HTTP response (streams included)."""

    def __init__(self, app: Any, replica: str, header: str = REPLICA_HEADER) -> None:
        self.app, self.replica, self.header = app, replica.encode(), header.encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                message = {
                    **message,
                    "headers": [*message.get("headers", []), (self.header, self.replica)],
                }
            await send(message)

        await self.app(scope, receive, send_with_id)

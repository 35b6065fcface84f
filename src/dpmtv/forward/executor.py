"""Where per-chunk work runs: in this process (:class:`LocalExecutor`) or on Ray workers
(:class:`dpmtv.distributed.RayExecutor`), and the protocol of that work, a :class:`ChunkTask`
that is a function of one chunk's records at a time. The tasks themselves live with their callers:
:class:`dpmtv.pipeline.tasks.ClippedSum` (the build's release), :class:`~dpmtv.pipeline.tasks.ClippedRows`
(the sensitivity audit) and :class:`dpmtv.selection.private.HeadVotes` (private selection's votes).
An executor only moves chunks and results: it never calls back into the pipeline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from dpmtv.data.records import Record
from dpmtv.privacy import Partition

if TYPE_CHECKING:
    from dpmtv.models.loading import LoadedModel

__all__ = [
    "ChunkTask",
    "Executor",
    "LocalExecutor",
    "ModelSource",
]


@dataclass(frozen=True)
class ModelSource:
    """How a worker loads the driver's model (once per worker): the arguments of
    :func:`dpmtv.models.loading.load_model`. On a cluster the checkpoint folder must exist at the
    same path on every node; workers check that they loaded the same weights as the driver."""

    name_or_path: str
    dtype: str = "float32"
    device: str = "cpu"
    adapter_spec: str | None = None
    trust_remote_code: bool = False

    def load(self) -> LoadedModel:
        from dpmtv.models.loading import load_model

        return load_model(
            self.name_or_path,
            dtype=self.dtype,
            device=self.device,
            adapter_spec=self.adapter_spec,
            trust_remote_code=self.trust_remote_code,
        )


class ChunkTask(Protocol):
    """Work on some chunks, all of its parameters public (it is sent to workers).

    ``run`` gets a record list and a partition of it (a worker: one batch of chunks, their ids
    renumbered from 0) and must treat each chunk on its own — one forward pass per chunk — so that
    its result for a chunk is a function of that chunk's records alone. It covers the non-empty
    chunks only (an empty chunk contributes nothing, and executors send none). ``combine`` joins
    the results of consecutive batches, given in chunk order, into the result for all chunks.
    """

    @property
    def shots_per_chunk(self) -> int: ...  # records per chunk that travel to a worker

    @property
    def description(self) -> str: ...  # for the progress bar

    def run(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> Any: ...

    def combine(self, results: list[Any]) -> Any: ...

    # Optional: ``check_batch(value, *, batch_id, num_chunks)``, the driver's check of one batch's
    # result from a worker (raises DistributedError); ClippedSum checks its sum's norm.


class Executor(Protocol):
    workers: int

    def run(
        self,
        loaded: LoadedModel,
        records: Sequence[Record],
        partition: Partition,
        task: ChunkTask,
        *,
        progress: bool,
    ) -> Any:
        """``task``'s result for all of ``partition``'s non-empty chunks."""
        ...


class LocalExecutor:
    """Runs a task in this process, chunk after chunk (the default)."""

    workers = 1

    def run(
        self,
        loaded: LoadedModel,
        records: Sequence[Record],
        partition: Partition,
        task: ChunkTask,
        *,
        progress: bool = False,
    ) -> Any:
        return task.combine([task.run(loaded, records, partition, progress=progress)])

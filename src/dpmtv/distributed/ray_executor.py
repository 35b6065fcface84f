"""Distributed chunk work on Ray: actors that load the model once and run a
:class:`~dpmtv.forward.executor.ChunkTask` (the build's clipped sum, the audit's per-chunk
vectors, private selection's votes) on batches of chunks.

The driver (this process) keeps the partition and its key; it sends each actor batches of chunk
contents (:class:`~dpmtv.distributed.batches.ChunkBatch`), at most one batch in flight per
actor, so faster workers take more batches. An actor returns the task's result for its batch and
the chunk ids covered. When an actor dies (node lost, process killed, out of memory), Ray
restarts it (the model is loaded again) and the driver sends the lost batch again; a batch's
result is kept only from the attempt that answered, and the driver checks that the answers cover
every chunk id exactly once before combining them in batch order. Noise is never drawn here: the
build adds it once, on the driver, to the mean of the sum; selection noises the histogram of the
votes, on the driver.

Every answer is checked before it is kept: a batch sum of ``n`` chunks whose layer ``l`` has an
L2 norm above ``n·C_l`` (so the whole sum above ``n·‖C‖``, ``‖C‖ = sqrt(Σ_l C_l²)``) cannot come
from clipped chunks, and stops the build before its noise (the task's ``check_batch``).

Ray's own task retries are off (``max_task_retries=0``) so that every resend is the driver's,
counted in :attr:`RayExecutor.attempts`. The task goes with each batch by value while it is under
Ray's inline limit, so that no object of the run lives in a node's object store: the driver of a
run whose local raylet dies then still gets its answers or a Ray error, where an object it had
put there made Ray end the process without a word. A batch's result is small (a sum: the selected heads'
width, float64; votes: a few ids per chunk) and is dropped as soon as it is combined; it travels
in Ray's memory (objects under Ray's inline limit, 100 KiB by default, never reach the shared
object store, which may spill to disk under memory pressure — keep the released head set and
``chunks_per_batch`` moderate, or the object store roomy, for the audit's per-chunk vectors).
"""

from __future__ import annotations

import contextlib
import pickle
import time
from collections import Counter, deque
from typing import Any

from dpmtv._progress import progress_bar
from dpmtv.distributed.batches import BatchResult, check_coverage, split_batches
from dpmtv.distributed.network import wait_for_head
from dpmtv.errors import DistributedError, DpmtvError, ParameterError
from dpmtv.forward._prepare import ReusedWorkers
from dpmtv.forward.executor import ChunkTask, ModelSource

__all__ = ["INSTALL_LINE", "ChunkWorker", "RayExecutor", "import_ray"]

INSTALL_LINE = "pip install -e '.[ray]' in the dpmtv source checkout"
# Ray's default max_direct_call_object_size: larger arguments go through the object store
_INLINE_BYTES = 100 * 1024


def import_ray():
    """The ``ray`` module, or a one-line error with the install line."""
    try:
        import ray
    except ImportError:
        raise DistributedError(f"distributed builds need the ray extra: {INSTALL_LINE}") from None
    return ray


class ChunkWorker:
    """A Ray actor's code: load the model once, then run the tasks' batches sent to it. Its
    prepare workers (:mod:`dpmtv.forward._prepare`) are forked at its first batch and serve the next
    ones; they exit with the actor (their command pipes close) or at :meth:`close`."""

    def __init__(self, source: ModelSource):
        self._loaded = source.load()
        self._prepare_workers = ReusedWorkers()

    def identity(self) -> dict[str, Any]:
        from dpmtv.models.fingerprint import model_identity

        return model_identity(self._loaded.adapter, self._loaded.name_or_path)

    def run(self, task: ChunkTask, batch) -> BatchResult:
        records, partition = batch.as_partition()
        with self._prepare_workers.active():
            value = task.run(self._loaded, records, partition, progress=False)
        return BatchResult(batch.batch_id, batch.chunk_ids, value)

    def close(self) -> None:
        """End the prepare workers (an actor that is killed ends them by exiting)."""
        self._prepare_workers.close()


class RayExecutor:
    """Runs chunk tasks on ``workers`` Ray actors (use as a context manager; the actors stay up
    between tasks, so a build's private selection and release share them).

    ``address``: "auto" joins the Ray cluster this machine knows (``RAY_ADDRESS`` or one started
    with ``ray start``) or starts a local one; anything else is a cluster address, which must
    answer within ``connect_timeout_s`` seconds. A Ray that is already initialised in this
    process is used as it is. ``chunks_per_batch`` trades scheduling
    overhead for balance and for how much work a lost worker costs. ``worker_class`` is for
    subclasses of :class:`ChunkWorker` (tests inject faults with it).
    """

    def __init__(
        self,
        source: ModelSource,
        *,
        workers: int,
        address: str = "auto",
        gpus_per_worker: float = 0.0,
        cpus_per_worker: float = 1.0,
        chunks_per_batch: int = 4,
        max_attempts: int = 3,
        worker_class: type = ChunkWorker,
        connect_timeout_s: float = 30.0,
    ):
        if workers < 1 or max_attempts < 1 or gpus_per_worker < 0:
            raise ParameterError(
                f"workers ({workers}) and max_attempts ({max_attempts}) must be >= 1 and "
                f"gpus_per_worker ({gpus_per_worker}) >= 0"
            )
        self._ray = import_ray()
        self.source, self.workers, self.address = source, workers, address
        self._options = {"num_cpus": cpus_per_worker, "num_gpus": gpus_per_worker}
        self.chunks_per_batch, self.max_attempts = chunks_per_batch, max_attempts
        self.connect_timeout_s = connect_timeout_s
        self._worker_class = worker_class
        self.actors: list[Any] = []
        self._started_ray = False
        self._identity: dict[str, Any] = {}
        self.attempts: Counter[int] = Counter()  # batch id -> times sent (last run)

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Stop the actors, and Ray if this executor started it. Best effort: after a failure
        (a lost node, a dead raylet) the first error stays the one reported."""
        for actor in self.actors:
            with contextlib.suppress(Exception):  # the actor or its node is already gone
                self._ray.kill(actor)
        self.actors = []
        if self._started_ray:
            self._started_ray = False
            self._ray.shutdown()

    def run(self, loaded, records, partition, task: ChunkTask, *, progress: bool = False):
        """``task``'s result for every chunk (module docstring for how)."""
        self.start(loaded)
        batches = split_batches(
            records, partition, shots_per_chunk=task.shots_per_chunk, chunks_per_batch=self.chunks_per_batch
        )
        small = len(pickle.dumps(task)) < _INLINE_BYTES  # module docstring: no object in the store
        task_ref = task if small else self._ray.put(task)  # a large task: sent once, shared
        self.attempts = Counter()
        description = f"{task.description} on {self.workers} workers"
        sent = [chunk_id for batch in batches for chunk_id in batch.chunk_ids]
        with progress_bar(description, len(sent), enabled=progress) as advance:
            parts = self._run(batches, task, task_ref, advance)
        check_coverage(parts, chunk_ids=sent)
        return task.combine([part.value for part in sorted(parts, key=lambda part: part.batch_id)])

    def _run(self, batches, task: ChunkTask, task_ref, advance) -> list[BatchResult]:
        """Send each batch to an idle actor; resend a batch whose actor died, to the first actor
        idle again (a dead one is restarted by Ray and probed before it gets work); keep one
        answer per batch."""
        ray = self._ray
        pending, idle, in_flight = deque(batches), list(self.actors), {}
        answers: dict[int, BatchResult] = {}
        while pending or any(batch is not None for batch, _ in in_flight.values()):
            while pending and idle:
                batch, actor = pending.popleft(), idle.pop()
                self.attempts[batch.batch_id] += 1
                in_flight[actor.run.remote(task_ref, batch)] = (batch, actor)
            (ready,), _ = ray.wait(list(in_flight), num_returns=1)
            batch, actor = in_flight.pop(ready)
            if batch is None:  # a restart probe: the actor is back, or still restarting
                if self._restarted(ready):
                    idle.append(actor)
                else:
                    in_flight[actor.identity.remote()] = (None, actor)
                continue
            part = self._answer(ready, batch)
            if part is None:  # the actor died: its batch goes back, the actor gets probed
                pending.appendleft(batch)
                in_flight[actor.identity.remote()] = (None, actor)
                continue
            idle.append(actor)
            if part.batch_id in answers or part.chunk_ids != batch.chunk_ids:
                raise DistributedError(f"batch {batch.batch_id} was answered twice or for other chunks")
            check = getattr(task, "check_batch", None)
            if check is not None:
                check(part.value, batch_id=batch.batch_id, num_chunks=len(batch.chunk_ids))
            answers[part.batch_id] = part
            advance(len(batch.chunk_ids))
        return list(answers.values())

    def _restarted(self, probe) -> bool:
        """True once a restarted actor answers (with the driver's model); False while Ray is still
        restarting it. An actor that cannot restart any more raises."""
        exceptions = self._ray.exceptions
        try:
            identity = self._ray.get(probe)
        except exceptions.ActorUnavailableError:
            time.sleep(0.2)
            return False
        except exceptions.RayActorError as exc:
            raise DistributedError(
                f"a Ray worker died and could not be restarted ({type(exc).__name__})"
            ) from None
        _check_same_model(self._identity, [identity])
        return True

    def _answer(self, ref, batch) -> BatchResult | None:
        """The batch's result, or None when its worker died (and it may be sent again)."""
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(ref)
        except (exceptions.RayActorError, exceptions.WorkerCrashedError) as exc:
            if self.attempts[batch.batch_id] >= self.max_attempts:
                raise DistributedError(
                    f"batch {batch.batch_id}: its worker died {self.max_attempts} times "
                    f"({type(exc).__name__})"
                ) from None
            return None
        except exceptions.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, DpmtvError):  # a bad record or NaN on a worker: the same error
                raise cause from None
            raise
        except exceptions.RayError as exc:  # a lost object, node or raylet: Ray cannot go on
            raise DistributedError(f"batch {batch.batch_id}: Ray failed ({_first_line(exc)})") from None

    def start(self, loaded) -> None:
        """Join or start Ray, start the actors, and check they loaded the driver's model (once;
        :meth:`run` calls it). Any failure is one :class:`DistributedError` line."""
        if self.actors:
            return
        ray = self._ray
        if not ray.is_initialized():
            wait_for_head(self.address, connect_timeout_s=self.connect_timeout_s)
            try:
                ray.init(address=None if self.address == "auto" else self.address, logging_level="WARNING")
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise DistributedError(f"cannot join Ray at {self.address!r}: {_first_line(exc)}") from None
            self._started_ray = True
        actor_class = ray.remote(self._worker_class).options(
            max_restarts=self.max_attempts, max_task_retries=0, **self._options
        )
        self.actors = [actor_class.remote(self.source) for _ in range(self.workers)]
        from dpmtv.models.fingerprint import model_identity

        self._identity = model_identity(loaded.adapter, loaded.name_or_path)
        try:
            identities = ray.get([actor.identity.remote() for actor in self.actors])
        except ray.exceptions.RayError as exc:  # a worker, its node or the raylet died at start
            raise DistributedError(f"the Ray workers did not start ({_first_line(exc)})") from None
        _check_same_model(self._identity, identities)


def _first_line(exc: BaseException) -> str:
    """An exception as one line: its type and its message's first line (Ray's run on)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def _check_same_model(expected: dict[str, Any], identities: list[dict[str, Any]]) -> None:
    from dpmtv.models.fingerprint import IDENTITY_FIELDS_CHECKED

    for index, identity in enumerate(identities):
        for field in IDENTITY_FIELDS_CHECKED:
            if identity[field] != expected[field]:
                raise DistributedError(
                    f"worker {index} loaded another model than the driver ({field}: "
                    f"{identity[field]!r} vs {expected[field]!r}); every node needs the same "
                    f"checkpoint at '{expected['name_or_path']}'"
                )

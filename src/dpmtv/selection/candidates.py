r"""Private head selection among a small PUBLIC list of candidate head sets (docs/design.md §3):
``--private-selection candidates``.

Candidates (:func:`dpmtv.candidate_lists.candidate_head_sets`: ``layer-subsets``, ``layer-blocks``,
``layer-groups``) come from public architecture facts only: the model's geometry and the public pool,
never from data. The artifact records the list's kind and pool with the list, so loading it
re-derives the list (:mod:`dpmtv.artifact.claim`).

The utility of candidate ``S`` for chunk ``j`` (:func:`chunk_candidate_utilities`): chunk ``j``'s
records ``r_1..r_s`` form the build's many-shot prompt (``r_s``'s question as the query); the
last-token outputs ``a_j`` of every head of that prompt are the chunk's own mean. Patching
``a_j`` into the heads of ``S`` on ``r_s``'s zero-shot question gives

- ``correct``: 1 if the greedy first answer token is ``r_s``'s answer's first token, else 0;
- ``probability``: the probability of that token, in ``[0, 1]``;
- ``noisy-correct`` / ``noisy-probability`` (noise-aware): the same, with ``a_j + σ_S·z_j`` patched
  instead of ``a_j``, ``σ_S`` the per-coordinate std the release would draw if ``S`` were chosen
  (public: :mod:`dpmtv.pipeline.selection_noise`) and ``z_j`` standard normal from a generator
  seeded by a public seed and chunk ``j``'s public id only. A large candidate carries more signal
  but (per-layer clipping: more heads in a layer, a larger ``C_l``) more noise per head; this
  utility scores what the release would actually give.

Sensitivity. ``u_j ∈ [0, 1]^n`` is a function of chunk ``j``'s records alone (and the public model
and candidates), and a neighbouring dataset changes one chunk (replace-one: the changed record's
chunk under the data-independent partition; add-remove-one: the record's keyed-hash chunk, from or
to empty, an empty or failed chunk contributing 0). So every total ``U(S) = Σ_j u_j(S)`` moves by
at most 1: ``L∞ = 1``, for any number of candidates (:func:`candidate_totals` checks the range in
code). With a noise-aware utility, ``u_j = f(chunk j, ξ_j)``, ``ξ_j`` the chunk's noise: for every
FIXED ``ξ = (ξ_j)`` the totals ``U_ξ`` have ``L∞ = 1`` by the same argument, so the choice ``M_ξ`` is
``ε_sel``-DP; ``ξ`` is drawn independently of the data (from public seeds and public chunk ids, the
same on both neighbours), so ``P[M(D) ∈ A] = E_ξ P[M_ξ(D) ∈ A] <= e^ε_sel·E_ξ P[M_ξ(D') ∈ A]``:
the mixture is ``ε_sel``-DP with the same event. (``ξ`` need not be secret: the guarantee holds for
each fixed value. It must not depend on any record, which is why its seed is the chunk's public id,
never its position among the non-empty chunks.) The choice is the exponential mechanism, one round of
:func:`dpmtv.privacy.noisy_top_k.noisy_top_k` with ``k = 1`` (Gumbel scale ``2/ε_sel``,
non-monotone), accounted as ``DiscreteLaplaceDpEvent(ε_sel, 1)`` by
:func:`dpmtv.privacy.noisy_top_k.plan_private_selection` with ``k = 1`` and composed with the
release by dp-accounting's PLD accountant, as for the head votes. Only the chosen candidate leaves.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch

from dpmtv.artifact.claim import PRIVATE_CANDIDATES_METHOD
from dpmtv.candidate_lists import CANDIDATE_LISTS, candidate_head_sets
from dpmtv.data.records import Record
from dpmtv.errors import ParameterError
from dpmtv.forward.executor import Executor, LocalExecutor
from dpmtv.forward.hooks import blend_heads_per_row
from dpmtv.heads import HeadSet
from dpmtv.models.loading import LoadedModel
from dpmtv.privacy import Partition
from dpmtv.privacy.events import event_to_json
from dpmtv.privacy.noisy_top_k import RECORD_SUM_UTILITIES, PrivateSelectionPlan, noisy_top_k
from dpmtv.selection._search import mask_of
from dpmtv.selection.private import _held_out_query, task_chunk_scores
from dpmtv.selection.result import SelectionResult

__all__ = [
    "CANDIDATE_LISTS",
    "CANDIDATE_UTILITIES",
    "CHUNK_UTILITIES",
    "RELEASED_UTILITIES",
    "CandidateUtilities",
    "candidate_choice",
    "candidate_head_sets",
    "candidate_totals",
    "chunk_candidate_utilities",
    "select_private_candidates",
]

CHUNK_UTILITIES = ("correct", "probability", "noisy-correct", "noisy-probability")
# scored on the released pool vector instead, after the release (dpmtv.selection.released): a sum
# over records of one term each, which the noise scale's factor reads (privacy.noisy_top_k)
RELEASED_UTILITIES = RECORD_SUM_UTILITIES
CANDIDATE_UTILITIES = (*CHUNK_UTILITIES, *RELEASED_UTILITIES)


def _candidate_utility(
    loaded: LoadedModel,
    chunk: Sequence[Record],
    captured: dict[int, np.ndarray] | None,
    *,
    chunk_id: int,
    masks: torch.Tensor,
    utility: str,
    noise: tuple[torch.Tensor, int] | None,
) -> torch.Tensor | None:
    """``(n,)`` float64 tensor in [0, 1]: chunk ``chunk``'s own last-token head outputs ``captured``
    (with ``noise`` = (per-candidate std ``(n,)``, public seed): plus fresh Gaussian noise of its
    candidate's std, drawn from the public seed and the public ``chunk_id`` alone) patched into each
    candidate's heads (``masks`` ``(n, L, H)``) on its last record's zero-shot question; None when
    the chunk's pass was dropped or failed (it then contributes 0)."""
    if captured is None:
        return None
    adapter, geometry = loaded.adapter, loaded.adapter.geometry
    values = {
        layer: torch.from_numpy(captured[layer][0].reshape(geometry.num_heads, -1)).float()
        for layer in range(geometry.num_layers)
    }  # {layer: (H, d)}, or with noise {layer: (n, H, d)}
    if noise is not None:
        values = _with_release_noise(values, noise, chunk_id, masks.shape[0])
    query = _held_out_query(adapter, chunk[-1])
    inputs = adapter.encode([query.prompt] * masks.shape[0])
    with torch.no_grad(), blend_heads_per_row(adapter, values, masks.float()):
        logits = adapter.model(**inputs).logits[:, -1].float()  # (n, V)
    out: torch.Tensor
    if utility == "correct":
        out = (logits.argmax(-1) == query.target).double()
    else:
        out = logits.softmax(-1)[:, query.target].double()
    return out  # NaN/inf: the failed-chunk rule (no utility)


def _with_release_noise(
    values: dict[int, torch.Tensor], noise: tuple[torch.Tensor, int], chunk_id: int, n: int
) -> dict[int, torch.Tensor]:
    """``values[l] + σ_i·z`` per candidate row ``i``, ``z`` standard normal from a generator seeded
    by (public seed, public chunk id) only: never by a record. ``{l: (H, d)}`` → ``{l: (n, H, d)}``."""
    std, seed = noise
    generator = torch.Generator().manual_seed(
        int(np.random.SeedSequence([seed, chunk_id]).generate_state(1)[0])
    )
    return {
        layer: value.expand(n, *value.shape)
        + std.float()[:, None, None] * torch.randn((n, *value.shape), generator=generator)
        for layer, value in sorted(values.items())
    }


def base_utility(utility: str) -> str:
    """``correct`` or ``probability``: the utility without its ``noisy-`` prefix."""
    return utility.removeprefix("noisy-")


def _check_noise(task: CandidateUtilities) -> tuple[torch.Tensor, int] | None:
    """The task's (std ``(n,)``, seed) for a ``noisy-`` utility, None otherwise; refused unless
    a noisy utility has one finite std >= 0 per candidate and a plain one none."""
    if task.utility not in CHUNK_UTILITIES:
        raise ParameterError(
            f"a chunk's candidate utility must be one of {', '.join(CHUNK_UTILITIES)}, got {task.utility!r}"
            + (" (scored on the release, not per chunk)" if task.utility in CANDIDATE_UTILITIES else "")
        )
    noisy = task.utility.startswith("noisy-")
    if not noisy:
        if task.noise_std is not None:
            raise ParameterError(
                f"utility {task.utility!r} takes no release noise std (use noisy-{task.utility})"
            )
        return None
    std = np.asarray(task.noise_std if task.noise_std is not None else [], dtype=np.float64)
    if std.shape != (len(task.candidates),) or not np.all(np.isfinite(std) & (std >= 0)):
        raise ParameterError(
            f"utility {task.utility!r} needs one finite release noise std >= 0 per candidate "
            f"({len(task.candidates)}), got {task.noise_std!r}"
        )
    return torch.from_numpy(std), int(task.noise_seed)


@dataclass(frozen=True)
class CandidateUtilities:
    """The chunk task (:class:`dpmtv.forward.executor.ChunkTask`) of the candidate choice: each non-empty
    chunk's utilities ``(n,)`` (or None), in chunk order."""

    candidates: tuple[HeadSet, ...]
    utility: str
    max_prompt_tokens: int | None
    shots_per_chunk: int
    prepare_workers: int | None = None
    private_batch_size: int = 1
    # a "noisy-" utility: the release's public per-coordinate std for each candidate, and the
    # public seed of the chunks' noise (dpmtv.pipeline.selection_noise; module docstring)
    noise_std: tuple[float, ...] | None = None
    noise_seed: int = 0
    # where ``candidates`` come from (candidate_head_sets(candidate_list, pool)): recorded with
    # them so that loading the artifact re-derives the list; a build always gives both
    candidate_list: str | None = None
    pool: HeadSet | None = None
    description: ClassVar[str] = "private candidate utilities"

    def run(
        self, loaded: LoadedModel, records: Sequence[Record], partition: Partition, *, progress: bool
    ) -> list[torch.Tensor | None]:
        noise = _check_noise(self)  # first: a wrong utility is refused before any model work
        geometry = loaded.adapter.geometry
        masks = torch.stack([mask_of(c, geometry) for c in self.candidates])  # (n, L, H) bool
        scorer = partial(_candidate_utility, masks=masks, utility=base_utility(self.utility), noise=noise)
        return list(task_chunk_scores(self, loaded, records, partition, progress=progress, scorer=scorer))

    def combine(self, results: list[list[torch.Tensor | None]]) -> list[torch.Tensor | None]:
        return [u for part in results for u in part]


def chunk_candidate_utilities(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    task: CandidateUtilities,
    *,
    executor: Executor | None = None,
    progress: bool = False,
) -> list[torch.Tensor | None]:
    """Every non-empty chunk's utilities (module docstring), computed by ``executor``."""
    utilities: list[torch.Tensor | None] = (executor or LocalExecutor()).run(
        loaded, records, partition, task, progress=progress
    )
    return utilities


def candidate_totals(utilities: Sequence[torch.Tensor | None], *, num_candidates: int) -> np.ndarray:
    """``U(S) = Σ_j u_j(S)``, ``(n,)`` float64. Enforces what ``L∞ = 1`` needs: each chunk gives
    ``num_candidates`` values in [0, 1] (None, a dropped or failed chunk, gives 0)."""
    totals = np.zeros(num_candidates, dtype=np.float64)
    for index, u in enumerate(utilities):
        if u is None:
            continue
        values = np.asarray(u, dtype=np.float64)
        if values.shape != (num_candidates,) or not np.all((values >= 0) & (values <= 1)):
            raise ParameterError(
                f"chunk {index}: a candidate utility must be {num_candidates} values in [0, 1], "
                f"got {values!r}"
            )
        totals += values
    return totals


def select_private_candidates(
    loaded: LoadedModel,
    records: Sequence[Record],
    partition: Partition,
    *,
    task: CandidateUtilities,
    plan: PrivateSelectionPlan,
    rng: np.random.Generator | None = None,
    progress: bool = True,
    executor: Executor | None = None,
) -> SelectionResult:
    """Utilities of ``partition``'s chunks → totals → one ``ε_sel``-DP exponential-mechanism
    choice (``noisy_top_k``, ``k = 1``) → the chosen candidate's heads. ``plan`` must be the
    ``k = 1`` plan (``plan_private_selection(k=1, max_votes_per_chunk=1)``); ``rng``: seeded numpy
    Gumbel noise, INSECURE, for tests and experiments only."""
    if plan.k != 1 or plan.max_votes_per_chunk != 1:
        raise ParameterError("the candidate choice is one round of sensitivity 1: its plan needs k = k' = 1")
    started = time.perf_counter()
    utilities = chunk_candidate_utilities(
        loaded, records, partition, task, executor=executor, progress=progress
    )
    totals = candidate_totals(utilities, num_candidates=len(task.candidates))
    scores = np.rint(totals).astype(np.int64) if task.utility == "correct" else totals  # (n,)
    (picked,) = noisy_top_k(scores, k=1, epsilon=plan.epsilon_selection, rng=rng)
    del utilities, totals, scores  # private intermediates: only the noisy choice leaves
    return candidate_choice(
        task.candidates,
        picked,
        plan,
        started=started,
        seeded=rng is not None,
        candidate_list=task.candidate_list,
        pool=task.pool,
        utility=task.utility,
        extra={
            **({} if task.noise_std is None else {"release_noise_std": list(task.noise_std)}),
            "num_chunks_voting": partition.num_chunks,
        },
    )


def candidate_choice(
    candidates: Sequence[HeadSet],
    picked: int,
    plan: PrivateSelectionPlan,
    *,
    started: float,
    seeded: bool,
    candidate_list: str | None,
    pool: HeadSet | None,
    utility: str,
    extra: dict[str, Any] | None = None,
) -> SelectionResult:
    """The result of one candidate choice (chunk utilities, or on the release): the chosen set and
    what the artifact records of it (the claim on load re-derives the list and the event)."""
    return SelectionResult(
        heads=candidates[picked],
        method=PRIVATE_CANDIDATES_METHOD,
        metric="none",
        seconds=time.perf_counter() - started,
        details={
            "candidates": [c.to_json() for c in candidates],
            **({} if candidate_list is None else {"candidate_list": candidate_list}),
            **({} if pool is None else {"pool": pool.to_json()}),
            "utility": utility,
            "chosen": int(picked),
            "k": 1,
            "max_votes_per_chunk": 1,
            "epsilon_selection": plan.epsilon_selection,
            "selection_fraction": plan.budget.selection_fraction,
            "noise_scale": plan.noise_scale,
            "monotone": plan.monotone,
            "composition": plan.composition,
            "sampler": "seeded-numpy-gumbel (INSECURE)" if seeded else "opendp-gumbel",
            "event": event_to_json(plan.event),
            **(extra or {}),
        },
    )

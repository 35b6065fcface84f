"""The compared methods (docs/eval.md) and one function per method producing answers to the queries.

=============  ==================================================  =========================
method         what it does                                        privacy
=============  ==================================================  =========================
``zero-shot``  the query alone                                     reads no private data
``icl:K``      K demonstrations sampled from the pool per query,   NON-PRIVATE (ε = ∞)
               cut to what the context holds (reported)
``mtv``        MTV: the plain mean of the chunks' head outputs,    NON-PRIVATE (ε = ∞)
               no clipping, no noise
``dp-mtv``     :func:`dpmtv.pipeline.build.build_task_vector` at ε, then    (ε, δ) for any number of
               :func:`dpmtv.inference.answer_queries`                  queries
``dp-icl:S``   per query, one answer per disjoint S-demonstration  (ε, δ) in total over the
               chunk, noisy-argmax vote (:mod:`dpmtv.eval.dp_icl`)  Q answered queries
               (replace-one)
``dp-icl:S:M`` DP-ICL as Wu et al. (ICLR 2024): per query a fresh  (ε, δ) in total over Q,
               Poisson sample at the public rate q                 with the subsampling
               (--dp-icl-sampling-rate) over M prompts, noisy-     amplification (add/remove)
               argmax vote
=============  ==================================================  =========================

Every private row names its neighbouring relation; DP-MTV follows ``neighbouring_relation``
(replace-one by default; ``add-remove-one`` to compare with ``dp-icl:S:M`` at one relation).

The non-private methods read the private pool in the clear, so they run only with
``allow_non_private=True`` and are labelled NON-PRIVATE everywhere. Every method uses the same
pool, queries, model and prompt format (the adapter's chat template, same question text). Seeds
vary the partition (mtv, dp-mtv, dp-icl), the noise (dp-mtv, dp-icl) and the sampled
demonstrations (icl); noise and partition are seeded for reproducibility, which makes these
runs experiments, not private releases.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpmtv._version import __version__
from dpmtv.artifact.vector import ArtifactMetadata, PrivacyMetadata, TaskVector
from dpmtv.data.prompts import Prompt
from dpmtv.errors import DangerousModeError, ParameterError
from dpmtv.eval.benchmarks import Benchmark
from dpmtv.eval.choice_scores import scores_details
from dpmtv.eval.generation import (
    ExampleCache,
    clean_prediction,
    context_limit,
    derive_seed,
    encoded_within_budget,
)
from dpmtv.heads import HeadSet
from dpmtv.inference import answer_encoded, encode_queries, generate_encoded
from dpmtv.models.fingerprint import model_identity
from dpmtv.models.loading import LoadedModel
from dpmtv.pipeline.build import (
    BuildSettings,
    seeded_builds,
)
from dpmtv.pipeline.settings import DEFAULT_L2_CLIP_NORM, DEFAULT_SHOTS_PER_CHUNK
from dpmtv.privacy import event_to_json

KINDS = ("zero-shot", "icl", "mtv", "dp-mtv", "dp-icl")
NON_PRIVATE_KINDS = ("icl", "mtv")
DEFAULT_DP_ICL_SHOTS = 4


@dataclass(frozen=True)
class MethodSpec:
    kind: str
    shots: int | None = None  # icl: demonstrations per prompt; dp-icl: demonstrations per chunk
    prompts: int | None = None  # dp-icl:S:M — Poisson-subsampled prompts per query

    @property
    def label(self) -> str:
        if self.prompts is not None:
            return f"{self.kind}:{self.shots}:{self.prompts}"
        return f"{self.kind}:{self.shots}" if self.kind in ("icl", "dp-icl") else self.kind

    @property
    def private(self) -> bool:
        """Has an (ε, δ) guarantee, so it is run at every ε."""
        return self.kind in ("dp-mtv", "dp-icl")

    @property
    def non_private(self) -> bool:
        """Reads the private pool without noise (ε = ∞)."""
        return self.kind in NON_PRIVATE_KINDS

    @property
    def display(self) -> str:
        names = {
            "zero-shot": "zero-shot",
            "icl": f"ICL {self.shots}-shot",
            "mtv": "MTV",
            "dp-mtv": "DP-MTV",
            "dp-icl": f"DP-ICL ({self.shots}/chunk)"
            if self.prompts is None
            else f"DP-ICL ({self.prompts} subsampled prompts of ~{self.shots})",
        }
        return names[self.kind] + (" [NON-PRIVATE, ε = ∞]" if self.non_private else "")


def parse_methods(text: str) -> tuple[MethodSpec, ...]:
    """``"zero-shot,icl:16,mtv,dp-mtv,dp-icl,dp-icl:4:16"`` → specs (``dp-icl:S`` sets shots per
    chunk of the full partition; ``dp-icl:S:M`` the Poisson-subsampled ensemble of M prompts)."""
    specs = []
    for item in (part.strip().lower() for part in text.split(",") if part.strip()):
        match = re.fullmatch(r"(zero-shot|icl|mtv|dp-mtv|dp-icl)(?::(\d+))?(?::(\d+))?", item)
        if not match:
            raise ParameterError(
                f"unknown method '{item}'; use {', '.join(KINDS)} (icl:K, dp-icl:S, dp-icl:S:M)"
            )
        kind, number, prompts = match.group(1), match.group(2), match.group(3)
        if number is not None and kind not in ("icl", "dp-icl"):
            raise ParameterError(f"method '{item}': only icl:K and dp-icl:S take a number")
        if prompts is not None and (kind != "dp-icl" or int(prompts) < 1):
            raise ParameterError(f"method '{item}': only dp-icl:S:M takes a prompt count M >= 1")
        if kind == "icl" and number is None:
            raise ParameterError("method 'icl' needs its number of shots, e.g. icl:16")
        shots = int(number) if number is not None else (DEFAULT_DP_ICL_SHOTS if kind == "dp-icl" else None)
        if shots is not None and shots < 1:
            raise ParameterError(f"method '{item}': the number of shots must be >= 1")
        specs.append(MethodSpec(kind, shots, int(prompts) if prompts is not None else None))
    if not specs:
        raise ParameterError("no methods given; use e.g. --methods zero-shot,dp-mtv")
    if len({s.label for s in specs}) != len(specs):
        raise ParameterError(f"methods repeat: {text!r}")
    return tuple(specs)


def check_non_private(methods: tuple[MethodSpec, ...], *, allow_non_private: bool) -> None:
    """Refuse non-private methods unless explicitly switched on.

    Raises:
        DangerousModeError: names the methods and how to switch them on.
    """
    offending = [m.label for m in methods if m.non_private]
    if offending and not allow_non_private:
        raise DangerousModeError(
            f"method(s) {', '.join(offending)} read the private demonstrations without noise "
            "(ε = ∞, NO privacy guarantee); add --non-private to run them as labelled non-private "
            "baselines"
        )


def check_sampling_probability(sampling_probability: float | None) -> float:
    """The public Poisson rate ``q`` of ``dp-icl:S:M``, in ``(0, 1]``.

    Raises:
        ParameterError: no rate, or one outside ``(0, 1]``; names ``--dp-icl-sampling-rate``.
    """
    q = sampling_probability
    if q is None or isinstance(q, bool) or not 0.0 < float(q) <= 1.0:
        raise ParameterError(
            f"dp-icl:S:M needs a public Poisson rate --dp-icl-sampling-rate in (0, 1], got {q!r} "
            "(it must not be derived from the private number of records)"
        )
    return float(q)


@dataclass(frozen=True)
class EvalSettings:
    """Everything of a run besides the model, the benchmark and the head set."""

    methods: tuple[MethodSpec, ...]
    epsilons: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0, 8.0)
    seeds: tuple[int, ...] = (0, 1, 2)
    delta: float = 1e-5
    l2_clip_norm: tuple[float, ...] = (DEFAULT_L2_CLIP_NORM,)
    shots_per_chunk: int = DEFAULT_SHOTS_PER_CHUNK  # DP-MTV / MTV records per chunk (as `build`)
    dp_icl_max_chunks: int | None = None
    dp_icl_sampling_rate: float | None = None  # dp-icl:S:M's public Poisson rate q (never M·S/N)
    neighbouring_relation: str = "replace-one"  # DP-MTV's; DP-ICL rows carry their own
    max_new_tokens: int = 10
    batch_size: int = 8
    allow_non_private: bool = False
    queries_epsilon: float = 1.0
    queries_grid: tuple[int, ...] = (1, 3, 10, 30, 100, 300, 1000, 3000, 10000)
    queries_repeats: int = 20
    context_limit: int | None = None
    #: the DP-MTV build's public per-chunk token budget (default ``context_limit``): where the
    #: family has fixed image shapes, the private chunks then run several per pass
    private_prompt_tokens: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        if any(m.kind == "dp-icl" and m.prompts is not None for m in self.methods):
            check_sampling_probability(self.dp_icl_sampling_rate)

    @property
    def evaluated_epsilons(self) -> list[float]:
        """The requested ε plus the queries-plot budget (DP-MTV's flat line needs a run there)."""
        return sorted(set(self.epsilons) | {self.queries_epsilon})

    def to_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "methods"}
        return {"methods": [m.label for m in self.methods], **data}


@dataclass
class MethodContext:
    """What every method function reads: the model, the benchmark, settings, heads, caches."""

    loaded: LoadedModel
    benchmark: Benchmark
    settings: EvalSettings
    heads: HeadSet | None
    head_spec: str | None
    progress: Callable[[str, int], Any]  # (description, total) -> context manager yielding advance
    examples: ExampleCache = field(default_factory=ExampleCache)
    dp_mtv_builds: dict[int, dict[float, Any]] = field(default_factory=dict)  # seed -> ε -> BuildResult
    mtv_means: dict[int, tuple[dict[int, np.ndarray], int]] = field(default_factory=dict)  # seed -> (mean, m)
    _query_batches: list | None = field(default=None, init=False, repr=False)

    def queries(self):
        return [self.examples(r, with_answer=False) for r in self.benchmark.test]

    def query_batches(self) -> list:
        """The test queries' zero-shot prompts, encoded once for every method that answers them
        (zero-shot, MTV and DP-MTV at each ε and seed: the same inputs, bitwise)."""
        if self._query_batches is None:
            batch_size = self.settings.batch_size
            self._query_batches = encode_queries(self.loaded.adapter, self.queries(), batch_size=batch_size)
        return self._query_batches


@dataclass(frozen=True)
class MethodOutput:
    predictions: list[str]
    details: dict[str, Any]


def run_zero_shot(ctx: MethodContext) -> MethodOutput:
    s = ctx.settings
    answers = answer_encoded(ctx.loaded, ctx.query_batches(), max_new_tokens=s.max_new_tokens)
    return MethodOutput(_clean(answers), _scores(ctx, None))


def run_icl(ctx: MethodContext, shots: int, seed: int) -> MethodOutput:
    """K demonstrations per query, sampled without replacement (seeded), cut to fit the context."""
    s, train = ctx.settings, ctx.benchmark.train
    budget = context_limit(ctx.loaded, s.context_limit) - s.max_new_tokens
    picks = icl_demonstrations(len(train), len(ctx.benchmark.test), shots, seed)
    prompts = [
        Prompt(tuple(ctx.examples(train[int(i)], with_answer=True) for i in chosen), query)
        for query, chosen in zip(ctx.queries(), picks, strict=True)
    ]
    answers, used = [], []
    with ctx.progress(f"icl:{shots} seed {seed}", len(prompts)) as advance:
        for inputs, kept in encoded_within_budget(
            ctx.loaded.adapter, prompts, budget=budget, batch_size=s.batch_size
        ):
            texts = generate_encoded(ctx.loaded.adapter, inputs, max_new_tokens=s.max_new_tokens)
            answers.extend(clean_prediction(text) for text in texts)
            used.extend(kept)
            advance(len(kept))
    details = _shots_details(shots, used, budget)
    if ctx.benchmark.demonstration_facts is not None:  # e.g. Bayes learners on the same demonstrations
        details.update(ctx.benchmark.demonstration_facts(picks, ctx.benchmark.test))
    return MethodOutput(answers, details)


def icl_demonstrations(num_train: int, num_queries: int, shots: int, seed: int) -> list[np.ndarray]:
    """The pool indices of each query's ``icl:shots`` demonstrations at ``seed`` (without
    replacement within a prompt; before any cut to the context)."""
    rng = np.random.default_rng(derive_seed(seed, "icl", shots))
    return [rng.choice(num_train, size=min(shots, num_train), replace=False) for _ in range(num_queries)]


def _shots_details(shots: int, used: list[int], budget: int) -> dict[str, Any]:
    cut = sum(k < shots for k in used)
    details = {"shots_requested": shots, "shots_used_min": min(used), "shots_used_mean": float(np.mean(used))}
    details["queries_with_shots_cut"] = cut
    if cut:
        details["note"] = (
            f"k cut from {shots} to as few as {min(used)} for {cut} of {len(used)} queries to fit the "
            f"{budget}-token prompt budget"
        )
    return details


def run_mtv(ctx: MethodContext, seed: int) -> MethodOutput:
    """MTV (Huang et al., NeurIPS 2024): the plain mean over chunks of the heads' last-token
    outputs, with neither clipping nor noise, then answer with it."""
    s = ctx.settings
    vector, num_chunks = mtv_task_vector(ctx, seed)
    answers = answer_encoded(ctx.loaded, ctx.query_batches(), vector=vector, max_new_tokens=s.max_new_tokens)
    details = {"num_chunks": num_chunks, "shots_per_chunk": s.shots_per_chunk, "clipped": False}
    return MethodOutput(_clean(answers), {**details, "noise": "none (non-private)", **_scores(ctx, vector)})


def mtv_task_vector(ctx: MethodContext, seed: int) -> tuple[TaskVector, int]:
    """The MTV vector and its number of chunks: the mean of the heads' outputs over the chunks of
    the seed's DP-MTV partition (``floor(N/s)`` chunks of ``s`` records, each a many-shot prompt),
    neither clipped nor noised, from the same extraction as DP-MTV's releases
    (:func:`dpmtv.pipeline.build.seeded_builds`): MTV and DP-MTV differ by the clip and the noise
    alone. Labelled non-private (ε = ∞, no noise, no clip norm)."""
    heads = _vector_heads(ctx)
    means, num_chunks = _seeded_builds(ctx, seed)[1]
    if not means:
        raise ParameterError("mtv: no chunk prompt fits the token budget, so there is nothing to average")
    head_dim = ctx.loaded.adapter.geometry.head_dim
    rows = np.concatenate([means[layer].reshape(-1, head_dim) for layer in heads.layers])  # (K, d)
    metadata = _mtv_metadata(ctx, heads, num_chunks)
    return TaskVector(heads=heads, values=rows.astype(np.float32), metadata=metadata), num_chunks


def _seeded_builds(
    ctx: MethodContext, seed: int
) -> tuple[dict[float, Any], tuple[dict[int, np.ndarray], int]]:
    """The seed's DP-MTV releases (by ε; each taken once) and MTV's plain mean, from one
    extraction, computed at the first method that needs them."""
    if seed not in ctx.dp_mtv_builds:
        dp = any(spec.kind == "dp-mtv" for spec in ctx.settings.methods)
        epsilons = ctx.settings.evaluated_epsilons if dp else []
        train = ctx.benchmark.train
        builds = seeded_builds(
            ctx.loaded, train, _vector_heads(ctx), _dp_mtv_settings(ctx, seed), epsilons=epsilons
        )
        ctx.dp_mtv_builds[seed] = dict(zip(epsilons, builds.releases, strict=True))
        ctx.mtv_means[seed] = (builds.plain_mean, builds.num_chunks)
    return ctx.dp_mtv_builds[seed], ctx.mtv_means[seed]


def _mtv_metadata(ctx: MethodContext, heads: HeadSet, num_chunks: int) -> ArtifactMetadata:
    from datetime import datetime, timezone

    import dp_accounting

    privacy = PrivacyMetadata(
        private=False, epsilon=math.inf, delta=0.0, epsilon_spent=math.inf,
        neighbouring_relation="replace-one", l2_clip_norm=[], sensitivity_l2_clip_norm=[],
        l2_sensitivity=math.inf,
        noise_std=0.0, noise_std_analytic=None, noise_std_sampler_map=None, noise_multiplier=0.0,
        noise_sampler="none", secure_noise=False, num_chunks=num_chunks,
        shots_per_chunk=ctx.settings.shots_per_chunk, num_records=len(ctx.benchmark.train),
        num_unused_records=len(ctx.benchmark.train) - num_chunks * ctx.settings.shots_per_chunk,
        accountant="none (MTV baseline: plain mean, no clipping, no noise)",
        accounting_events=event_to_json(dp_accounting.NonPrivateDpEvent()),
    )  # fmt: skip
    return ArtifactMetadata(
        library_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        model=model_identity(ctx.loaded.adapter, ctx.loaded.name_or_path),
        heads=heads.to_json(),
        head_selection={"method": "user", "spec": ctx.head_spec},
        prompt={"query": "record", "query_question": None, "center": "none", "format": "chat-template"},
        privacy=privacy,
    )


def _vector_heads(ctx: MethodContext) -> HeadSet:
    if ctx.heads is None:
        raise ParameterError(
            "mtv and dp-mtv need a head set: pass --heads ('all', 'layers:A-B', 'heads:L.H,...', or a "
            "selection saved by `dpmtv select`)"
        )
    return ctx.heads


def run_dp_mtv(ctx: MethodContext, epsilon: float, seed: int) -> MethodOutput:
    """Build with the run's seeded partition and noise, then answer.

    The build seed depends on the run seed only, so at one seed every ε shares the partition
    and the standard-normal noise direction (common random numbers across ε). The chunks of a
    seed are therefore extracted once, at its first ε, and released at every evaluated ε
    (:func:`dpmtv.pipeline.build.seeded_builds`, as the demo does; MTV's plain mean comes from the
    same extraction). Seeded noise makes these builds experiments at the σ of (ε, δ), not private
    releases."""
    s = ctx.settings
    result = _seeded_builds(ctx, seed)[0].pop(epsilon)
    answers = answer_encoded(
        ctx.loaded, ctx.query_batches(), vector=result.vector, max_new_tokens=s.max_new_tokens
    )
    return MethodOutput(_clean(answers), {**_build_details(result), **_scores(ctx, result.vector)})


def _dp_mtv_settings(ctx: MethodContext, seed: int):
    """The build settings of a seed (ε is set per release)."""
    s = ctx.settings
    add_remove = s.neighbouring_relation == "add-remove-one"
    return BuildSettings(
        epsilon=s.evaluated_epsilons[0],
        delta=s.delta,
        l2_clip_norm=s.l2_clip_norm,
        shots_per_chunk=s.shots_per_chunk,
        neighbouring_relation=s.neighbouring_relation,
        # add/remove needs a public m: floor(N / s) of the experiment's pool, fixed in advance
        num_chunks=len(ctx.benchmark.train) // s.shots_per_chunk if add_remove else None,
        batch_size=s.batch_size,
        insecure_seed=derive_seed(seed, "task-vector"),
        allow_insecure_seed=True,
        head_selection={"method": "user", "spec": ctx.head_spec},
        progress=s.progress,
        max_prompt_tokens=s.private_prompt_tokens or s.context_limit,
    )


def _build_details(result) -> dict[str, Any]:
    p = result.vector.metadata.privacy
    return {
        "num_chunks": p.num_chunks,
        "shots_per_chunk": p.shots_per_chunk,
        "l2_sensitivity": p.l2_sensitivity,
        "noise_std": p.noise_std,
        "epsilon_spent": p.epsilon_spent,
        "neighbouring_relation": p.neighbouring_relation,
        "noise": "seeded (experiment)",
        "warnings": list(result.warnings),
    }


def _scores(ctx: MethodContext, vector: TaskVector | None) -> dict[str, Any]:
    """Closed answer sets: the vector's probabilities of each answer (post-processing)."""
    return scores_details(
        ctx.loaded, ctx.benchmark, ctx.queries(), vector, batch_size=ctx.settings.batch_size
    )


def _clean(answers: list[str]) -> list[str]:
    return [clean_prediction(a) for a in answers]

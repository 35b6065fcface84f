"""The options of ``dpmtv build``, in the order ``--help`` lists them."""

from __future__ import annotations

from pathlib import Path

import click

from dpmtv.cli._common import (
    clip_norms_or_auto,
    model_options,
    prepare_workers_option,
    private_batch_size_option,
)
from dpmtv.cli._ray import ray_options
from dpmtv.cli.budget import ledger_option
from dpmtv.data.prompts import DEFAULT_QUERY_QUESTION
from dpmtv.pipeline.defaults import (
    CLIP_UTILITIES,
    DEFAULT_CLIP_EPSILON_FRACTION,
    DEFAULT_CLIP_QUANTILE,
    DEFAULT_CLIP_TOLERANCE,
    DEFAULT_CLIP_UTILITY,
    DEFAULT_L2_CLIP_NORM,
    DEFAULT_SHOTS_PER_CHUNK,
)


def build_options(function):
    """Decorate ``function`` with every option of ``dpmtv build``."""
    for option in reversed(_OPTIONS):
        function = option(function)
    return function


_OPTIONS = [
    model_options,
    click.option(
        "--data",
        "data_path",
        required=True,
        type=click.Path(path_type=Path),
        help="Private records: .jsonl, .csv, or a saved datasets folder.",
    ),
    click.option(
        "--heads",
        "head_spec",
        help="'all', 'layers:A-B', 'heads:L.H,...' or a JSON file of [layer, head] pairs.",
    ),
    click.option(
        "--heads-from",
        help="Select heads instead of --heads: 'public:FILE' (public selection on public records, no "
        "privacy cost), 'private' (private selection on the private chunks, composed into the budget; "
        "see --select-k) or a saved selection JSON from `dpmtv select`.",
    ),
    click.option(
        "--select-k",
        type=int,
        default=10,
        show_default=True,
        help="Heads picked by private selection (1 to the pool's size).",
    ),
    click.option(
        "--select-method",
        type=click.Choice(["greedy", "reinforce", "scored"]),
        default="greedy",
        show_default=True,
        help="Public selection method (with --heads-from public:FILE).",
    ),
    click.option(
        "--selection-fraction",
        type=float,
        default=None,
        help="Private selection, sequential: the share of ε spent on selection; σ of the release is "
        "calibrated so the composition meets the total (ε, δ). Default 0.5 for --private-selection "
        "votes, 0.1 for candidates chosen on the release, 0.3 for candidates by chunk utilities "
        "(checked on the dev set of benchmarks/private_only.py).",
    ),
    click.option(
        "--selection-composition",
        type=click.Choice(["sequential", "parallel"]),
        default="sequential",
        show_default=True,
        help="Private selection: 'sequential' runs selection and release on all chunks and splits the "
        "budget; 'parallel' runs them on disjoint halves of the chunks at the full budget each — no "
        "split, but each half has m/2 chunks (fewer votes, twice the release sensitivity).",
    ),
    click.option(
        "--select-pool", default="all", show_default=True, help="Public candidate heads for selection."
    ),
    click.option(
        "--private-selection",
        type=click.Choice(["votes", "candidates"]),
        default="votes",
        show_default=True,
        help="With --heads-from private: 'votes' (each chunk votes for its --select-k best heads by "
        "attribution patching; noisy top-k) or 'candidates' (one exponential-mechanism choice among a "
        "PUBLIC list of head sets, --selection-candidates, by each chunk's --selection-utility: "
        "sensitivity 1 whatever the number of heads; --select-k is then unused).",
    ),
    click.option(
        "--selection-candidates",
        type=click.Choice(["layer-subsets", "layer-blocks", "layer-groups"]),
        default="layer-groups",
        show_default=True,
        help="--private-selection candidates: all --select-pool heads of each non-empty subset of its "
        "layers (2^L - 1 sets, L <= 8), of each contiguous block of layers, or (layer-groups) the "
        "layer subsets and each half and quarter of their layers' heads by position.",
    ),
    click.option(
        "--selection-utility",
        type=click.Choice(
            ["correct", "probability", "noisy-correct", "noisy-probability", "released-probability"]
        ),
        default=None,
        help="--private-selection candidates [default: released-probability; noisy-probability at user "
        "level and with parallel halves]: a chunk's utility for a candidate, its own mean patched "
        "into the candidate's heads on its last record's zero-shot question: 1 if the answer's first "
        "token is then the greedy one (else 0), or that token's probability; noisy-: the mean plus "
        "the Gaussian noise the release would add for that candidate (public std); "
        "released-probability: the whole --select-pool is released first and every candidate is "
        "scored on EVERY record with that released vector (record level, sequential only).",
    ),
    click.option("--epsilon", type=float, help="Privacy budget ε of the build (> 0)."),
    click.option(
        "--delta", type=float, default=1e-5, show_default=True, help="δ in (0, 1); keep it below 1/N."
    ),
    click.option(
        "--l2-clip-norm",
        callback=clip_norms_or_auto,
        default=f"{DEFAULT_L2_CLIP_NORM:g}",
        show_default=True,
        help="Per-layer L2 clip norm C: one value, one per released layer (comma-separated), 'auto': "
        "per layer, the --clip-quantile of the released heads' norms on chunks of --public-data records "
        "(public, so the chosen C costs no privacy; it is printed and stored in the artifact), or "
        "'private': chosen inside the build from the private chunks' own norms for a "
        "--clip-epsilon-fraction of ε (no public data needed; with --heads-from private, both come "
        "from the private data alone).",
    ),
    click.option(
        "--clip-epsilon-fraction",
        type=float,
        default=DEFAULT_CLIP_EPSILON_FRACTION,
        show_default=True,
        help="With --l2-clip-norm private: the share of ε spent choosing C (one exponential-mechanism "
        "round); σ of the release is calibrated so the composition meets the total (ε, δ).",
    ),
    click.option(
        "--public-data",
        type=click.Path(path_type=Path),
        help="Public records (never the private ones) for --l2-clip-norm auto.",
    ),
    click.option(
        "--clip-quantile",
        type=float,
        default=DEFAULT_CLIP_QUANTILE,
        show_default=True,
        help="With --l2-clip-norm auto or private: the quantile of the chunk norms taken as C.",
    ),
    click.option(
        "--clip-utility",
        type=click.Choice(CLIP_UTILITIES),
        default=DEFAULT_CLIP_UTILITY,
        show_default=True,
        help="With --l2-clip-norm private: the clip round's score, OpenDP's 'quantile' score (counts of "
        "chunks on each side: a miss may land anywhere on the grid) or 'log-loss' (the quantile's "
        "pinball loss in log space, each chunk's term clipped at a --clip-tolerance-fold miss: a near "
        "miss costs little, a far one is exponentially unlikely).",
    ),
    click.option(
        "--clip-tolerance",
        type=float,
        default=DEFAULT_CLIP_TOLERANCE,
        show_default=True,
        help="--clip-utility log-loss: the factor beyond which a chunk's loss is clipped (> 1).",
    ),
    click.option(
        "--shots-per-chunk",
        type=int,
        default=DEFAULT_SHOTS_PER_CHUNK,
        show_default=True,
        help="Records per chunk s; m = floor(N/s) chunks. With --query record, s-1 are demonstrations.",
    ),
    click.option(
        "--out",
        type=click.Path(path_type=Path),
        required=True,
        help="Output .safetensors artifact (written atomically).",
    ),
    click.option(
        "--neighbouring-relation",
        type=click.Choice(["replace-one", "add-remove-one"]),
        help="replace-one (default for --privacy-unit record): N is public. add-remove-one (the "
        "default, and the only choice, for --privacy-unit user): needs record ids and --num-chunks.",
    ),
    click.option(
        "--num-chunks",
        type=int,
        help="Public, fixed m (required for add-remove-one and --privacy-unit user).",
    ),
    click.option(
        "--privacy-unit",
        type=click.Choice(["record", "user"]),
        default="record",
        show_default=True,
        help="record: the guarantee is per record. user: per user (add/remove one user) — records need "
        "'user_id', each user's records go to one chunk (keyed hash, fresh key per build) and are "
        "capped at --max-records-per-user (the excess is dropped); needs --num-chunks.",
    ),
    click.option(
        "--max-records-per-user", type=int, help="Public cap on a user's records (--privacy-unit user)."
    ),
    click.option(
        "--show-private-counts",
        is_flag=True,
        help="Print N, the number of users and the records dropped by the cap, which are private under "
        "add-remove-one and user level (printed only: never stored in the artifact or ledger).",
    ),
    click.option(
        "--dataset",
        help="Charge this build to the named dataset budget in the ledger (see `dpmtv budget`); the "
        "charge is taken just before noise is drawn, and a build that would exceed it is refused.",
    ),
    ledger_option,
    click.option(
        "--ledger-timeout",
        "ledger_timeout_s",
        type=float,
        default=30.0,
        show_default=True,
        help="Seconds to wait for the ledger while another process is writing to it, then refuse.",
    ),
    click.option(
        "--force",
        is_flag=True,
        help="Replace an existing dpmtv artifact at --out (never any other file).",
    ),
    click.option(
        "--void-budget",
        is_flag=True,
        help="With --non-private or --insecure-seeded-noise and --dataset: record the build in the "
        "ledger, which marks the dataset's guarantee VOID for good (such a build has none).",
    ),
    click.option(
        "--query",
        default="record",
        show_default=True,
        help="Each chunk's query: 'record' (a chunk record, answer withheld), 'blank' (data-free "
        "image) or a public image path.",
    ),
    click.option(
        "--query-question",
        default=DEFAULT_QUERY_QUESTION,
        show_default=True,
        help="Public question text for blank/public-image queries.",
    ),
    click.option(
        "--center",
        default="none",
        show_default=True,
        help="Public centering reference: 'none', 'blank', or a public records file.",
    ),
    click.option(
        "--batch-size",
        type=int,
        default=4,
        show_default=True,
        help="Batch size of PUBLIC prompts (centering reference, public selection). Private chunks run "
        "at fixed public shapes or one per pass (--private-batch-size), so no chunk's numerics depend "
        "on another's.",
    ),
    click.option(
        "--max-prompt-tokens",
        type=click.IntRange(min=1),
        help="Public token budget of one chunk prompt (default: the model's position limit; recorded in "
        "the artifact). Rule: a longer prompt keeps its leading demonstrations that fit; a chunk whose "
        "query alone does not fit contributes nothing (no vector, no selection vote).",
    ),
    click.option(
        "--noise-sampler",
        type=click.Choice(["opendp", "csprng-numpy"]),
        default="opendp",
        show_default=True,
        help="opendp: exact discrete Gaussian, floating-point safe (default); csprng-numpy: OS CSPRNG "
        "bytes through Box–Muller, faster, not floating-point safe.",
    ),
    click.option(
        "--insecure-seeded-noise",
        "insecure_seed",
        type=int,
        help="INSECURE: seed every random choice — partition, per-user caps, private selection and "
        "noise — so that builds on neighbouring datasets differ only by the data (experiments and "
        "audits only). The artifact records the seed and says NO GUARANTEE: the seed regenerates the noise.",
    ),
    click.option(
        "--non-private",
        is_flag=True,
        help="NON-PRIVATE baseline: no noise, no guarantee (ε = ∞, labelled in the artifact).",
    ),
    ray_options("sums of clipped vectors (with --heads-from private, also votes); noise is added once, here"),
    prepare_workers_option,
    private_batch_size_option,
    click.option("--quiet", is_flag=True, help="No progress bar."),
    click.option(
        "--sign-key",
        type=click.Path(path_type=Path, dir_okay=False),
        help="PEM EC private key: sign the artifact into OUT.sig (OpenSSF model-signing, no network); "
        "readers check it with --trusted-key. The key is checked before anything is charged.",
    ),
    click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print the summary as one JSON object on stdout (progress stays on stderr).",
    ),
]

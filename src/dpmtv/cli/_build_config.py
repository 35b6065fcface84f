"""``dpmtv build``'s JSON summary and its grouped ``--help``.

Its ``--config``/``--print-config`` are every command's (:mod:`dpmtv.cli._config_file`). The
artifact records what the build resolved to: its metadata holds every public setting that shapes
the result (docs/design.md §9); file paths are not stored.
"""

from __future__ import annotations

import json
from typing import Any

import click

from dpmtv.cli._config_file import option_name

# (group, option names) in the order `dpmtv build --help` shows them
HELP_GROUPS = (
    ("Model", ("model", "dtype", "device", "model-spec", "trust-remote-code", "revision",
               "attn-implementation", "adapter-weights")),
    ("Data", ("data", "query", "query-question", "center", "public-data", "max-prompt-tokens", "batch-size")),
    ("Privacy", ("epsilon", "delta", "l2-clip-norm", "clip-quantile", "clip-epsilon-fraction",
                 "clip-utility", "clip-tolerance", "shots-per-chunk",
                 "neighbouring-relation", "num-chunks", "privacy-unit", "max-records-per-user",
                 "show-private-counts", "noise-sampler", "insecure-seeded-noise", "non-private")),
    ("Heads", ("heads", "heads-from", "select-k", "select-method", "selection-fraction",
               "selection-composition", "select-pool", "private-selection", "selection-candidates",
               "selection-utility")),
    ("Output", ("out", "force", "json", "quiet", "config", "print-config")),
    ("Ledger", ("dataset", "ledger", "ledger-timeout", "void-budget")),
    ("Distributed", ("ray", "workers", "gpus-per-worker")),
)  # fmt: skip
EXAMPLES = """\b
Examples:
  dpmtv build --model /models/Qwen2-VL-2B-Instruct --data private/records.jsonl \\
      --heads layers:8-15 --epsilon 1 --delta 1e-5 --l2-clip-norm 5 --shots-per-chunk 8 \\
      --out task.safetensors
  dpmtv build --print-config > build.toml     # edit it, then:
  dpmtv build --config build.toml --epsilon 2 --json   # flags override the file"""


class GroupedHelpCommand(click.Command):
    """A command whose ``--help`` lists its options under the headings of :data:`HELP_GROUPS`."""

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        records = {option_name(p): p.get_help_record(ctx) for p in self.get_params(ctx)}
        shown: set[str] = set()
        for title, names in HELP_GROUPS:
            rows = [records[name] for name in names if records.get(name)]
            shown.update(names)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        rest = [record for name, record in records.items() if record and name not in shown]
        if rest:
            with formatter.section("Other"):
                formatter.write_dl(rest)


def print_json_summary(path: Any, *, ledger_status: Any = None) -> None:
    """``--json``: the build's summary as one JSON object on stdout (the written artifact's
    metadata, read back as it is on disk, its path, its card's and signature's paths (null: not
    signed) and the dataset's ledger status when one was charged)."""
    from dpmtv.artifact.card import card_path
    from dpmtv.artifact.signature import signature_path
    from dpmtv.artifact.vector import load_task_vector

    metadata = load_task_vector(path).metadata
    signature = signature_path(path)
    summary: dict[str, Any] = {
        "path": str(path),
        "card": str(card_path(path)),
        "signature": str(signature) if signature.is_file() else None,
        "metadata": json.loads(metadata.model_dump_json()),
    }
    if ledger_status is not None:
        summary["ledger"] = {
            "dataset": ledger_status.name,
            "epsilon_spent": ledger_status.epsilon_spent,
            "epsilon_budget": ledger_status.epsilon_budget,
            "delta": ledger_status.delta,
            "void": bool(ledger_status.void),
        }
    click.echo(json.dumps(summary))

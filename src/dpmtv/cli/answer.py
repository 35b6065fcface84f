from __future__ import annotations

import json
from pathlib import Path

import click

from dpmtv.cli._common import console, err_console, guarantee_text, model_options, trusted_key_option
from dpmtv.errors import ParameterError


@click.command(name="answer")
@model_options
@click.option(
    "--vector",
    "vector_path",
    type=click.Path(path_type=Path),
    help="Task vector artifact; omit for plain zero-shot answers.",
)
@click.option(
    "--image", "images", multiple=True, type=click.Path(path_type=Path), help="Query image (repeatable)."
)
@click.option("--question", help="Query question.")
@click.option(
    "--queries",
    type=click.Path(path_type=Path),
    help="JSONL/CSV of queries (image, question; answer optional and ignored).",
)
@click.option(
    "--max-new-tokens", type=click.IntRange(min=1), default=16, show_default=True, help="Answer length cap."
)
@click.option(
    "--batch-size", type=click.IntRange(min=1), default=8, show_default=True, help="Queries per forward pass."
)
@click.option(
    "--patch-mode",
    type=click.Choice(["auto", "every-call", "prefill-only"]),
    default="auto",
    show_default=True,
    help="every-call: overwrite at the prompt's last position and at each generated token (MTV); "
    "prefill-only: the prompt only; auto: the checkpoint's recommendation (dpmtv_defaults.json), "
    "else every-call.",
)
@click.option(
    "--choices",
    help="Comma-separated closed answer set (yes,no): print each choice's probability under the "
    "vector, normalised over the choices, each choice scored exactly as it would be generated. "
    "Post-processing of the released vector: no privacy cost.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@trusted_key_option
def command(
    model_path,
    vector_path,
    images,
    question,
    queries,
    max_new_tokens,
    batch_size,
    patch_mode,
    choices,
    as_json,
    trusted_keys,
    dtype,
    device,
):
    """Answer zero-shot queries with a task vector applied (no further privacy cost)."""
    from dpmtv.artifact.vector import load_task_vector
    from dpmtv.inference import answer_queries
    from dpmtv.models.loading import load_model

    examples, ids = _query_examples(images, question, queries)
    if trusted_keys and not vector_path:
        raise ParameterError("--trusted-key checks a --vector's signature; give --vector too")
    vector = load_task_vector(vector_path, trusted_keys=trusted_keys) if vector_path else None
    if vector is not None:  # on stderr, so that --json output stays one JSON object a line
        from rich.markup import escape

        from dpmtv.artifact.signature import signature_words

        signed = escape(signature_words(vector.signer, vector_path))
        err_console.print(
            f"task vector: {guarantee_text(vector.metadata.privacy)}; {signed}", highlight=False
        )
    loaded = load_model(model_path, dtype=dtype, device=device)
    mode = None if patch_mode == "auto" else patch_mode
    if choices is not None:
        _print_scores(
            loaded, examples, ids, choices, vector=vector, batch_size=batch_size, mode=mode, as_json=as_json
        )
        return
    answers = answer_queries(
        loaded, examples, vector=vector, max_new_tokens=max_new_tokens, batch_size=batch_size, mode=mode
    )
    for query_id, text in zip(ids, answers, strict=False):
        if as_json:
            click.echo(json.dumps({"id": query_id, "answer": text}))
        else:
            console.print(f"{query_id}\t{text}" if queries else text, highlight=False)


def _print_scores(loaded, examples, ids, choices, *, vector, batch_size, mode, as_json):
    from dpmtv.inference import choice_probabilities

    names = [choice.strip() for choice in choices.split(",")]
    scores = choice_probabilities(loaded, examples, names, vector=vector, batch_size=batch_size, mode=mode)
    for query_id, probabilities in zip(ids, scores, strict=True):
        best = max(probabilities, key=probabilities.__getitem__)
        if as_json:
            click.echo(json.dumps({"id": query_id, "answer": best, "probabilities": probabilities}))
        else:
            shown = "  ".join(f"{name}={p:.4f}" for name, p in probabilities.items())
            console.print(f"{query_id}\t{best}\t{shown}", highlight=False)


def _query_examples(images, question, queries):
    from dpmtv.data import load_records
    from dpmtv.data.prompts import Example
    from dpmtv.data.records import Record, validate_records

    if queries and (images or question):
        raise ParameterError("give either --queries FILE or --image/--question, not both")
    if queries:
        records = load_records(queries, require_answer=False)
    elif images and question is not None:
        records = validate_records(
            [Record("query", tuple(Path(p).resolve() for p in images), question, "", where="--image")],
            source="--image",
        )
    else:
        raise ParameterError("give --image and --question, or --queries FILE")
    return [Example(r.load_images(), r.question) for r in records], [r.record_id for r in records]

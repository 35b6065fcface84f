"""``POST /v1/choices`` (a dpmtv endpoint, not OpenAI's): each answer of a closed set scored
under a served vector, for a client that thresholds on a probability.

The body is a chat request's ``model`` and ``messages`` (images included) with ``choices``, the
answers (2 to 16 strings). Each answer is scored exactly as it would be generated
(:func:`dpmtv.inference.choice_probabilities`); the probabilities are normalised over the
answers. Scoring runs on the generation thread, between batches (the vector's hooks are on the
one model). Post-processing of the released vector: no privacy cost.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dpmtv.data.prompts import Prompt
from dpmtv.serve._body import parse_json_body
from dpmtv.serve._errors import ApiError
from dpmtv.serve._generation import row_patches
from dpmtv.serve._messages import Message, decoded_prompt, plan_turns
from dpmtv.serve._options import served_vector
from dpmtv.serve._requests import validated
from dpmtv.serve._served import ServedModel
from dpmtv.serve._settings import ServeSettings

MAX_ANSWERS = 16


class ChoicesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    messages: list[Message] = Field(min_length=1)
    choices: list[str] = Field(min_length=2, max_length=MAX_ANSWERS)


def prepared_choices(
    body: bytes, served: ServedModel, settings: ServeSettings
) -> tuple[ChoicesRequest, Prompt]:
    """The checked request and its conversation, images decoded (in the prepare pool)."""
    request = validated(ChoicesRequest, parse_json_body(body))
    served_vector(request.model, served)
    if len(set(request.choices)) < len(request.choices) or not all(request.choices):
        raise ApiError(
            400, "choices must be distinct non-empty answers", code="invalid_choices", param="choices"
        )
    turns = plan_turns(request.messages, settings)
    return request, decoded_prompt(turns, min_side=served.image_min_side)


def score_choices(served: ServedModel, request: ChoicesRequest, prompt: Prompt) -> dict[str, Any]:
    from dpmtv.inference import choice_probabilities

    # one batch: the prompt once per answer, each row patched with the served vector's layout
    answers = len(request.choices)
    with row_patches(served, [served.vectors.get(request.model)] * answers):
        [probabilities] = choice_probabilities(served.loaded, [prompt], request.choices, batch_size=answers)
    return {
        "object": "choice_scores",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"text": text, "probability": p} for text, p in probabilities.items()],
    }

"""The sampling fields both completion endpoints share, and the per-row decoding they ask for."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from dpmtv.serve._decoding import MAX_TOP_LOGPROBS, Decoding
from dpmtv.serve._errors import ApiError
from dpmtv.serve._served import ServedModel, ServedVector

MAX_CHOICES = 8  # n: each choice is a row of a batch
MAX_STOPS = 4  # OpenAI's limit


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class SamplingFields(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str
    max_tokens: int | None = None
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    seed: int | None = None
    stop: str | list[str] = Field(default_factory=list)
    logit_bias: dict[str, float] = Field(default_factory=dict)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    stream: bool = False
    stream_options: StreamOptions | None = None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    def check_stream_options(self) -> None:
        if self.stream_options is not None and not self.stream:
            raise ApiError(
                400, "stream_options needs stream=true", code="invalid_request", param="stream_options"
            )

    def stop_strings(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        if len(stops) > MAX_STOPS or any(not stop for stop in stops):
            raise ApiError(
                400,
                f"stop takes at most {MAX_STOPS} non-empty strings, got {stops!r}"[:200],
                code="invalid_stop",
                param="stop",
            )
        return tuple(stops)

    def decodings(self, vocab_size: int, *, top_logprobs: int | None) -> tuple[Decoding, ...]:
        """One decoding per choice; with a seed, choice ``i`` samples with ``seed + i``."""
        bias = tuple(_bias(token, value, vocab_size) for token, value in self.logit_bias.items())
        return tuple(
            Decoding(
                temperature=self.temperature,
                top_p=self.top_p,
                seed=None if self.seed is None else self.seed + i,
                logit_bias=bias,
                frequency_penalty=self.frequency_penalty,
                presence_penalty=self.presence_penalty,
                logprobs=top_logprobs is not None,
                top_logprobs=top_logprobs or 0,
            )
            for i in range(self.n)
        )


def check_top_logprobs(top_logprobs: int) -> None:
    if not 0 <= top_logprobs <= MAX_TOP_LOGPROBS:
        raise ApiError(
            400,
            f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {top_logprobs}",
            code="invalid_logprobs",
            param="top_logprobs",
        )


def served_vector(name: str, served: ServedModel) -> ServedVector | None:
    if name == served.name:
        return None
    if name not in served.vectors:
        raise ApiError(
            404,
            f"model '{name}' is not served here; choose one of: {', '.join(served.model_names)}",
            code="model_not_found",
            param="model",
        )
    return served.vectors[name]


def max_new_tokens(requested: int | None, field: str, *, default: int, cap: int) -> int:
    if requested is None:
        return default
    if requested < 1:
        raise ApiError(
            400, f"{field} must be at least 1, got {requested}", code="max_tokens_out_of_range", param=field
        )
    # An upper bound, as in OpenAI's API: the server's cap (--max-tokens) cuts longer answers,
    # and a cut answer says so with finish_reason "length".
    return min(requested, cap)


def _bias(token: str, value: float, vocab_size: int) -> tuple[int, float]:
    if not token.isdigit() or int(token) >= vocab_size or not -100 <= value <= 100:
        raise ApiError(
            400,
            f"logit_bias maps token ids (0 to {vocab_size - 1}) to values from -100 to 100, got "
            f"{token[:20]!r}: {value}",
            code="invalid_logit_bias",
            param="logit_bias",
        )
    return int(token), value

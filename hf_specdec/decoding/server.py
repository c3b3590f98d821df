"""Serving a stream of requests with continuous batching of speculative steps.

    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=8, do_sample=False)
    request = server.submit(tokenizer("...", return_tensors="pt").input_ids[0], max_new_tokens=128)
    while server.busy:
        for request in server.step():     # one drafted target forward for every running request
            print(request.output_ids if request.error is None else request.error)

Requests wait in a queue; each `step()` first admits waiting ones (up to `max_batch_size` running; prompts of
similar length are prefilled together, the others apart, and all join the batch), runs one speculative step for
the whole batch (`SpeculativeBatch`), then lets finished requests leave. Every request's tokens are exactly what
`target.generate` would give it alone with the same settings (greedy) or are distributed as its sampling
(do_sample): each request gets the logits processors `generate()` builds for it (repetition penalty, n-gram
blocking, min_new_tokens, suppressed or biased tokens, the sampling warpers, ...), and settings the server cannot
honour are refused with a ValueError. A request's `streamer` (e.g. `TextStreamer`) receives its tokens as they are
committed.

A failure stays with what caused it:
- `submit()` checks the prompt (one row of integer ids inside the target's vocabulary), `max_new_tokens`, the
  streamer and the request's own settings, and raises there, before anything is queued;
- a request whose prefill or streamer raises leaves with `status == "failed"` and the exception in `error`; every
  other request goes on and gets exactly the output it would have had alone;
- an exception inside a step (out of memory in one layer, say) first undoes the step (`SpeculativeBatch.checkpoint`:
  the target's cache, each row's drafter context and queued features, the committed tokens), then propagates: no
  request is lost, and calling `step()` or `run()` again retries the step (or `cancel()` what should not be retried);
- `cancel(request)` takes a request out of the queue or the running batch at once.
The server is not thread-safe: submit, step and cancel from one thread.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import operator
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Literal

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel
from transformers.generation import logits_process

from ..models.padding import length_groups
from ..verification.stats import AcceptanceStats
from .batch import Row, SpeculativeBatch
from .step import speculative_step
from .validation import validate_generation_settings

Status = Literal["waiting", "running", "finished", "failed", "cancelled"]
DEFAULT_MAX_NEW_TOKENS = 128
_SETTINGS = frozenset(name for name in vars(GenerationConfig()) if not name.startswith("_"))
# settings a request may set for itself in `submit()`: they only change how its own logits are processed
PER_REQUEST_SETTINGS = _SETTINGS & {
    "temperature", "top_k", "top_p", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h",
    "repetition_penalty", "encoder_repetition_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size",
    "bad_words_ids", "sequence_bias", "min_length", "min_new_tokens", "suppress_tokens", "begin_suppress_tokens",
    "forced_bos_token_id", "forced_eos_token_id", "exponential_decay_length_penalty", "remove_invalid_values",
    "renormalize_logits",
}  # fmt: skip
# processors that are functions of (tokens so far, scores) only, so every verified row gets exactly generate()'s p
_EXACT_PROCESSORS = tuple(
    getattr(logits_process, name)
    for name in (
        "MinLengthLogitsProcessor", "MinNewTokensLengthLogitsProcessor", "TemperatureLogitsWarper",
        "RepetitionPenaltyLogitsProcessor", "EncoderRepetitionPenaltyLogitsProcessor", "TopPLogitsWarper",
        "TopKLogitsWarper", "TopHLogitsWarper", "MinPLogitsWarper", "TypicalLogitsWarper", "EpsilonLogitsWarper",
        "EtaLogitsWarper", "NoRepeatNGramLogitsProcessor", "EncoderNoRepeatNGramLogitsProcessor",
        "SequenceBiasLogitsProcessor", "NoBadWordsLogitsProcessor", "ForcedBOSTokenLogitsProcessor",
        "ForcedEOSTokenLogitsProcessor", "InfNanRemoveLogitsProcessor", "ExponentialDecayLengthPenalty",
        "LogitNormalization", "SuppressTokensAtBeginLogitsProcessor", "SuppressTokensLogitsProcessor",
    )
    if hasattr(logits_process, name)  # TopH is recent
)  # fmt: skip


@dataclass(eq=False)
class Request:
    """One prompt's generation; times are `time.perf_counter()` seconds.

    `status`: "waiting" (queued), "running" (in the batch), then "finished" (stopped at EOS, a length limit or a
    criterion), "failed" (`error` holds the exception: its prefill or its streamer raised) or "cancelled"
    (`SpeculativeServer.cancel`). A failed or cancelled request keeps the tokens committed before it left.
    """

    id: int
    prompt: torch.LongTensor  # (T,)
    max_new_tokens: int
    streamer: object | None = None
    submitted_at: float = 0.0
    started_at: float | None = None  # admitted into the batch (prefill)
    finished_at: float | None = None  # left the server (finished, failed or cancelled)
    status: Status = "waiting"
    error: BaseException | None = None
    row: Row | None = field(default=None, repr=False)
    processors: LogitsProcessorList | None = field(default=None, repr=False)  # what generate() would apply to it
    streamed: int = 0

    @property
    def done(self) -> bool:
        """Whether it has left the server (finished, failed or cancelled)."""
        return self.status in ("finished", "failed", "cancelled")

    @property
    def new_tokens(self) -> list[int]:
        return [] if self.row is None else self.row.new_tokens

    @property
    def stats(self) -> AcceptanceStats | None:
        """What the drafter achieved for this request (None before it is admitted)."""
        return None if self.row is None else self.row.generator.stats

    @property
    def output_ids(self) -> torch.LongTensor:
        """(T + n,) prompt and generated tokens."""
        return torch.cat([self.prompt, torch.tensor(self.new_tokens, dtype=torch.long)])

    @property
    def latency(self) -> float | None:
        """Seconds from submission to leaving the server (the last token, for a finished request)."""
        return None if self.finished_at is None else self.finished_at - self.submitted_at


class SpeculativeServer:
    """Continuous batching of speculative decoding for one target and one drafter (any hf_specdec kind).

    `generation_config` / `generation_kwargs`: the settings every request starts from (the target's generation
    config by default), as `generate()` takes them; `max_new_tokens` here is the default for `submit()` (else 128).
    """

    def __init__(
        self,
        target: PreTrainedModel,
        drafter: PreTrainedModel,
        max_batch_size: int = 8,
        generation_config: GenerationConfig | None = None,
        **generation_kwargs,
    ) -> None:
        if isinstance(max_batch_size, bool) or not isinstance(max_batch_size, int) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
        _check_setting_names(generation_kwargs, "SpeculativeServer()")
        if "max_length" in generation_kwargs:
            raise ValueError(
                "max_length counts the prompt, which differs per request: give max_new_tokens instead (here as the "
                "default, or per request to submit())."
            )
        base = generation_config if generation_config is not None else target.generation_config
        if not isinstance(base, GenerationConfig):
            raise TypeError(f"generation_config must be a transformers GenerationConfig, got {type(base).__name__}")
        config = GenerationConfig.from_dict({**base.to_dict()})
        config.update(**generation_kwargs)
        if config.pad_token_id is None:
            config.pad_token_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else 0
        if (config.num_beams or 1) != 1 or (config.num_return_sequences or 1) != 1:
            raise ValueError("the server decodes one sequence per request: num_beams and num_return_sequences = 1")
        _refuse_unapplied(config)
        validate_generation_settings(target, drafter, config.get_generation_mode(drafter), config)
        target._prepare_special_tokens(config, True, device=target.device)  # the EOS tensors processors read
        self.config = config
        self.default_max_new_tokens = config.max_new_tokens or DEFAULT_MAX_NEW_TOKENS
        self.vocab_size = target.get_input_embeddings().weight.shape[0]
        self.max_batch_size = max_batch_size
        self.batch = SpeculativeBatch(target, drafter, config)  # processors are per row: each request's own
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._left: list[Request] = []  # left (finished or failed) since the last step() returned
        self._ids = itertools.count()

    # -- the public surface ----------------------------------------------------------------------------------------
    def submit(self, prompt, max_new_tokens: int | None = None, streamer=None, **generation_kwargs) -> Request:
        """Queue a prompt ((T,) or (1, T) integer token ids); it joins the batch at the next `step()` with room.

        `max_new_tokens`: the server's default when None. `streamer`: an object with `put` and `end` (e.g.
        `TextStreamer`). `generation_kwargs`: this request's own settings over the server's, those in
        `PER_REQUEST_SETTINGS` (temperature, top_p, repetition_penalty, min_new_tokens, ...). What cannot be
        served raises TypeError or ValueError here, and nothing is queued."""
        ids = self._checked_prompt(prompt)
        if max_new_tokens is None:
            max_new_tokens = self.default_max_new_tokens
        max_new_tokens = _checked_max_new_tokens(max_new_tokens)
        if streamer is not None and not all(callable(getattr(streamer, m, None)) for m in ("put", "end")):
            raise TypeError(f"a streamer needs put() and end() methods (e.g. TextStreamer); got {streamer!r}")
        processors = self._processors(ids, max_new_tokens, generation_kwargs)
        request = Request(next(self._ids), ids, max_new_tokens, streamer, submitted_at=time.perf_counter())
        request.processors = processors
        self.waiting.append(request)
        return request

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[Request]:
        """Admit waiting requests, run one speculative step, return the requests that left in it: finished ones and
        failed ones (`error` set). If the step itself raises, it is undone before the exception propagates: every
        request is as it was, and calling `step()` again retries it."""
        self._admit()
        self._retire()
        if any(not row.done for row in self.batch.rows):
            restore = self.batch.checkpoint()
            try:
                speculative_step(self.batch)
            except BaseException:
                restore()
                raise
        for request in list(self.running):
            self._stream(request)
            if request.status == "running" and request.row.done:
                self._finish(request)
        self._retire()
        left, self._left = self._left, []
        return left

    def run(self) -> list[Request]:
        """Step until no request waits or runs; returns those that left (finished or failed), in that order. An
        exception from a step propagates after the step is undone: call `run()` again to go on."""
        done = []
        while self.busy:
            done.extend(self.step())
        return done

    def cancel(self, request: Request) -> bool:
        """Take `request` out of the queue or the running batch now (the others are unaffected); its streamer is
        ended and it keeps the tokens it has. Returns False if it had already left (finished, failed, cancelled)."""
        if request.done:
            return False
        if request in self.waiting:
            self.waiting.remove(request)
        elif request not in self.running:
            raise ValueError(f"request {request.id} was not submitted to this server")
        request.status, request.finished_at = "cancelled", time.perf_counter()
        self._close_stream(request)
        self._retire()
        return True

    # -- admission -------------------------------------------------------------------------------------------------
    def _admit(self) -> None:
        """Prefill waiting requests into the batch, together; if that fails, each alone, so one request that cannot
        be prefilled fails alone."""
        room = self.max_batch_size - len(self.running)
        joining = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
        if not joining:
            return
        try:
            try:
                self._join(joining)
                return
            except Exception as error:
                if len(joining) == 1:
                    self._fail(joining[0], error)
                    return
            for request in joining:
                try:
                    self._join([request])
                except Exception as error:
                    self._fail(request, error)
        except BaseException:  # interrupted: whoever has not joined or failed waits again, in order
            self.waiting.extendleft(reversed([r for r in joining if r.status == "waiting"]))
            raise

    def _join(self, requests: list[Request]) -> None:
        """Prefill `requests` into the batch: prompts of similar length together, the others in prefills of their
        own (`length_groups`: a left-padded prefill computes every prompt at the longest one's length)."""
        restore = self.batch.checkpoint()
        try:
            joined = []
            for group in length_groups([r.prompt.numel() for r in requests]):
                members = [requests[i] for i in group]
                rows = self.batch.add(
                    [r.prompt for r in members],
                    [r.prompt.numel() + r.max_new_tokens for r in members],
                    processors=[r.processors for r in members],
                )
                joined.extend(zip(members, rows, strict=True))
        except BaseException:
            restore()
            raise
        now = time.perf_counter()
        for request, row in sorted(joined, key=lambda pair: pair[0].id):
            request.row, request.started_at, request.status = row, now, "running"
            self.running.append(request)
            self._put(request, request.prompt[None])

    # -- streaming and leaving -------------------------------------------------------------------------------------
    def _stream(self, request: Request) -> None:
        if request.status == "running" and len(request.new_tokens) > request.streamed:
            new = torch.tensor(request.new_tokens[request.streamed :])
            request.streamed = len(request.new_tokens)
            self._put(request, new)

    def _put(self, request: Request, tokens: torch.Tensor) -> None:
        if request.streamer is None:
            return
        try:
            request.streamer.put(tokens)
        except Exception as error:
            self._fail(request, error)

    def _finish(self, request: Request) -> None:
        if request.streamer is not None:
            try:
                request.streamer.end()
            except Exception as error:
                self._leave(request, "failed", error)
                return
        self._leave(request, "finished")

    def _fail(self, request: Request, error: BaseException) -> None:
        self._leave(request, "failed", error)
        self._close_stream(request)

    def _leave(self, request: Request, status: Status, error: BaseException | None = None) -> None:
        request.status, request.error, request.finished_at = status, error, time.perf_counter()
        self._left.append(request)

    @staticmethod
    def _close_stream(request: Request) -> None:
        """End a failed or cancelled request's stream, so a consumer waiting on it (TextIteratorStreamer) is
        released; what end() raises is kept in `request.error` when no earlier error is there."""
        if request.streamer is None:
            return
        try:
            request.streamer.end()
        except Exception as error:
            request.error = request.error or error

    def _retire(self) -> None:
        """The rows of requests that left (finished, failed, cancelled) leave the batch."""
        if all(r.status == "running" for r in self.running):
            return
        staying = {id(r.row) for r in self.running if r.status == "running"}
        restore = self.batch.checkpoint()
        try:
            self.batch.drop([i for i, row in enumerate(self.batch.rows) if id(row) in staying])
        except BaseException:
            restore()
            raise
        self.running = [r for r in self.running if r.status == "running"]
        self.batch.budget.save()  # the cost curve to the cache file (never raises for it)

    # -- what submit() checks --------------------------------------------------------------------------------------
    def _checked_prompt(self, prompt) -> torch.LongTensor:
        """(T,) long ids on the host, a copy; TypeError / ValueError naming what is wrong with `prompt`."""
        if isinstance(prompt, str):
            raise TypeError("submit() takes token ids, not text: tokenizer(text, return_tensors='pt').input_ids[0]")
        try:
            ids = prompt if isinstance(prompt, torch.Tensor) else torch.as_tensor(prompt)
        except (TypeError, ValueError, RuntimeError) as error:
            raise TypeError(f"a prompt is a (T,) or (1, T) tensor or list of token ids; got {prompt!r}") from error
        if ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
            raise TypeError(
                f"prompt token ids must be integers, got dtype {ids.dtype}: pass the tokenizer's input_ids "
                "(tokenizer(text, return_tensors='pt').input_ids[0])"
            )
        if ids.dim() == 2 and ids.shape[0] == 1:
            ids = ids[0]
        if ids.dim() != 1:
            more = f": submit each of the {ids.shape[0]} rows as its own request" if ids.dim() == 2 else ""
            raise ValueError(f"a request takes one prompt, shape (T,) or (1, T); got {tuple(ids.shape)}{more}")
        if ids.numel() == 0:
            raise ValueError("a request needs at least one prompt token")
        bad = ((ids < 0) | (ids >= self.vocab_size)).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise ValueError(
                f"prompt token id {int(ids[i])} at position {i} is outside the target's vocabulary [0, "
                f"{self.vocab_size}): was the prompt made by this target's tokenizer?"
            )
        return ids.detach().to(device="cpu", dtype=torch.long).clone()

    def _processors(self, prompt: torch.LongTensor, max_new_tokens: int, overrides: dict) -> LogitsProcessorList:
        """The logits processors `generate()` builds for this prompt with the server's settings and `overrides`."""
        _check_setting_names(overrides, "submit()")
        if "max_length" in overrides:
            raise ValueError("give a request's length as max_new_tokens (max_length counts the prompt)")
        batch_wide = sorted(set(overrides) - PER_REQUEST_SETTINGS)
        if batch_wide:
            raise ValueError(
                f"{batch_wide} apply to the whole batch: set them on the SpeculativeServer. A request may set "
                f"max_new_tokens, streamer and {sorted(PER_REQUEST_SETTINGS)}."
            )
        config = copy.deepcopy(self.config)
        config.update(**overrides)
        T, target = prompt.numel(), self.batch.target
        config.max_new_tokens, config.max_length = max_new_tokens, T + max_new_tokens  # as generate() sets them
        if config.min_new_tokens is not None:
            config.min_length = config.min_new_tokens + T
        dev = target.device
        processors = target._get_logits_processor(
            generation_config=config,
            input_ids_seq_length=T,
            encoder_input_ids=prompt[None].to(dev),
            logits_processor=LogitsProcessorList(),
            device=dev,
            model_kwargs={"attention_mask": torch.ones(1, T, dtype=torch.long, device=dev)},  # generate()'s own
        )
        inexact = [type(p).__name__ for p in processors if not isinstance(p, _EXACT_PROCESSORS)]
        if inexact:
            raise ValueError(f"the server cannot apply {inexact} exactly per verified token; unset what adds them")
        return processors


def _check_setting_names(kwargs: dict, where: str) -> None:
    """TypeError for names that are not generation settings (a misspelling would otherwise be dropped silently)."""
    unknown = [name for name in kwargs if name not in _SETTINGS]
    if not unknown:
        return
    hints = []
    for name in unknown:
        close = difflib.get_close_matches(name, _SETTINGS, n=1)
        hints.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise TypeError(f"{where} got unknown generation settings: {', '.join(hints)}")


def _checked_max_new_tokens(value) -> int:
    if isinstance(value, bool):
        raise TypeError(f"max_new_tokens must be an int >= 1, got {value!r}")
    try:
        value = operator.index(value)
    except TypeError as error:
        raise TypeError(f"max_new_tokens must be an int >= 1, got {value!r}") from error
    if value < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {value}")
    return value


# settings generate() honours that the server does not, with what to do instead
_UNAPPLIED = {
    "guidance_scale": "classifier-free guidance runs the target a second time per token, with a cache of its own; "
    "call target.generate for it",
    "watermarking_config": "watermarks are not applied per verified token; call target.generate for them",
    "stop_strings": "stop strings need a tokenizer: stop on token ids with eos_token_id, or cancel() the request",
    "max_time": "time-limit a request with cancel()",
    "token_healing": "token healing needs a tokenizer; heal the prompt before submit()",
    "return_dict_in_generate": "a request returns its token ids (Request.output_ids); call generate for scores",
    "output_scores": "a request returns its token ids only",
    "output_logits": "a request returns its token ids only",
    "output_attentions": "a request returns its token ids only",
    "output_hidden_states": "a request returns its token ids only",
}


def _refuse_unapplied(config: GenerationConfig) -> None:
    """ValueError naming every setting in `config` that the server would otherwise drop silently."""
    found = []
    for name, fix in _UNAPPLIED.items():
        value = getattr(config, name, None)
        if value is None or value is False or (name == "guidance_scale" and value == 1):
            continue
        found.append(f"{name}={value!r} ({fix})")
    if found:
        raise ValueError("SpeculativeServer does not apply these generation settings; unset them: " + "; ".join(found))


__all__ = ["PER_REQUEST_SETTINGS", "Request", "SpeculativeServer"]

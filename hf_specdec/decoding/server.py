"""Serving a stream of requests with continuous batching of speculative steps.

    server = hf_specdec.SpeculativeServer(target, drafter, max_batch_size=8, do_sample=False)
    request = server.submit(tokenizer("...", return_tensors="pt").input_ids[0], max_new_tokens=128)
    while server.busy:
        for done in server.step():        # one drafted target forward for every running request
            print(done.output_ids)

Requests wait in a queue; each `step()` first admits waiting ones (up to `max_batch_size` running; they are
prefilled together and join the batch), runs one speculative step for the whole batch (`SpeculativeBatch`), then
lets finished requests leave. Every request's tokens are exactly what `target.generate` would give it alone
(greedy) or are distributed as its sampling (do_sample). A request's `streamer` (e.g. `TextStreamer`) receives its
tokens as they are committed.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from dataclasses import dataclass, field

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedModel
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from ..verification.stats import AcceptanceStats
from .batch import Row, SpeculativeBatch
from .step import speculative_step
from .validation import validate_generation_settings


@dataclass
class Request:
    """One prompt's generation; times are `time.perf_counter()` seconds."""

    id: int
    prompt: torch.LongTensor  # (T,)
    max_new_tokens: int
    streamer: object | None = None
    submitted_at: float = 0.0
    started_at: float | None = None  # admitted into the batch (prefill)
    finished_at: float | None = None
    row: Row | None = field(default=None, repr=False)
    streamed: int = 0

    @property
    def done(self) -> bool:
        return self.finished_at is not None

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
        """Seconds from submission to the last token."""
        return None if self.finished_at is None else self.finished_at - self.submitted_at


class SpeculativeServer:
    """Continuous batching of speculative decoding for one target and one drafter (any hf_specdec kind)."""

    def __init__(
        self,
        target: PreTrainedModel,
        drafter: PreTrainedModel,
        max_batch_size: int = 8,
        generation_config: GenerationConfig | None = None,
        **generation_kwargs,
    ) -> None:
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        config = GenerationConfig.from_dict({**(generation_config or target.generation_config).to_dict()})
        config.update(**generation_kwargs)
        if config.pad_token_id is None:
            config.pad_token_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else 0
        if (config.num_beams or 1) != 1 or (config.num_return_sequences or 1) != 1:
            raise ValueError("the server decodes one sequence per request: num_beams and num_return_sequences = 1")
        validate_generation_settings(target, drafter, GenerationMode.ASSISTED_GENERATION, config)
        self.max_batch_size = max_batch_size
        self.batch = SpeculativeBatch(target, drafter, config, _sampling_processors(config))
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self._ids = itertools.count()

    def submit(self, prompt, max_new_tokens: int = 128, streamer=None) -> Request:
        """Queue a prompt ((T,) or (1, T) ids); it joins the batch at the next `step()` with room."""
        prompt = torch.as_tensor(prompt, dtype=torch.long).reshape(-1).cpu()
        if prompt.numel() == 0 or max_new_tokens < 1:
            raise ValueError("a request needs at least one prompt token and max_new_tokens >= 1")
        request = Request(next(self._ids), prompt, max_new_tokens, streamer, submitted_at=time.perf_counter())
        self.waiting.append(request)
        return request

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> list[Request]:
        """Admit waiting requests, run one speculative step, return the requests that finished in it."""
        self._admit()
        if any(not r.row.done for r in self.running):
            speculative_step(self.batch)
        finished = []
        now = time.perf_counter()
        for request in self.running:
            self._stream(request)
            if request.row.done:
                request.finished_at = now
                finished.append(request)
                if request.streamer is not None:
                    request.streamer.end()
        if finished:
            if self.batch.budget is not None:
                self.batch.budget.costs.save()
            self.batch.drop_finished()
            self.running = [r for r in self.running if not r.done]
        return finished

    def run(self) -> list[Request]:
        """Step until every submitted request has finished; returns them in finishing order."""
        done = []
        while self.busy:
            done.extend(self.step())
        return done

    def _admit(self) -> None:
        room = self.max_batch_size - len(self.running)
        if room <= 0 or not self.waiting:
            return
        joining = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
        now = time.perf_counter()
        prompts = [r.prompt.to(self.batch.target.device) for r in joining]
        rows = self.batch.add(prompts, [r.prompt.numel() + r.max_new_tokens for r in joining])
        for request, row in zip(joining, rows, strict=True):
            request.row, request.started_at = row, now
            if request.streamer is not None:
                request.streamer.put(request.prompt[None])
        self.running.extend(joining)

    def _stream(self, request: Request) -> None:
        if request.streamer is not None and len(request.new_tokens) > request.streamed:
            request.streamer.put(torch.tensor(request.new_tokens[request.streamed :]))
        request.streamed = len(request.new_tokens)


def _sampling_processors(config: GenerationConfig) -> LogitsProcessorList:
    """What plain sampling applies to the logits: temperature, top-k, top-p (nothing for greedy)."""
    procs = LogitsProcessorList()
    if not config.do_sample:
        return procs
    if config.temperature is not None and config.temperature != 1.0:
        procs.append(TemperatureLogitsWarper(config.temperature))
    if config.top_k:
        procs.append(TopKLogitsWarper(config.top_k))
    if config.top_p is not None and config.top_p < 1.0:
        procs.append(TopPLogitsWarper(config.top_p))
    return procs


__all__ = ["Request", "SpeculativeServer"]

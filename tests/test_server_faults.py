"""The server under bad input and faults: a request that fails fails alone, a step that raises is undone and can be
retried, requests can be cancelled, and every setting generate() applies is applied (or refused), so each request
gets exactly what `target.generate` gives its prompt alone."""

import pytest
import torch
from conftest import VOCAB, OracleDrafter, make_drafter, tiny_target

from hf_specdec import DecodingSettings, Request, SpeculativeServer

FIXED_CHAIN = DecodingSettings(budget="fixed")
FIXED_TREE = DecodingSettings(budget="fixed", tree_budget=5)


def make_prompts(lengths, seed=21, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB - 1, (n,), generator=g).to(device) for n in lengths]


def alone(target, prompt, new_tokens, **settings):
    return target.generate(prompt[None], max_new_tokens=new_tokens, do_sample=False, **settings)[0].cpu()


def oracle_for(target, prompts, new_tokens, corrupt_ats, settings=FIXED_CHAIN, own=None, **kwargs):
    """An oracle drafter (block 4) that knows each prompt's greedy continuation under its settings (`own[i]`) and
    errs at `corrupt_ats[i]`: steps accept all, none or some drafts, so the cache is cropped and gathered."""
    drafter = make_drafter(target, 4, cls=OracleDrafter, **kwargs)
    own = own or [{}] * len(prompts)
    drafter.references = [alone(target, p, new_tokens + 4, **o)[None] for p, o in zip(prompts, own, strict=True)]
    drafter.corrupt_ats = corrupt_ats
    drafter.decoding = settings
    return drafter


class Stream:
    """A streamer that keeps what it is given."""

    def __init__(self):
        self.tokens, self.ended = [], False

    def put(self, value):
        self.tokens.extend(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


class BrokenStream(Stream):
    """Raises at its `put_number`-th put (1 = the prompt), or at end() when `put_number` is None."""

    def __init__(self, put_number):
        super().__init__()
        self.put_number, self.puts = put_number, 0
        self.error = OSError("the client went away")

    def put(self, value):
        self.puts += 1
        if self.puts == self.put_number:
            raise self.error
        super().put(value)

    def end(self):
        super().end()
        if self.put_number is None:
            raise self.error


class Fault:
    """A forward pre-hook that raises an out-of-memory error once (or always), after `skip` more calls, once armed."""

    def __init__(self):
        self.countdown, self.always, self.fired = None, False, 0

    def arm(self, skip=0, always=False):
        self.countdown, self.always = skip, always

    def __call__(self, module, args):
        if self.countdown is None:
            return
        if self.countdown > 0:
            self.countdown -= 1
            return
        self.countdown = 0 if self.always else None
        self.fired += 1
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB (injected)")


def assert_each_equals_alone(target, requests, prompts, budgets, streams=None, only=None):
    """Requests `only` (all by default) finished with exactly `generate()`'s output for their prompt alone."""
    for i in range(len(requests)) if only is None else only:
        expected = alone(target, prompts[i], budgets[i])
        assert requests[i].status == "finished" and requests[i].error is None
        assert torch.equal(requests[i].output_ids, expected), f"request {i} differs from generate() alone"
        if streams is not None:
            assert streams[i].tokens == expected.tolist() and streams[i].ended


# -- submit() and the server refuse what they cannot serve, before anything is queued -----------------------------


@pytest.mark.parametrize(
    "prompt, kwargs, error, words",
    [
        (torch.tensor([5, 6, VOCAB]), {}, ValueError, "outside the target's vocabulary"),
        (torch.tensor([5, -1, 6]), {}, ValueError, "outside the target's vocabulary"),
        (torch.ones(2, 6, dtype=torch.long), {}, ValueError, "each of the 2 rows as its own request"),
        (torch.ones(1, 2, 3, dtype=torch.long), {}, ValueError, "one prompt"),
        (torch.tensor([5.0, 6.0, 7.0]), {}, TypeError, "must be integers"),
        ([5.5, 6.0], {}, TypeError, "must be integers"),
        (torch.tensor([True, False]), {}, TypeError, "must be integers"),
        ("Hello", {}, TypeError, "not text"),
        (torch.tensor([], dtype=torch.long), {}, ValueError, "at least one prompt token"),
        (torch.tensor([5, 6]), {"max_new_tokens": 0}, ValueError, "max_new_tokens must be >= 1"),
        (torch.tensor([5, 6]), {"max_new_tokens": True}, TypeError, "max_new_tokens"),
        (torch.tensor([5, 6]), {"max_new_tokens": 2.5}, TypeError, "max_new_tokens"),
        (torch.tensor([5, 6]), {"streamer": object()}, TypeError, "put\\(\\) and end\\(\\)"),
        (torch.tensor([5, 6]), {"max_new_token": 5}, TypeError, "did you mean 'max_new_tokens'"),
        (torch.tensor([5, 6]), {"repetiton_penalty": 1.2}, TypeError, "did you mean 'repetition_penalty'"),
        (torch.tensor([5, 6]), {"do_sample": True}, ValueError, "whole batch"),
        (torch.tensor([5, 6]), {"max_length": 9}, ValueError, "max_new_tokens"),
        (torch.tensor([5, 6]), {"repetition_penalty": -1.0}, ValueError, "repetition_penalty|penalty"),
    ],
)
def test_submit_refuses_bad_input_with_a_clear_error_and_queues_nothing(prompt, kwargs, error, words):
    target = tiny_target("llama").float()
    server = SpeculativeServer(target, make_drafter(target, 4), do_sample=False)
    with pytest.raises(error, match=words):
        server.submit(prompt, **kwargs)
    assert not server.busy and server.step() == []


def test_submit_takes_one_row_prompts_as_lists_or_tensors_and_copies_them():
    target = tiny_target("llama").float()
    (prompt,) = make_prompts([7])
    server = SpeculativeServer(target, make_drafter(target, 4), do_sample=False)
    mine = prompt.clone()[None]
    requests = [server.submit(mine, 6), server.submit(prompt.tolist(), 6), server.submit(prompt.int(), 6)]
    mine[0, 0] = 9  # the caller's tensor changes after submit: the request keeps what was submitted
    assert [r.status for r in requests] == ["waiting"] * 3
    server.run()
    assert_each_equals_alone(target, requests, [prompt] * 3, [6] * 3)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"do_smaple": False}, TypeError, "did you mean 'do_sample'"),
        ({"guidance_scale": 1.5}, ValueError, "guidance_scale"),
        ({"stop_strings": ["\n"]}, ValueError, "stop_strings"),
        ({"max_time": 5.0}, ValueError, "max_time.*cancel"),
        ({"return_dict_in_generate": True, "output_scores": True}, ValueError, "return_dict_in_generate"),
        ({"max_length": 40}, ValueError, "max_new_tokens"),
        ({"num_beams": 2}, ValueError, "num_beams"),
        ({"max_batch_size": 0}, ValueError, "max_batch_size"),
    ],
)
def test_server_refuses_settings_it_would_otherwise_drop(kwargs, error, words):
    target = tiny_target("llama").float()
    with pytest.raises(error, match=words):
        SpeculativeServer(target, make_drafter(target, 4), **kwargs)


# -- generation settings: every processor generate() builds is applied, per request --------------------------------


def test_every_logits_processor_generate_applies_is_applied_per_request():
    """Server-wide repetition penalty, n-gram blocking, suppressed tokens and min_new_tokens (with an EOS the
    plain text hits early), and per-request settings over them: each request equals generate() with its settings."""
    target = tiny_target("llama").float()
    prompts = make_prompts([9, 6, 11], seed=4)
    budgets = [14, 12, 10]
    plain = alone(target, prompts[0], 14, eos_token_id=None)
    T = len(prompts[0])
    common = dict(repetition_penalty=1.3, no_repeat_ngram_size=2, suppress_tokens=[int(plain[T + 6])], min_new_tokens=4)
    common["eos_token_id"] = int(plain[T + 1])  # plain greedy would stop at its second token
    common_1 = alone(target, prompts[1], 12, **common)
    first_1 = int(common_1[len(prompts[1])])  # request 1's first token under the common settings: banned for it
    own = [{}, {"repetition_penalty": 2.0, "bad_words_ids": [[first_1]]}, {"no_repeat_ngram_size": 3}]
    settings = [common | o for o in own]
    expected = [alone(target, p, n, **s) for p, n, s in zip(prompts, budgets, settings, strict=True)]
    assert not torch.equal(expected[0], plain[: len(expected[0])])  # the settings change the text
    assert not torch.equal(expected[1][: len(common_1)], common_1)  # so do the request's own
    drafter = oracle_for(target, prompts, max(budgets), [1, None, 0], own=settings)
    server = SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False, **common)
    requests = [server.submit(p, n, **o) for p, n, o in zip(prompts, budgets, own, strict=True)]
    server.run()
    for request, want in zip(requests, expected, strict=True):
        assert request.status == "finished" and torch.equal(request.output_ids, want)
    assert sum(sum(r.stats.accepted) for r in requests) > 0  # drafts were accepted under the processors


# -- a request that fails fails alone ---------------------------------------------------------------------------


def test_a_request_whose_prefill_raises_fails_alone():
    """One prompt the model cannot prefill (its embedding raises), admitted with two good ones: it is failed with
    the error, the others get exactly their plain output."""
    target = tiny_target("llama").float()
    prompts = make_prompts([8, 7, 10])
    poison = prompts[1]

    def refuse_poison(module, args):
        ids = args[0]
        if ids.shape[1] >= len(poison) and any(torch.equal(row[-len(poison) :], poison) for row in ids):
            raise ValueError("this prompt cannot be embedded")

    target.model.embed_tokens.register_forward_pre_hook(refuse_poison)
    drafter = oracle_for(target, [prompts[0], prompts[2]], 10, [1, None])
    server = SpeculativeServer(target, drafter, max_batch_size=3, do_sample=False)
    streams = [Stream() for _ in prompts]
    requests = [server.submit(p, 10, s) for p, s in zip(prompts, streams, strict=True)]
    left = server.run()
    bad = requests[1]
    assert bad.status == "failed" and isinstance(bad.error, ValueError) and bad in left and streams[1].ended
    assert bad.new_tokens == [] and torch.equal(bad.output_ids, poison)
    assert_each_equals_alone(target, requests, prompts, [10] * 3, streams, only=[0, 2])
    assert {r.id for r in left} == {0, 1, 2} and not server.busy


@pytest.mark.parametrize("put_number", [1, 3, None], ids=["prompt", "tokens", "end"])
def test_a_streamer_that_raises_fails_only_its_request(put_number):
    target = tiny_target("llama").float()
    prompts = make_prompts([8, 7, 10], seed=3)
    budgets = [12, 10, 11]
    drafter = oracle_for(target, prompts, max(budgets), [1, None, 0])
    server = SpeculativeServer(target, drafter, max_batch_size=3, do_sample=False)
    streams = [Stream(), BrokenStream(put_number), Stream()]
    requests = [server.submit(p, n, s) for p, n, s in zip(prompts, budgets, streams, strict=True)]
    left = server.run()  # never raises: the streamer's error belongs to its request
    broken = requests[1]
    assert broken.status == "failed" and broken.error is streams[1].error and broken in left and streams[1].ended
    if put_number == 3:  # it left before its end: the others went on without it
        assert len(broken.new_tokens) < budgets[1]
    assert_each_equals_alone(target, requests, prompts, budgets, streams, only=[0, 2])


# -- an exception inside a step is undone; the step can be retried --------------------------------------------------


def serve(target, drafter, prompts, budgets, max_batch_size):
    server = SpeculativeServer(target, drafter, max_batch_size=max_batch_size, do_sample=False)
    return server, [server.submit(p, n) for p, n in zip(prompts, budgets, strict=True)]


@pytest.mark.parametrize("where", ["target", "drafter"])
@pytest.mark.parametrize("settings", [FIXED_CHAIN, FIXED_TREE], ids=["chain", "tree"])
@pytest.mark.parametrize("max_batch_size", [1, 2])
def test_an_exception_inside_a_step_is_undone_and_the_step_can_be_retried(where, settings, max_batch_size, device):
    """An out-of-memory error in one target layer (some cache layers already grown) or in the drafter's last layer
    on the second row (the first row's drafter context already extended): step() raises, nothing changed, and the
    run then finishes with exactly plain output and the same acceptance as a run without the fault."""
    target = tiny_target("llama", device=device).float()
    prompts = make_prompts([9, 6, 11], seed=8, device=device)
    budgets = [16, 14, 10]
    drafter = oracle_for(target, prompts, max(budgets), [1, None, 0], settings, num_hidden_layers=2)
    clean_server, clean = serve(target, drafter, prompts, budgets, max_batch_size)
    clean_server.run()

    fault = Fault()
    (target.model.layers[2] if where == "target" else drafter.layers[-1]).register_forward_pre_hook(fault)
    server, requests = serve(target, drafter, prompts, budgets, max_batch_size)
    server.step()
    running = list(server.running)
    before = ([len(r.new_tokens) for r in running], server.batch.valid.clone(), server.batch.cache.get_seq_length())
    fault.arm(skip=1 if where == "drafter" and max_batch_size == 2 else 0)
    with pytest.raises(RuntimeError, match="out of memory"):
        server.step()
    assert fault.fired == 1 and server.running == running and all(r.status == "running" for r in running)
    after = ([len(r.new_tokens) for r in running], server.batch.valid, server.batch.cache.get_seq_length())
    assert before[0] == after[0] and torch.equal(before[1], after[1]) and before[2] == after[2]
    left = server.run()  # the retried step and the rest
    assert {r.id for r in left} == {0, 1, 2}
    assert_each_equals_alone(target, requests, prompts, budgets)
    for request, reference in zip(requests, clean, strict=True):
        assert request.stats.accepted == reference.stats.accepted  # no step counted twice, no context lost
        mine, clean_gen = request.row.generator, reference.row.generator
        assert mine.context_rows == clean_gen.context_rows
        assert mine.cache.get_seq_length() == clean_gen.cache.get_seq_length()  # the drafter's own context cache


def test_an_exception_while_prefilling_a_group_is_retried_one_by_one():
    """A fault in the joint prefill of three requests: each is prefilled alone and all finish exactly."""
    target = tiny_target("llama").float()
    prompts = make_prompts([9, 6, 11], seed=8)
    drafter = oracle_for(target, prompts, 10, [1, None, 0])
    fault = Fault()
    target.model.layers[1].register_forward_pre_hook(fault)
    server, requests = serve(target, drafter, prompts, [10] * 3, 3)
    fault.arm()
    server.run()
    assert fault.fired == 1
    assert_each_equals_alone(target, requests, prompts, [10] * 3)


def test_a_step_that_keeps_failing_leaves_every_request_cancellable():
    """Nothing hangs: with a target that fails every step, each step raises and leaves the requests as they were;
    they can all be cancelled (streams ended), and the server then serves new requests exactly."""
    target = tiny_target("llama").float()
    prompts = make_prompts([9, 6, 11], seed=8)
    drafter = oracle_for(target, prompts, 10, [1, None, 0])
    fault = Fault()
    handle = target.model.layers[2].register_forward_pre_hook(fault)
    server = SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    streams = [Stream() for _ in prompts]
    requests = [server.submit(p, 10, s) for p, s in zip(prompts, streams, strict=True)]
    server.step()
    fault.arm(always=True)
    for _ in range(3):
        with pytest.raises(RuntimeError, match="out of memory"):
            server.step()
    assert [r.status for r in requests] == ["running", "running", "waiting"]
    assert all(server.cancel(r) for r in requests) and not server.busy
    assert [r.status for r in requests] == ["cancelled"] * 3 and all(s.ended for s in streams)
    handle.remove()
    again = server.submit(prompts[1], 10)
    server.run()
    assert_each_equals_alone(target, [again], [prompts[1]], [10])


def test_sampling_survives_a_fault_in_a_step(device):
    """do_sample with exact-q drafts: after an undone step, every request still runs to its length."""
    target = tiny_target("llama", device=device).float()
    prompts = make_prompts([9, 6], seed=8, device=device)
    drafter = make_drafter(target, 4, num_hidden_layers=2)
    drafter.decoding = DecodingSettings(budget="fixed", sample_branches=2)
    fault = Fault()
    drafter.layers[-1].register_forward_pre_hook(fault)
    server = SpeculativeServer(target, drafter, max_batch_size=2, do_sample=True, top_k=20, eos_token_id=None)
    requests = [server.submit(p, 12) for p in prompts]
    server.step()
    fault.arm(skip=1)
    with pytest.raises(RuntimeError, match="out of memory"):
        server.step()
    server.run()
    assert [len(r.new_tokens) for r in requests] == [12, 12] and all(r.status == "finished" for r in requests)


# -- cancel ----------------------------------------------------------------------------------------------------


def test_cancel_takes_a_request_out_of_the_queue_or_the_batch_and_the_others_are_exact(device):
    target = tiny_target("llama", device=device).float()
    prompts = make_prompts([9, 6, 11, 7], seed=12, device=device)
    budgets = [14, 12, 10, 9]
    drafter = oracle_for(target, prompts, max(budgets), [1, None, 0, 2])
    server = SpeculativeServer(target, drafter, max_batch_size=2, do_sample=False)
    streams = [Stream() for _ in prompts]
    requests = [server.submit(p, n, s) for p, n, s in zip(prompts, budgets, streams, strict=True)]
    server.step()
    running, waiting = requests[1], requests[3]
    assert running.status == "running" and waiting.status == "waiting"
    assert server.cancel(running) and server.cancel(waiting)
    assert not server.cancel(running)  # already gone
    assert running.status == waiting.status == "cancelled" and streams[1].ended and streams[3].ended
    assert running not in server.running and len(server.batch.rows) == 1
    left = server.run()
    assert {r.id for r in left} == {0, 2}  # cancelled requests are not reported as finished
    assert_each_equals_alone(target, requests, prompts, budgets, streams, only=[0, 2])
    with pytest.raises(ValueError, match="not submitted to this server"):
        server.cancel(Request(99, prompts[0], 3))

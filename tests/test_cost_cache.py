"""The step-cost cache file ($HF_SPECDEC_CACHE/step_costs.json) cannot hurt: a damaged file, one of a foreign shape,
or a location that cannot be written costs only its measurements, with exactly one warning, and generate, batches
and the server decode as plain greedy does; threads and processes saving at once never raise or tear the file."""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import threading

import pytest
import torch
from conftest import VOCAB, assert_batch_and_server_equal_plain, make_drafter, tiny_target

import hf_specdec
from hf_specdec import DecodingSettings
from hf_specdec.decoding import cost_cache, step_cost
from hf_specdec.decoding.step_cost import StepCostModel

NEW_TOKENS = 8
AUTO = DecodingSettings(budget="auto", tree_budget=6, prompt_lookup_tokens=3)
KEY = "{key}"  # replaced by the tiny target's model key

DAMAGED = {  # what the cache file holds
    "top-level list": "[1, 2]",
    "top-level string": '"curves"',
    "top-level number": "3",
    "top-level null": "null",
    "not JSON": "{not json",
    "not UTF-8": b"\xff\xfe{}",
    "entry not a mapping": json.dumps({KEY: [0.1]}),
    "strings in the curve": json.dumps({KEY: {"1": {"1": ["slow"], "2": "0.2"}}}),
    "zeros": json.dumps({KEY: {"1": {"1": [0.0], "2": [0.0], "4": [0.0]}}}),
    "negatives": json.dumps({KEY: {"1": {"1": [-1.0], "2": [-0.5]}}}),
    "NaN": json.dumps({KEY: {"1": {"1": [math.nan], "2": [math.nan]}}}),  # NaN, as json writes it
    "infinity": json.dumps({KEY: {"1": {"1": [math.inf], "2": [1e308]}}}),
    "booleans": json.dumps({KEY: {"1": {"1": [True]}}}),
    "wrong key types": json.dumps({KEY: {"rows": {"1": [0.1]}, "1": {"fed": [0.1], "0": [0.1], "-2": [0.1]}}}),
}


@pytest.fixture
def fresh(monkeypatch):
    """Curves loaded afresh from the cache file, and warnings not given yet in this process."""
    monkeypatch.setattr(step_cost, "_MODELS", {})
    monkeypatch.setattr(cost_cache, "_WARNED", set())


def cache_warnings(caplog) -> list[str]:
    """The warnings hf_specdec gave about the step-cost cache (other warnings of the library are not counted)."""
    records = [r for r in caplog.records if r.name.startswith("hf_specdec") and r.levelno >= logging.WARNING]
    return [r.getMessage() for r in records if "step-cost" in r.getMessage()]


def decode_everywhere(target) -> None:
    """generate(assistant_model=drafter), a left-padded batch and the server all give plain greedy's tokens."""
    g = torch.Generator().manual_seed(4)
    prompts = [torch.randint(3, VOCAB - 1, (n,), generator=g) for n in (10, 7)]
    drafter = make_drafter(target, 4)
    drafter.decoding = AUTO
    ids = prompts[0][None]
    plain = target.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS)
    assert torch.equal(target.generate(ids, do_sample=False, max_new_tokens=NEW_TOKENS, assistant_model=drafter), plain)
    assert_batch_and_server_equal_plain(target, drafter, prompts, NEW_TOKENS)


@pytest.mark.parametrize("kind", list(DAMAGED))
def test_a_damaged_cache_file_is_ignored_with_one_warning(kind, tmp_path, monkeypatch, caplog, fresh):
    target = tiny_target("llama")
    key = step_cost.model_key(target)
    text = DAMAGED[kind]
    path = tmp_path / "step_costs.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text.replace(KEY, key))
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(tmp_path))
    caplog.set_level(logging.WARNING)

    decode_everywhere(target)

    (message,) = cache_warnings(caplog)
    assert str(path) in message and "measured afresh" in message
    points = hf_specdec.cost_model(target).points  # measured afresh: only real timings
    assert points and all(s > 0 for fed in points.values() for v in fed.values() for s in v)
    saved = json.loads(path.read_text())  # the next save wrote a sound file in its place
    assert cost_cache.clean(saved[key]) == (points, [])


def folder_is_a_file(tmp_path):
    (tmp_path / "cache").write_text("a file where the cache folder should be")
    return tmp_path / "cache"


def file_is_a_folder(tmp_path):
    (tmp_path / "cache" / "step_costs.json").mkdir(parents=True)
    return tmp_path / "cache"


def cannot_be_created(tmp_path):
    return tmp_path / ("x" * 300)  # longer than a file name may be


def below_a_file(tmp_path):
    (tmp_path / "file").write_text("")
    return tmp_path / "file" / "cache"


@pytest.mark.parametrize("where", [folder_is_a_file, file_is_a_folder, cannot_be_created, below_a_file])
def test_an_unwritable_cache_keeps_the_curve_in_memory_with_one_warning(where, tmp_path, monkeypatch, caplog, fresh):
    target = tiny_target("llama")
    monkeypatch.setenv("HF_SPECDEC_CACHE", str(where(tmp_path)))
    caplog.set_level(logging.WARNING)

    decode_everywhere(target)
    decode_everywhere(target)  # later saves fail quietly: still one warning

    (message,) = cache_warnings(caplog)
    assert "step-cost cache" in message
    costs = hf_specdec.cost_model(target)
    assert costs.points and costs.save() is False and costs.unsaved  # kept in this process, not written


def saves(path, key: str, times: int) -> None:
    model = StepCostModel(key, path=path)
    for i in range(times):
        model.record(1 + i % 4, 0.01 * (1 + i))
        assert model.save()


def test_threads_saving_into_one_file_never_raise_or_lose_entries(tmp_path, caplog, fresh):
    path = tmp_path / "cache" / "step_costs.json"
    errors = []

    def run(key):
        try:
            saves(path, key, 50)
        except BaseException as error:  # reported below: a thread's exception does not fail the test by itself
            errors.append(error)

    threads = [threading.Thread(target=run, args=(f"thread{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and cache_warnings(caplog) == []
    saved = json.loads(path.read_text())
    assert sorted(saved) == ["thread0", "thread1", "thread2"]
    assert all(cost_cache.clean(entry)[1] == [] and len(entry["1"]) == 4 for entry in saved.values())
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []  # no temporary file left


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="forks the test process")
def test_processes_saving_into_one_file_never_raise_or_lose_entries(tmp_path, fresh):
    path = tmp_path / "cache" / "step_costs.json"
    context = multiprocessing.get_context("fork")  # a fork starts at once (a spawned child would import torch)
    workers = [context.Process(target=saves, args=(path, f"process{i}", 40)) for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    saved = json.loads(path.read_text())
    assert sorted(saved) == ["process0", "process1", "process2"]
    assert all(cost_cache.clean(entry)[1] == [] for entry in saved.values())


def test_a_timing_of_zero_is_not_recorded_and_a_pinned_curve_must_be_real_seconds():
    model = StepCostModel("k")
    for seconds in (0.0, -1.0, float("nan"), float("inf")):
        model.record(1, seconds)
    assert model.points == {}
    with pytest.raises(ValueError, match="finite seconds above 0"):
        model.pin({1: 0.01, 2: 0.0})

"""CSD's correction memory: read-before-update, thresholds, persistence, concurrency, calibration."""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch
from conftest import make_tiny

from core.drafters import Proposal
from core.errors import InvalidInputError, WorkbenchError
from core.memory import CorrectionMemory, memory_path, pair_fingerprint, rejections, rescues, shared_memory
from core.methods import get_method, make_verifier, resolve_params, run_method
from core.rules import Rescue, rescue_decision
from core.stats import run_metrics
from core.target_stats import step_stats
from core.tree import DraftTree


def test_observe_returns_the_count_before_the_update():
    mem = CorrectionMemory()
    assert mem.count(3, 7) == 0
    assert [mem.observe(3, 7) for _ in range(4)] == [0, 1, 2, 3]
    assert mem.count(3, 7) == 4 and mem.count(7, 3) == 0  # ordered pairs: (draft, target)
    assert mem.total == 4 and len(mem) == 1 and mem.unsaved == 4


def test_unseen_share_is_the_good_turing_estimate():
    assert CorrectionMemory().unseen_share is None
    mem = CorrectionMemory({(1, 2): 1, (3, 4): 1, (5, 6): 3})
    assert mem.unseen_share == pytest.approx(2 / 5)  # two singletons among five observations
    mem.observe(1, 2)
    assert mem.unseen_share == pytest.approx(1 / 6)


def test_concurrent_threads_get_exact_counts_and_distinct_reads():
    mem = CorrectionMemory()
    keys = [(1, 2), (1, 3), (2, 1), (5, 5), (9, 0)]
    per_thread, n_threads = 3000, 8
    seen: dict[tuple[int, int], list[int]] = {k: [] for k in keys}
    seen_lock = threading.Lock()
    barrier = threading.Barrier(n_threads)

    def work(t):
        local = {k: [] for k in keys}
        barrier.wait()
        for i in range(per_thread):
            k = keys[(i * 7 + t) % len(keys)]
            local[k].append(mem.observe(*k))
        with seen_lock:
            for k, v in local.items():
                seen[k].extend(v)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert mem.total == per_thread * n_threads
    for k in keys:
        # Every read-then-increment was atomic: the counts read are exactly 0, 1, ..., n - 1.
        assert sorted(seen[k]) == list(range(len(seen[k])))
        assert mem.count(*k) == len(seen[k])


def test_rescue_decision_thresholds_are_inclusive():
    both = Rescue(lam=6, tau=0.01)
    log_tau = math.log(0.01)
    assert rescue_decision(both, 6, log_tau)[0]  # count = λ and gap = log τ both pass
    assert not rescue_decision(both, 5, 0.0)[0]  # too rare, however safe
    assert not rescue_decision(both, 100, log_tau - 1e-6)[0]  # frequent but unsafe
    ok, reason = rescue_decision(both, 7, -1.0)
    assert ok and "count 7 ≥ λ 6" in reason and "log τ -4.605" in reason
    assert rescue_decision(Rescue(lam=2), 2, -50.0)[0]  # memory only: no gate
    assert rescue_decision(Rescue(tau=0.6), None, math.log(0.6) + 1e-9)[0]  # gate only: no count needed
    assert not rescue_decision(Rescue(tau=0.6), None, math.log(0.5))[0]
    with pytest.raises(ValueError):
        Rescue()
    with pytest.raises(ValueError):
        Rescue(tau=0.0)
    with pytest.raises(ValueError):
        rescue_decision(Rescue(lam=1), None, 0.0)


def one_rejection_step(draft_token: int, z_draft: float, vocab: int = 10):
    """A one-node chain whose target row makes token 0 the argmax (logit 0) and the draft token z_draft."""
    logits = torch.full((2, vocab), -20.0)
    logits[0, 0], logits[0, draft_token] = 0.0, z_draft
    tree = DraftTree.root_only(4)
    tree.add(0, draft_token, "draft", 0.9)
    return Proposal(tree), logits, step_stats(logits, tree, [])


def test_verifier_reads_the_memory_before_updating_it():
    # The engine's own verifiers (csd with λ = 3, τ = 0.01; plain sd), each given the memory.
    mem = CorrectionMemory({(5, 0): 2})  # one short of λ
    csd = make_verifier(
        get_method("csd"), resolve_params("csd", {"lam": 3, "tau": 0.01, "temperature": 0.0}), memory=mem
    )
    step = one_rejection_step(5, z_draft=-1.0)  # safe: -1 ≥ log 0.01
    first = csd(*step)
    assert first.decisions[1] == "rejected" and first.bonus == 0 and first.path == [0]
    assert first.extra[1] == {"correction_id": 0, "mem_count": 2} and first.thresholds[1] == 0.01
    assert mem.count(5, 0) == 3  # updated although not rescued
    second = csd(*step)
    assert second.decisions[1] == "rescued" and second.path == [0, 1] and second.extra[1]["mem_count"] == 3
    assert mem.count(5, 0) == 4  # updated on a rescue too
    # Frequent but unsafe: the gate holds it back, and the count still grows.
    step = one_rejection_step(5, z_draft=-5.0)
    third = csd(*step)
    assert third.decisions[1] == "rejected" and "< log τ" in third.reasons[1] and mem.count(5, 0) == 5
    # Plain SD with a memory counts too but never rescues.
    sd = make_verifier(get_method("sd"), resolve_params("sd", {"temperature": 0.0}), memory=mem)
    plain = sd(*step)
    assert plain.decisions[1] == "rejected" and plain.extra[1]["mem_count"] == 5 and mem.count(5, 0) == 6


def test_persistence_round_trip_and_file_format(tmp_path):
    path = tmp_path / "mem" / "pair.json"
    mem = CorrectionMemory(path=path, meta={"target": "t", "draft": "d"})
    for pair, n in {(1, 2): 3, (151_000, 7): 1, (4, 4): 9}.items():
        for _ in range(n):
            mem.observe(*pair)
    assert mem.save() == path and mem.unsaved == 0
    data = json.loads(path.read_text())
    assert data["format"] == 1 and data["observations"] == 13 and data["meta"]["target"] == "t"
    assert data["pairs"][0] == [4, 4, 9]  # most frequent first
    back = CorrectionMemory.load(path)
    assert back.snapshot() == mem.snapshot() and back.meta["draft"] == "d"
    assert not [p for p in path.parent.iterdir() if p.suffix == ".tmp"]  # the temporary file was renamed
    assert CorrectionMemory.open(tmp_path / "absent.json").total == 0


def test_two_writers_on_one_file_lose_nothing(tmp_path):
    path = tmp_path / "pair.json"
    a, b = CorrectionMemory.open(path), CorrectionMemory.open(path)
    for _ in range(3):
        a.observe(1, 2)
    for _ in range(2):
        b.observe(1, 2)
    b.observe(8, 9)
    a.save()
    b.save()  # merges its own observations into what `a` wrote instead of overwriting it
    assert CorrectionMemory.load(path).snapshot() == {(1, 2): 5, (8, 9): 1}
    assert b.count(1, 2) == 5  # and adopts the other writer's counts
    a.observe(1, 2)
    a.save()
    assert CorrectionMemory.load(path).count(1, 2) == 6


def test_unreadable_files_fail_clearly(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(WorkbenchError, match="could not read the correction memory"):
        CorrectionMemory.load(bad)
    bad.write_text(json.dumps({"format": 99, "pairs": []}))
    with pytest.raises(WorkbenchError, match="not a correction memory"):
        CorrectionMemory.load(bad)
    with pytest.raises(WorkbenchError, match="no file"):
        CorrectionMemory().save()


def test_pair_fingerprints_and_the_shared_table(tmp_path, monkeypatch):
    assert pair_fingerprint("T", "D") != pair_fingerprint("D", "T")
    assert pair_fingerprint("T", None) == pair_fingerprint("T", "context") != pair_fingerprint("T", "D")
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    target, draft = make_tiny(0), make_tiny(1)
    target.fingerprint, draft.fingerprint = "tgt-fp", "drf-fp"
    path = memory_path(pair_fingerprint("tgt-fp", "drf-fp"))
    assert path.parent == tmp_path / "memory"
    CorrectionMemory({(3, 4): 11}, path=path).save()
    mem = shared_memory(target, draft)
    assert mem is shared_memory(target, draft) and mem.count(3, 4) == 11  # loaded at start, one per pair
    assert shared_memory(target) is not mem and shared_memory(target).meta["draft"] == "context"


def test_calibration_pairs_from_traces_equal_online_counting():
    target = make_tiny(0)
    draft = make_tiny(0)
    with torch.no_grad():  # a perturbed copy of the target: it agrees often but not always
        gen = torch.Generator().manual_seed(5)
        for p in draft.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.08)
    prompt = [5, 9, 14, 5, 9, 22, 31, 5, 9]
    online = CorrectionMemory()
    # A method that reads the memory at every rejection, with λ out of reach so it never rescues: plain SD's decisions.
    run = run_method(
        "sd-memory-only", target, prompt, {"max_new_tokens": 60, "lam": 1_000_000}, draft=draft, memory=online
    )
    assert run.output_ids == run_method("sd", target, prompt, {"max_new_tokens": 60}, draft=draft).output_ids
    offline = CorrectionMemory()
    pairs = rejections(run.steps)
    offline.observe_many(pairs)
    rejected_steps = sum(1 for s in run.steps if any(n.decision == "rejected" for n in s.nodes))
    assert 0 < len(pairs) == rejected_steps < len(run.steps)  # some steps accept everything, some reject
    assert offline.snapshot() == online.snapshot()
    # The pair is (rejected draft token, the target's correction), which the trace records too.
    for s in run.steps:
        for n in s.nodes:
            if n.decision == "rejected":
                assert (n.token_id, n.correction_id) in Counter(pairs)


def test_rescues_name_the_output_position_where_csd_leaves_greedy():
    target, draft = make_tiny(0), make_tiny(0)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        for p in draft.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.08)
    prompt = [5, 9, 14, 5, 9, 22, 31, 5, 9]
    greedy = run_method("greedy", target, prompt, {"max_new_tokens": 60}).output_ids
    met = rejections(run_method("sd", target, prompt, {"max_new_tokens": 60}, draft=draft).steps)
    known = CorrectionMemory({pair: 10 for pair in met})  # every pair sd met, well past λ
    run = run_method("csd", target, prompt, {"max_new_tokens": 60, "lam": 6, "tau": 1e-6}, draft=draft, memory=known)
    found = rescues(run.steps)
    assert found and len(found) == run_metrics(run)["rescued"]
    first = next(i for i, (a, b) in enumerate(zip(greedy, run.output_ids)) if a != b)
    assert found[0][0] == first  # csd is greedy until its first rescue
    for pos, drafted, correction, count, gap in found:
        assert run.output_ids[pos] == drafted != correction and count >= 6 and gap >= 0


def test_calibration_corpus_is_disjoint_from_the_benchmark(tmp_path):
    from workbench.evaluation.calibration import check_disjoint, disjoint_prompts, jsonl_prompts, prompt_hash

    bench = [
        "Write a function that returns the sum of two integers given as arguments to it please now.",
        "Translate: bonjour",
    ]
    corpus = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "a", "input": "Explain how a hash map works."},
        # Quotes a benchmark item inside a longer prompt: 13 shared words.
        {
            "id": "b",
            "input": "My teacher said: write a function that returns the sum of two integers given as arguments to it. Help?",
        },
        {"id": "c", "input": "translate:   BONJOUR"},  # the same short item, up to case and spacing
        {"id": "d", "input": "Write a function that returns the product of two numbers."},  # similar, not copied
    ]
    corpus.write_text("\n".join(json.dumps(r) for r in rows))
    kept, dropped = disjoint_prompts(jsonl_prompts(corpus), bench)
    assert [k.id for k in kept] == ["a", "d"] and dropped == ["b", "c"]
    mem = CorrectionMemory(meta={"calibration": {"prompt_hashes": [prompt_hash(k.text) for k in kept]}})
    assert check_disjoint(mem, bench) == []
    assert check_disjoint(mem, ["explain how a HASH map works"]) == ["explain how a HASH map works"]


class CharTokenizer:
    chat_template = None
    eos_token_id = 1

    def __call__(self, text, add_special_tokens=True):
        class Out:
            input_ids = [2 + ord(c) % 90 for c in text]

        return Out()

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"t{i}" for i in ids)


def test_calibrate_counts_the_rejections_of_plain_sd(tmp_path):
    from workbench.evaluation.calibration import Prompt, calibrate, prompt_hash

    target = make_tiny(0)
    target.tokenizer = CharTokenizer()
    draft = make_tiny(0)
    with torch.no_grad():
        draft.model.lm_head.weight.add_(
            torch.randn(draft.model.lm_head.weight.shape, generator=torch.Generator().manual_seed(5)) * 0.2
        )
    draft.fingerprint, draft.tokenizer = "noisy", target.tokenizer
    prompts = [Prompt("p1", "def f(x): return x"), Prompt("p2", "hello world, hello world")]
    mem = CorrectionMemory.open(tmp_path / "m.json")
    report = calibrate(target, draft, prompts, mem, max_new_tokens=20, corpus="toy")
    assert report.prompts == 2 and 2 <= report.tokens <= 40 and 0 < report.accepted < report.drafted
    saved = CorrectionMemory.load(tmp_path / "m.json")
    assert saved.total == mem.total == report.memory_total > 0 and saved.snapshot() == mem.snapshot()
    cal = saved.meta["calibration"]
    assert cal["method"] == "sd" and cal["corpus"] == "toy" and cal["prompts"] == 2
    assert cal["prompt_hashes"] == [prompt_hash(p.text) for p in prompts]
    # A rerun skips the prompts already counted and adds only the new one to the file.
    more = prompts + [Prompt("p3", "a third prompt, unlike the others")]
    again = calibrate(target, draft, more, saved, max_new_tokens=20, corpus="toy")
    reloaded = CorrectionMemory.load(tmp_path / "m.json")
    assert again.prompts == 1 and reloaded.meta["calibration"]["prompts"] == 3
    assert reloaded.meta["calibration"]["prompt_hashes"] == [prompt_hash(p.text) for p in more]
    assert reloaded.total == again.memory_total >= report.memory_total
    assert calibrate(target, draft, prompts, reloaded, max_new_tokens=20).prompts == 0


def test_task_specific_corpus_is_the_held_out_part_of_the_benchmark_datasets(spec_bench):
    # GSM8K without a file is Spec-Bench's math_reasoning rows (workbench.evaluation.tasks.SPEC_BENCH): the fixture skips without them.
    from workbench.evaluation.calibration import BENCHMARK_ITEMS, corpus_prompts, prompt_hash
    from workbench.evaluation.tasks import SPEC_BENCH, load_dataset_tasks

    assert SPEC_BENCH == spec_bench  # the file the project reads is the one the fixture checked
    prompts, dropped, described = corpus_prompts("gsm8k+humaneval", limit=1000, spec_bench=SPEC_BENCH)
    gsm8k, humaneval = load_dataset_tasks("gsm8k"), load_dataset_tasks("humaneval")
    assert "after the first 40" in described
    # Formatted as the benchmarks format them: GSM8K with its template and chat, HumanEval as raw completion.
    by_id = {p.id: p for p in prompts}
    first_code = by_id[f"humaneval/{humaneval[BENCHMARK_ITEMS].id}"]
    assert first_code.text == humaneval[BENCHMARK_ITEMS].input and first_code.chat is False
    assert first_code.stop == humaneval[BENCHMARK_ITEMS].stop and "\ndef " in first_code.stop
    first_math = by_id[f"gsm8k/{gsm8k[BENCHMARK_ITEMS].id}"]
    assert first_math.text == gsm8k[BENCHMARK_ITEMS].prompt() and first_math.chat is True
    # The datasets take turns, so a small --limit still covers both.
    assert {p.id.split("/")[0] for p in prompts[:2]} == {"gsm8k", "humaneval"}
    # Nothing from the items benchmarks draw; every held-out item is there unless it overlaps one of them.
    held = {prompt_hash(t.prompt()) for t in gsm8k[:BENCHMARK_ITEMS] + humaneval[:BENCHMARK_ITEMS]}
    assert not held & {prompt_hash(p.text) for p in prompts}
    assert len(prompts) + len(dropped) == len(gsm8k) + len(humaneval) - 2 * BENCHMARK_ITEMS
    assert len(corpus_prompts("gsm8k+humaneval", limit=5, spec_bench=SPEC_BENCH)[0]) == 5
    with pytest.raises(InvalidInputError, match="unknown dataset"):
        corpus_prompts("gsm9k", limit=5, spec_bench=SPEC_BENCH)


def test_calibrate_command_checks_overlap_with_the_spec_bench_the_project_reads():
    # One home for the path: were the default elsewhere, benchmark_texts would find no file and silently skip
    # Spec-Bench's items in the disjointness check.
    import argparse

    from workbench.commands.calibrate import add_parser
    from workbench.evaluation.tasks import SPEC_BENCH

    parser = add_parser(argparse.ArgumentParser().add_subparsers())
    assert Path(parser.get_default("benchmark")) == SPEC_BENCH


def test_an_interrupted_calibration_keeps_the_prompts_it_finished(tmp_path):
    from workbench.evaluation.calibration import Prompt, calibrate

    target = make_tiny(0)
    target.tokenizer = CharTokenizer()
    draft = make_tiny(1)
    draft.fingerprint, draft.tokenizer = "other", target.tokenizer
    prompts = [Prompt("p1", "def f(x): return x"), Prompt("p2", "hello world"), Prompt("p3", "a third one")]

    def stop_after_two(report):
        if report.prompts == 2:
            raise KeyboardInterrupt

    mem = CorrectionMemory.open(tmp_path / "m.json")
    with pytest.raises(KeyboardInterrupt):
        calibrate(target, draft, prompts, mem, max_new_tokens=12, save_every=10, on_prompt=stop_after_two)
    saved = CorrectionMemory.load(tmp_path / "m.json")  # saved although save_every was never reached
    assert saved.meta["calibration"]["prompts"] == 2 and saved.total == mem.total > 0
    assert calibrate(target, draft, prompts, saved, max_new_tokens=12).prompts == 1  # the rerun continues

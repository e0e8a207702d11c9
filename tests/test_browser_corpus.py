"""The suffix corpus view (CSD memory tab, below the correction memory): in headless Chromium on the real default
model, it shows the corpus a suffix run drafted from and joined, and it grows with the next run. Unit tests of what
it shows to whom (a shared app hides other sessions' continuations) on a tiny hand-built store."""

from __future__ import annotations

import re

import pytest
from browser_util import choose_methods, fill_number, open_parameters, synthetic_run

from core.trace import RunTrace

pytestmark = pytest.mark.slow  # the slow set: CI's second phase (README)


def run_and_wait(page, demo, methods, tokens) -> list[int]:
    from playwright.sync_api import expect

    first = max((r.id for r in demo.store.list_runs()), default=0) + 1
    choose_methods(page, methods)
    open_parameters(page)
    fill_number(page, "#compare-max-new", tokens)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#compare-status")).to_contain_text(re.compile(rf"done: runs? #{first}\b"), timeout=900_000)
    return [r.id for r in demo.store.list_runs() if r.id >= first]


def show_corpus(page, expected: str, model: str | None = None) -> str:
    """Show the corpus (of `model`, else the newest run's) and wait until the view contains `expected`."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name="CSD memory").click()
    if model is not None:
        box = page.locator("#corpus-model input")
        box.fill(model)
        box.press("Enter")
    page.locator("#corpus-show").click()
    summary = page.locator("#corpus-summary")
    expect(summary).to_contain_text(expected, timeout=60_000)
    return summary.inner_text()


@pytest.mark.real_model
def test_the_corpus_view_shows_the_requests_and_tokens_a_suffix_run_joined(app, page):
    from workbench.suffix_corpus import corpus_for

    demo = app[0]
    (rid,) = run_and_wait(page, demo, ["suffix"], 24)
    trace = demo.store.load_run(rid, nodes=False).trace
    assert trace.method == "suffix" and trace.status == "complete" and trace.output_ids
    corpus = corpus_for(demo.store, trace.model_fingerprint)
    # the run joined the corpus it is shown from (under the drafter's own key: the store's report of the same output
    # is not counted twice)
    assert any(list(corpus.sequence(k)) == trace.output_ids for k in corpus.keys())
    before = corpus.state()
    n = before["requests"]
    size = f"{n:,} request{'' if n == 1 else 's'}, {before['tokens']:,} of at most"
    text = show_corpus(page, size)
    assert f"Suffix corpus of {trace.model}" in text, text
    assert before["hash"] in text, text
    assert "listed in single-user mode only" in text, text  # the test app is shared: no other session's text
    # The next run of the model joins it: the view says so (not a copy made when the tab was first drawn)
    (rid2,) = run_and_wait(page, demo, ["greedy"], 16)
    added = len(demo.store.load_run(rid2, nodes=False).trace.output_ids)
    after = corpus.state()
    assert after["requests"] == n + 1 and after["tokens"] == before["tokens"] + added
    show_corpus(page, f"{n + 1:,} requests, {after['tokens']:,} of at most", trace.model)


def _run(model: str, fingerprint: str | None, out: list[int]) -> RunTrace:
    return synthetic_run("greedy", model=model, prompt_ids=[1, 2], output_ids=out, model_fingerprint=fingerprint)


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBENCH_HOME", str(tmp_path))
    from workbench.store import Store

    return Store(str(tmp_path / "t.db"))


def test_the_corpus_view_lists_continuations_only_where_every_run_is_everyones(store, monkeypatch):
    import workbench.suffix_corpus as sc
    from workbench.ui.access import SHARED_TAG, Viewer
    from workbench.ui.corpus_view import corpus_models, corpus_view

    monkeypatch.setattr(sc, "_OPENED", {})  # this test's corpus, not one another test installed
    store.save_run(_run("nofp", None, [1, 2, 3]), tags=[SHARED_TAG])
    shared = list(range(10, 20))
    for out in ([3, *shared, 4], [*shared, 5, 6]):
        store.save_run(_run("tiny-cv", "fp-cv", out), tags=["owner:alice"])
    store.save_run(_run("other", "fp-other", [7, 8]), tags=[SHARED_TAG])
    decode = lambda model: lambda ids: "".join(f"<{i}>" for i in ids)  # noqa: E731
    everyone = corpus_view(store, "tiny-cv", Viewer(None), decode_for=decode)
    assert "Suffix corpus of tiny-cv" in everyone and "2 requests, 24 of at most" in everyone, everyone
    assert "<10><11><12>" in everyone  # the shared 8-token strings, decoded
    bob = Viewer("owner:bob")
    assert corpus_models(store, bob) == ["other", "nofp"]  # alice's runs are not bob's to pick
    assert "no run of model 'tiny-cv'" in corpus_view(store, "tiny-cv", bob, decode_for=decode)
    carol = Viewer("owner:alice")
    private = corpus_view(store, "tiny-cv", carol, decode_for=decode)
    assert "2 requests" in private and "<10>" not in private and "single-user mode only" in private, private
    assert corpus_view(store, None, Viewer(None), decode_for=decode).startswith("**Suffix corpus of other**")
    assert "record no model fingerprint" in corpus_view(store, "nofp", Viewer(None))

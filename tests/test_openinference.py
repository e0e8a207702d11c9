"""`store export --format openinference`: the spans follow OpenInference's conventions (every attribute key is
one of the package's names or a documented `workbench.*` key), one LLM span per run with one child per step,
token counts and trees as stored; the OTLP path hands the very same spans to an exporter (the SDK's in-memory
one here); bad input fails cleanly and leaves nothing half-written. A slow test sends runs to a real Phoenix."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
from openinference.semconv.resource import ResourceAttributes
from openinference.semconv.trace import OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import workbench.store.openinference as oi
from core.trace import NodeTrace, RunTrace, StepTrace
from workbench.commands.main import main
from workbench.store import RunNotFoundError, Store

ROOT = Path(__file__).resolve().parents[1]
CONVENTIONS = {v for k, v in vars(SpanAttributes).items() if k.isupper() and isinstance(v, str)}
LLM, CHAIN = OpenInferenceSpanKindValues.LLM.value, OpenInferenceSpanKindValues.CHAIN.value


def _node(step, node, parent, depth, token, text, source, decision, **stats) -> NodeTrace:
    return NodeTrace(
        step=step,
        cache_pos=3 + 3 * step,
        node=node,
        parent=parent,
        depth=depth,
        token_id=token,
        token_text=text,
        source=source,
        decision=decision,
        reason=f"{decision} here",
        **stats,
    )


def hand_run(status: str = "complete") -> RunTrace:
    """Two steps whose trees hold every decision: accepted, rescued, rejected, unreached and the bonus."""
    steps = []
    for i in range(2):
        base = 40 + 10 * i
        nodes = [
            _node(i, 0, -1, 0, base, "<r>", "root", "accepted"),
            _node(i, 1, 0, 1, base + 1, " a", "context", "accepted", p=0.6, threshold=0.1, rank=0, logit_gap=0.0),
            _node(
                i,
                2,
                1,
                2,
                base + 2,
                " b",
                "draft",
                "rescued",
                p=0.2,
                threshold=0.3,
                mem_count=4,
                correction_id=9,
                draft_p=0.7,
            ),
            _node(i, 3, 0, 1, base + 3, " x", "alignment", "rejected", p=0.01, threshold=0.1, logit_gap=math.inf),
            _node(i, 4, 3, 2, base + 4, " y", "alignment", "unreached"),
            _node(i, 5, 2, 3, base + 5, " c", "model", "bonus", p=0.9),
        ]
        steps.append(
            StepTrace(
                index=i,
                cache_pos=3 + 3 * i,
                tree_size=4,
                accepted=2,
                emitted=[base + 1, base + 2, base + 5],
                draft_ms=0.5,
                forward_ms=2.0 + i,
                verify_ms=0.25,
                bookkeeping_ms=0.125,
                nodes=nodes,
            )
        )
    return RunTrace(
        method="csd",
        params={"max_new_tokens": 6, "gamma": 3, "lam": 2},
        model="tiny/target",
        draft_model="tiny/draft",
        device="cpu",
        dtype="float32",
        prompt="Q: why?\nA:",
        prompt_ids=[5, 6, 7],
        output_text=" a b c a b c",
        output_ids=[41, 42, 45, 51, 52, 55],
        steps=steps,
        prefill_seconds=0.02,
        decode_seconds=0.3,
        status=status,
        error="boom" if status == "failed" else None,
        stop_reason="max_new_tokens" if status == "complete" else None,
        model_fingerprint="fp",
    )


@pytest.fixture
def store(tmp_path):
    s = Store(f"sqlite:///{tmp_path / 'db' / 'traces.db'}")  # a folder of its own: the listings below skip it
    yield s
    s.close()


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _ns(iso: str) -> int:
    d = datetime.fromisoformat(iso)
    return round(d.timestamp() * 1e6) * 1000


def _cli(*argv) -> int:
    return main(["store", "export", "--format", "openinference", *argv])


# ---------------------------------------------------------------- the shape and the conventions


def test_spans_follow_the_conventions(store, tmp_path):
    runs = {
        store.save_run(hand_run(), tags=["x", "demo"]): hand_run(),
        store.save_run(hand_run("failed")): hand_run("failed"),
    }
    out = tmp_path / "spans.jsonl"
    assert _cli("--all", "--out", str(out), "--db", store.url) == 0
    spans = _lines(out)
    assert len(spans) == sum(1 + len(r.steps) for r in runs.values())
    doc = (ROOT / "docs" / "OPENINFERENCE.md").read_text(encoding="utf-8")
    for key in oi.WORKBENCH_ATTRIBUTES:
        assert f"`{key}`" in doc, f"{key} is not documented in docs/OPENINFERENCE.md"
    for span in spans:
        for key in span["attributes"]:
            assert key in CONVENTIONS or key in oi.WORKBENCH_ATTRIBUTES, (
                f"{key} is neither OpenInference's nor documented"
            )
        assert span["resource"]["attributes"][ResourceAttributes.PROJECT_NAME] == "spec-workbench"

    by_trace: dict[str, list[dict]] = {}
    for span in spans:
        by_trace.setdefault(span["context"]["trace_id"], []).append(span)
    assert len(by_trace) == len(runs)
    for trace in by_trace.values():
        root, steps = trace[0], trace[1:]  # the run span first, then its steps in order
        a = root["attributes"]
        rid = a["workbench.run_id"]
        run, stored = runs[rid], store.load_run(rid)
        assert root["parent_id"] is None and root["name"] == run.method
        assert a[SpanAttributes.OPENINFERENCE_SPAN_KIND] == LLM
        assert a[SpanAttributes.LLM_MODEL_NAME] == run.model
        assert json.loads(a[SpanAttributes.LLM_INVOCATION_PARAMETERS]) == run.params
        assert a[SpanAttributes.LLM_TOKEN_COUNT_PROMPT] == len(run.prompt_ids) == 3
        assert a[SpanAttributes.LLM_TOKEN_COUNT_COMPLETION] == len(run.output_ids) == 6
        assert a[SpanAttributes.LLM_TOKEN_COUNT_TOTAL] == 9
        assert a[SpanAttributes.INPUT_VALUE] == run.prompt and a[SpanAttributes.OUTPUT_VALUE] == run.output_text
        assert a["workbench.accept_lengths"] == [3, 3]
        assert json.loads(a["workbench.metrics"]) == stored.metrics
        meta = json.loads(a[SpanAttributes.METADATA])
        assert meta["method"] == "csd" and meta["draft_model"] == "tiny/draft" and meta["run_id"] == rid
        if run.status == "complete":
            assert root["status"] == {"status_code": "OK"} and a[SpanAttributes.TAG_TAGS] == ["demo", "x"]
            assert a[SpanAttributes.LLM_FINISH_REASON] == "max_new_tokens"
        else:
            assert (
                root["status"] == {"status_code": "ERROR", "description": "boom"} and SpanAttributes.TAG_TAGS not in a
            )

        # the times: the run lasts prefill + decode and ends when it finished; steps end to end after the prefill
        start, end = _ns(root["start_time"]), _ns(root["end_time"])
        assert end - start == pytest.approx((run.prefill_seconds + run.decode_seconds) * 1e9, abs=2000)
        assert abs(end - (stored.finished - datetime(1970, 1, 1)).total_seconds() * 1e9) < 2000
        assert _ns(steps[0]["start_time"]) - start == pytest.approx(run.prefill_seconds * 1e9, abs=2000)

        assert [s["name"] for s in steps] == [f"step {i}" for i in range(len(run.steps))]
        for span, step in zip(steps, run.steps):
            s = span["attributes"]
            assert (
                span["parent_id"] == root["context"]["span_id"]
                and span["context"]["trace_id"] == root["context"]["trace_id"]
            )
            assert span["status"] == {"status_code": "OK"}
            assert s[SpanAttributes.OPENINFERENCE_SPAN_KIND] == CHAIN and s["workbench.run_id"] == rid
            assert s["workbench.step.index"] == step.index and s["workbench.step.accepted"] == 2
            assert s["workbench.step.emitted"] == step.emitted and s["workbench.step.tree_size"] == 4
            assert (
                s["workbench.step.accepted_count"],
                s["workbench.step.rejected_count"],
                s["workbench.step.rescued_count"],
                s["workbench.step.unreached_count"],
            ) == (1, 1, 1, 1)
            assert s[SpanAttributes.OUTPUT_VALUE] == " a b c"
            nodes = json.loads(s["workbench.step.nodes"])
            assert [(n["node"], n["parent"], n["depth"], n["token_id"], n["source"], n["decision"]) for n in nodes] == [
                (n.node, n.parent, n.depth, n.token_id, n.source, n.decision) for n in step.nodes
            ]
            assert nodes[2]["threshold"] == 0.3 and nodes[2]["mem_count"] == 4 and nodes[1]["p"] == 0.6
            assert nodes[3]["logit_gap"] is None  # +inf: JSON has no infinity
            assert _ns(span["end_time"]) - _ns(span["start_time"]) == pytest.approx(step.step_ms * 1e6, abs=2000)
        for a_, b_ in zip(steps, steps[1:]):
            assert a_["end_time"] == b_["start_time"]


def test_export_again_gives_the_same_file(store, tmp_path):
    """Ids come from the run, not from chance: exporting again is byte-identical (and Phoenix keeps one copy)."""
    ids = [store.save_run(hand_run()), store.save_run(hand_run())]
    one, two = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    assert _cli("--run", str(ids[1]), "--run", str(ids[0]), "--out", str(one), "--db", store.url) == 0
    assert _cli("--all", "--out", str(two), "--db", store.url) == 0
    assert one.read_bytes() == two.read_bytes()
    spans = _lines(one)
    assert len({s["context"]["trace_id"] for s in spans}) == 2 and len({s["context"]["span_id"] for s in spans}) == len(
        spans
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.jsonl", "2.jsonl", "db"]  # no temp files left


def test_the_otlp_path_hands_the_same_spans_to_an_exporter(store, tmp_path, monkeypatch, capsys):
    """`--otlp-endpoint` builds an exporter with otlp_exporter(URL) and hands it the spans the file holds;
    with the SDK's in-memory exporter in its place, what arrives is line for line the file."""
    ids = [store.save_run(hand_run(), tags=["t"]), store.save_run(hand_run("failed"))]
    asked, made = [], []

    def in_memory(url: str, timeout: float) -> InMemorySpanExporter:
        asked.append((url, timeout))
        made.append(InMemorySpanExporter())
        return made[-1]

    monkeypatch.setattr(oi, "otlp_exporter", in_memory)
    out = tmp_path / "spans.jsonl"
    assert (
        _cli(
            "--all",
            "--out",
            str(out),
            "--otlp-endpoint",
            "http://collector:4318",
            "--project",
            "p1",
            "--otlp-timeout",
            "3",
            "--db",
            store.url,
        )
        == 0
    )
    assert asked == [("http://collector:4318", 3.0)]
    assert "exported 6 spans of 2 runs" in capsys.readouterr().out
    got = made[0].get_finished_spans()
    assert [oi.span_line(s) for s in got] == out.read_text(encoding="utf-8").splitlines()
    assert {s.resource.attributes[ResourceAttributes.PROJECT_NAME] for s in got} == {"p1"}
    assert made[0].export([]) is SpanExportResult.FAILURE  # the command shut it down when done
    # and without --out: only sent
    assert _cli("--run", str(ids[0]), "--otlp-endpoint", "http://collector:4318", "--db", store.url) == 0
    assert [s.name for s in made[1].get_finished_spans()] == ["csd", "step 0", "step 1"]
    assert made[1].get_finished_spans()[0].resource.attributes[ResourceAttributes.PROJECT_NAME] == "spec-workbench"


def test_otlp_endpoint_url_gets_the_traces_path():
    assert oi.otlp_exporter("http://localhost:6006")._endpoint == "http://localhost:6006/v1/traces"
    assert oi.otlp_exporter("http://localhost:6006/")._endpoint == "http://localhost:6006/v1/traces"
    assert oi.otlp_exporter("https://h:4318/custom/v1/traces")._endpoint == "https://h:4318/custom/v1/traces"


def test_real_engine_runs_export(store, tmp_path, tiny):
    """Traces of the engine itself (a tiny random Llama): counts match the run, steps add up to the output."""
    from core.methods import run_method

    prompt = [5, 9, 14, 5, 9, 22, 31, 5, 9, 14, 5, 9]
    runs = {
        store.save_run(r): r
        for r in (
            run_method("pld", tiny, prompt, {"max_new_tokens": 20}),
            run_method("greedy", tiny, prompt, {"max_new_tokens": 8}),
        )
    }
    memory = InMemorySpanExporter()
    oi.export_openinference(store, list(runs), tmp_path / "s.jsonl", exporter=memory)
    spans = memory.get_finished_spans()
    roots = [s for s in spans if s.parent is None]
    assert len(roots) == 2
    for root in roots:
        run = runs[root.attributes["workbench.run_id"]]
        steps = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
        assert len(steps) == len(run.steps) and all(s.context.trace_id == root.context.trace_id for s in steps)
        assert root.attributes[SpanAttributes.LLM_TOKEN_COUNT_PROMPT] == len(prompt)
        assert root.attributes[SpanAttributes.LLM_TOKEN_COUNT_COMPLETION] == len(run.output_ids)
        assert [t for s in steps for t in s.attributes["workbench.step.emitted"]] == run.output_ids
        assert [s.attributes["workbench.step.accepted"] for s in steps] == [s.accepted for s in run.steps]
        assert all(SpanAttributes.OUTPUT_VALUE in s.attributes for s in steps)
        for s in spans:
            assert all(k in CONVENTIONS or k in oi.WORKBENCH_ATTRIBUTES for k in s.attributes)


# ---------------------------------------------------------------- bad input


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_bad_input_is_refused_and_nothing_is_half_written(store, tmp_path, capsys):
    rid = store.save_run(hand_run())
    db = ["--db", store.url]

    def fails(*argv, message: str) -> None:
        capsys.readouterr()
        assert main(["store", "export", *argv, *db]) == 2
        assert message in capsys.readouterr().err

    with pytest.raises(SystemExit) as e:  # argparse: an unknown format is a usage error (exit 2)
        main(["store", "export", "--run", str(rid), "--format", "xml", "--out", str(tmp_path / "x"), *db])
    assert e.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err
    fails(
        "--run", str(rid), "--format", "openinference", message="needs --out FILE.jsonl, --otlp-endpoint URL, or both"
    )
    fails(
        "--run",
        str(rid),
        "--out",
        str(tmp_path / "c"),
        "--otlp-endpoint",
        "http://x",
        message="go with --format openinference",
    )
    fails("--run", str(rid), message="--format csv needs --out FOLDER")
    fails("--format", "openinference", "--out", str(tmp_path / "a.jsonl"), message="--run ID")
    fails("--run", "999", "--format", "openinference", "--out", str(tmp_path / "a.jsonl"), message="no run 999")
    fails("--run", str(rid), "--format", "openinference", "--out", str(tmp_path), message="is a folder")
    (tmp_path / "file").write_text("x")
    fails(
        "--run",
        str(rid),
        "--format",
        "openinference",
        "--out",
        str(tmp_path / "file" / "a.jsonl"),
        message="is a file, not a folder",
    )
    for url in ("ftp://h/v1/traces", "localhost:6006", "http://h:99999/v1/traces", "http:///v1/traces"):
        fails("--run", str(rid), "--format", "openinference", "--otlp-endpoint", url, message="not an http(s) URL")
    fails(
        "--run",
        str(rid),
        "--format",
        "openinference",
        "--otlp-endpoint",
        "http://h",
        "--otlp-timeout",
        "0",
        message="more than 0 seconds",
    )

    old = tmp_path / "kept.jsonl"
    old.write_text("earlier export\n")
    port = _free_port()  # nothing listens there
    t = time.monotonic()
    fails("--run", str(rid), "--format", "openinference", "--out", str(old), message="already exists: pass --force")
    fails(
        "--run",
        str(rid),
        "--format",
        "openinference",
        "--out",
        str(old),
        "--force",
        "--otlp-endpoint",
        f"http://127.0.0.1:{port}",
        "--otlp-timeout",
        "0.5",
        message=f"nothing answers at 127.0.0.1:{port}",
    )
    assert time.monotonic() - t < 8
    assert old.read_text() == "earlier export\n"  # the earlier file survives
    assert not (tmp_path / "a.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["db", "file", "kept.jsonl"]  # no temp files


def test_a_failure_part_way_says_what_was_sent(store, tmp_path):
    ids = [store.save_run(hand_run()) for _ in range(3)]

    class SecondFails(SpanExporter):
        calls = 0

        def export(self, spans):
            self.calls += 1
            return SpanExportResult.SUCCESS if self.calls == 1 else SpanExportResult.FAILURE

    with pytest.raises(oi.ExportError, match=r"The first 1 of 3 runs were sent \(sending them again is safe\)"):
        oi.export_openinference(store, ids, tmp_path / "s.jsonl", exporter=SecondFails(), where="X")
    assert not (tmp_path / "s.jsonl").exists()
    with pytest.raises(RunNotFoundError, match="no run 998, 999"):
        oi.export_openinference(store, [ids[0], 999, 998], tmp_path / "s.jsonl")
    with pytest.raises(oi.InvalidInputError, match="nothing to do"):
        oi.export_openinference(store, ids, None)


# ---------------------------------------------------------------- a real Phoenix


def _spans(base: str, project: str) -> list[dict]:
    """The project's spans from Phoenix's REST API ([] while the project does not exist yet)."""
    try:
        with urllib.request.urlopen(f"{base}/v1/projects/{project}/spans?limit=1000", timeout=10) as r:
            return json.loads(r.read())["data"]
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise


@pytest.mark.slow
def test_phoenix_receives_the_spans(store, tmp_path):
    """Starts Phoenix (WORKBENCH_PHOENIX or `phoenix` on the PATH), sends runs twice over OTLP/HTTP and reads
    them back from its REST API: one copy of each span, parents and OpenInference attributes intact."""
    exe = os.environ.get("WORKBENCH_PHOENIX") or shutil.which("phoenix")
    if not exe:
        pytest.skip("Phoenix is not installed: set WORKBENCH_PHOENIX to its `phoenix` command (docs/OPENINFERENCE.md)")
    http, grpc = _free_port(), _free_port()
    env = {
        **os.environ,
        "PHOENIX_PORT": str(http),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = (tmp_path / "phoenix.log").open("w")
    proc = subprocess.Popen([exe, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{http}"
    try:
        deadline = time.monotonic() + 240
        while True:
            assert proc.poll() is None, f"Phoenix exited: {(tmp_path / 'phoenix.log').read_text()[-2000:]}"
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "Phoenix did not start in 240 s"
                time.sleep(1)
        runs = {
            store.save_run(hand_run(), tags=["px"]): hand_run(),
            store.save_run(hand_run("failed")): hand_run("failed"),
        }
        for _ in range(2):  # the second send repeats the same ids: Phoenix keeps one copy
            assert _cli("--all", "--otlp-endpoint", base, "--project", "wb-test", "--db", store.url) == 0
        want = sum(1 + len(r.steps) for r in runs.values())
        deadline = time.monotonic() + 60
        while True:  # Phoenix inserts spans in the background
            got = _spans(base, "wb-test")
            if len(got) >= want or time.monotonic() > deadline:
                break
            time.sleep(1)
        time.sleep(2)
        got = _spans(base, "wb-test")
        assert len(got) == want
        roots = [s for s in got if s["parent_id"] is None]
        assert sorted(s["attributes"]["workbench.run_id"] for s in roots) == sorted(runs)
        for root in roots:
            run = runs[root["attributes"]["workbench.run_id"]]
            assert root["span_kind"] == LLM and root["name"] == run.method
            assert root["attributes"][SpanAttributes.LLM_TOKEN_COUNT_COMPLETION] == len(run.output_ids)
            assert root["attributes"][SpanAttributes.LLM_MODEL_NAME] == run.model
            assert root["status_code"] == ("OK" if run.status == "complete" else "ERROR")
            steps = [s for s in got if s["parent_id"] == root["context"]["span_id"]]
            assert sorted(s["name"] for s in steps) == [f"step {i}" for i in range(len(run.steps))]
            assert all(s["span_kind"] == CHAIN and s["attributes"]["workbench.step.accepted"] == 2 for s in steps)
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()
        log.close()

"""Stored runs as OpenTelemetry spans in OpenInference's conventions: JSON Lines, or live over OTLP.

One LLM span per run, one CHAIN child span per step (its tree and decisions as attributes); the
attribute names are the `openinference-semantic-conventions` package's constants, plus the
project's own `workbench.*` keys listed in WORKBENCH_ATTRIBUTES (docs/OPENINFERENCE.md shows the
shape and how to load the spans into Arize Phoenix).

The spans are built with the OpenTelemetry SDK, so the file and the OTLP exporter get the very same
ReadableSpan objects: a line of the file is the SDK's own `ReadableSpan.to_json()`. Trace and span
ids are derived from the run (its id and creation time) and the step index, so exporting a run
again gives the same ids. The store keeps a run's creation and finish times and each step's phase
durations, not each step's wall-clock time: step spans are laid end to end after the prefill.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from openinference.semconv.resource import ResourceAttributes
from openinference.semconv.trace import OpenInferenceMimeTypeValues, OpenInferenceSpanKindValues, SpanAttributes
from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import ALWAYS_ON

from core.errors import InvalidInputError
from core.trace import NodeTrace, StepTrace
from workbench.store.errors import RunNotFoundError, StoreError
from workbench.store.repository import Store, StoredRun

SERVICE = "spec-workbench"
DEFAULT_PROJECT = "spec-workbench"  # Phoenix files the spans under this project (openinference.project.name)
OTLP_TRACES_PATH = "/v1/traces"
BATCH_SPANS = 256  # spans per OTLP request

# The project's own attribute keys: everything else a span carries is an OpenInference name.
WORKBENCH_ATTRIBUTES = {
    "workbench.run_id": "the run's id in the store (run and step spans)",
    "workbench.metrics": "the run's stored metrics (MAL, tok/s, steps, accept rate ...), a JSON object",
    "workbench.accept_lengths": "tokens emitted per step (list of integers)",
    "workbench.step.index": "the step's index in its run (0 = first)",
    "workbench.step.cache_pos": "the cache length when the step started",
    "workbench.step.tree_size": "draft nodes in the step's tree (root excluded)",
    "workbench.step.accepted": "draft tokens the step accepted: its accepted length, bonus excluded",
    "workbench.step.emitted": "token ids the step committed (accepted path + bonus, cut at a stop)",
    "workbench.step.accepted_count": "draft nodes decided `accepted` (root excluded)",
    "workbench.step.rejected_count": "draft nodes decided `rejected`",
    "workbench.step.rescued_count": "draft nodes decided `rescued` (CSD's memory accepted a rejection)",
    "workbench.step.unreached_count": "draft nodes never judged (an ancestor failed)",
    "workbench.step.nodes": "the tree: a JSON list of node records (node, parent, depth, token_id, token_text, "
    "source, decision, reason, p, threshold, ...)",
    "workbench.step.draft_ms": "time drafting the tree (ms)",
    "workbench.step.forward_ms": "time of the target's forward over the tree (ms)",
    "workbench.step.verify_ms": "time of the verification walk (ms)",
    "workbench.step.bookkeeping_ms": "time of cache surgery and drafter updates (ms)",
}
_EPOCH = datetime(1970, 1, 1)


class ExportError(StoreError):
    """The spans could not be written or sent; the message says why and what was left."""


# ---------------------------------------------------------------- building spans


class _RunIds(IdGenerator):
    """Ids hashed from `key` (set before each span starts): the same run gives the same ids every export."""

    key = b""

    def _hash(self, what: bytes, size: int) -> int:
        value = int.from_bytes(hashlib.sha256(self.key + b"/" + what).digest()[:size], "big")
        return value or 1  # zero is the invalid id

    def generate_trace_id(self) -> int:
        return self._hash(b"trace", 16)

    def generate_span_id(self) -> int:
        return self._hash(b"span", 8)

    def is_trace_id_random(self) -> bool:
        return False


class _Collect(SpanProcessor):
    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def on_end(self, span: ReadableSpan) -> None:
        self.spans.append(span)


def _ns(when: datetime) -> int:
    """A naive UTC datetime (how the store keeps them) in ns since the epoch, exactly."""
    return (when.replace(tzinfo=None) - _EPOCH) // timedelta(microseconds=1) * 1000


def _json(value: Any) -> str:
    return json.dumps(_finite(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _finite(value: Any) -> Any:
    """JSON has no infinity or NaN (a masked token's logit gap is +inf): such numbers become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _node_record(n: NodeTrace) -> dict[str, Any]:
    d = n.to_dict()
    del d["step"], d["cache_pos"]  # the step span has them
    return d


def _counts(step: StepTrace) -> dict[str, int]:
    drafted = [n.decision for n in step.nodes if n.parent >= 0 and n.decision != "bonus"]
    return {f"workbench.step.{d}_count": drafted.count(d) for d in ("accepted", "rejected", "rescued", "unreached")}


def _emitted_text(step: StepTrace) -> str | None:
    """The text of what the step committed, read from its nodes (accepted path, then the bonus)."""
    by_id = {}
    for n in step.nodes:
        if n.parent >= 0 and n.decision in ("accepted", "rescued", "bonus"):
            by_id.setdefault(n.token_id, n.token_text)
    texts = [by_id.get(t) for t in step.emitted]
    return None if any(t is None for t in texts) else "".join(texts)


def _run_attributes(stored: StoredRun) -> dict[str, Any]:
    run = stored.trace
    text = OpenInferenceMimeTypeValues.TEXT.value
    attrs: dict[str, Any] = {
        SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.LLM.value,
        SpanAttributes.LLM_MODEL_NAME: run.model,
        SpanAttributes.LLM_INVOCATION_PARAMETERS: _json(run.params),
        SpanAttributes.LLM_TOKEN_COUNT_PROMPT: len(run.prompt_ids),
        SpanAttributes.LLM_TOKEN_COUNT_COMPLETION: len(run.output_ids),
        SpanAttributes.LLM_TOKEN_COUNT_TOTAL: len(run.prompt_ids) + len(run.output_ids),
        SpanAttributes.INPUT_VALUE: run.prompt,
        SpanAttributes.INPUT_MIME_TYPE: text,
        SpanAttributes.OUTPUT_VALUE: run.output_text,
        SpanAttributes.OUTPUT_MIME_TYPE: text,
        SpanAttributes.METADATA: _json(
            {
                "run_id": stored.id,
                "method": run.method,
                "draft_model": run.draft_model,
                "device": run.device,
                "dtype": run.dtype,
                "status": run.status,
                "error": run.error,
                "stop_reason": run.stop_reason,
                "model_fingerprint": run.model_fingerprint,
                "draft_fingerprint": run.draft_fingerprint,
                "prefill_seconds": run.prefill_seconds,
                "decode_seconds": run.decode_seconds,
            }
        ),
        "workbench.run_id": stored.id,
        "workbench.accept_lengths": list(run.accept_lengths),
    }
    if run.stop_reason:
        attrs[SpanAttributes.LLM_FINISH_REASON] = run.stop_reason
    if stored.tags:
        attrs[SpanAttributes.TAG_TAGS] = list(stored.tags)
    if stored.metrics is not None:
        attrs["workbench.metrics"] = _json(stored.metrics)
    return attrs


def _step_attributes(run_id: int, step: StepTrace) -> dict[str, Any]:
    attrs: dict[str, Any] = {
        SpanAttributes.OPENINFERENCE_SPAN_KIND: OpenInferenceSpanKindValues.CHAIN.value,
        "workbench.run_id": run_id,
        "workbench.step.index": step.index,
        "workbench.step.cache_pos": step.cache_pos,
        "workbench.step.tree_size": step.tree_size,
        "workbench.step.accepted": step.accepted,
        "workbench.step.emitted": list(step.emitted),
        **_counts(step),
        "workbench.step.nodes": _json([_node_record(n) for n in step.nodes]),
        "workbench.step.draft_ms": float(step.draft_ms),
        "workbench.step.forward_ms": float(step.forward_ms),
        "workbench.step.verify_ms": float(step.verify_ms),
        "workbench.step.bookkeeping_ms": float(step.bookkeeping_ms),
    }
    text = _emitted_text(step)
    if text is not None:
        attrs[SpanAttributes.OUTPUT_VALUE] = text
        attrs[SpanAttributes.OUTPUT_MIME_TYPE] = OpenInferenceMimeTypeValues.TEXT.value
    return attrs


def _status(status: str, error: str | None) -> trace_api.Status:
    if status == "complete":
        return trace_api.Status(trace_api.StatusCode.OK)
    if status in ("failed", "cancelled"):
        return trace_api.Status(trace_api.StatusCode.ERROR, error or status)
    return trace_api.Status(trace_api.StatusCode.UNSET)  # still running


class SpanBuilder:
    """Turns stored runs into finished ReadableSpans (one TracerProvider of its own: the process's global
    OpenTelemetry setup, its sampler and limits from the environment, are left alone and not read)."""

    def __init__(self, project: str = DEFAULT_PROJECT):
        self._ids = _RunIds()
        self._collect = _Collect()
        unlimited = SpanLimits.UNSET
        self._provider = TracerProvider(
            sampler=ALWAYS_ON,
            id_generator=self._ids,
            resource=Resource({SERVICE_NAME: SERVICE, ResourceAttributes.PROJECT_NAME: project}),
            span_limits=SpanLimits(
                max_span_attributes=unlimited, max_attribute_length=unlimited, max_span_attribute_length=unlimited
            ),
        )
        self._provider.add_span_processor(self._collect)
        self._tracer = self._provider.get_tracer("workbench.store.openinference")

    def close(self) -> None:
        self._provider.shutdown()

    def spans(self, stored: StoredRun) -> list[ReadableSpan]:
        """The run's LLM span followed by one CHAIN span per step, in step order."""
        run = stored.trace
        total_ns = round((run.prefill_seconds + run.decode_seconds) * 1e9)
        end = _ns(stored.finished) if stored.finished else _ns(stored.created) + total_ns
        # A run saved whole is created when it ends; one recorded step by step, when it starts.
        start = min(_ns(stored.created), end - total_ns)
        key = f"run {stored.id} created {stored.created.isoformat()}".encode()
        self._ids.key = key
        root = self._tracer.start_span(run.method, start_time=start, attributes=_run_attributes(stored))
        root.set_status(_status(run.status, run.error))
        parent = trace_api.set_span_in_context(root)
        t = start + round(run.prefill_seconds * 1e9)
        for step in run.steps:
            self._ids.key = key + f" step {step.index}".encode()
            span = self._tracer.start_span(
                f"step {step.index}", context=parent, start_time=t, attributes=_step_attributes(stored.id, step)
            )
            t += round(step.step_ms * 1e6)
            span.set_status(trace_api.Status(trace_api.StatusCode.OK))
            span.end(end_time=t)
        root.end(end_time=max(end, t if run.steps else start))
        spans = self._collect.spans
        self._collect.spans = []
        return [spans[-1], *spans[:-1]]  # the run span ended last


def span_line(span: ReadableSpan) -> str:
    """One line of the JSON Lines file: the SDK's own JSON for the span, on one line."""
    return span.to_json(indent=None)


# ---------------------------------------------------------------- sending and writing


def otlp_exporter(endpoint: str, timeout: float = 10.0) -> SpanExporter:
    """An OTLP/HTTP (protobuf) exporter for `endpoint`; a URL without a path gets /v1/traces."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    parts = urlsplit(endpoint)
    try:
        parts.port  # a port that is not a number, or out of range, raises here
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(
            f"--otlp-endpoint {endpoint!r} is not an http(s) URL: pass e.g. "
            f"http://localhost:6006/v1/traces (Phoenix) or http://localhost:4318 (a collector)"
        )
    if parts.path in ("", "/"):
        endpoint = endpoint.rstrip("/") + OTLP_TRACES_PATH
    return OTLPSpanExporter(endpoint=endpoint, timeout=timeout)


class _Remember(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _exporter_messages() -> Iterator[_Remember]:
    """What the OpenTelemetry exporters log while sending, kept for the error message instead of printed."""
    handler = _Remember()
    logger = logging.getLogger("opentelemetry.exporter")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def send_spans(spans: Sequence[ReadableSpan], exporter: SpanExporter, where: str = "the exporter") -> None:
    """Hand `spans` to `exporter` in batches; ExportError if one is refused. `--otlp-endpoint` uses this
    with otlp_exporter(URL); tests pass the SDK's InMemorySpanExporter."""
    with _exporter_messages() as log:
        for i in range(0, len(spans), BATCH_SPANS):
            batch = spans[i : i + BATCH_SPANS]
            try:
                result = exporter.export(batch)
            except Exception as e:  # an exporter that raises instead of returning FAILURE
                log.messages.append(f"{type(e).__name__}: {e}")
                result = SpanExportResult.FAILURE
            if result is not SpanExportResult.SUCCESS:
                why = _unreachable(where) or (log.messages[-1] if log.messages else "the exporter reported a failure")
                if "code: 404" in why or "code: 405" in why:
                    why += f" (OTLP/HTTP receivers take spans at the path {OTLP_TRACES_PATH})"
                raise ExportError(f"could not send spans to {where}: {why}")


def _unreachable(url: str) -> str | None:
    """Why nothing answers at `url`'s host and port (None when something does, or `url` is no URL): the
    exporter's own log only says it gave up."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=3).close()
    except OSError as e:
        return (
            f"nothing answers at {parts.hostname}:{port} ({e.strerror or type(e).__name__}); "
            f"is Phoenix or the collector running, and is that its OTLP/HTTP port?"
        )
    return None


def _run_ids(store: Store, run_ids: Sequence[int] | None) -> list[int]:
    if run_ids is None:
        return sorted(r.id for r in store.list_runs(limit=None))
    ids = sorted(set(int(i) for i in run_ids))
    missing = []
    for i in ids:
        try:
            store.run_tags(i)  # RunNotFoundError when there is no such run
        except RunNotFoundError:
            missing.append(i)
    if missing:
        raise RunNotFoundError(f"no run {', '.join(map(str, missing))} in {store.where}; nothing was exported")
    return ids


def export_openinference(
    store: Store,
    run_ids: Sequence[int] | None,
    out: str | Path | None = None,
    *,
    exporter: SpanExporter | None = None,
    where: str | None = None,
    project: str = DEFAULT_PROJECT,
    force: bool = False,
) -> dict[str, int]:
    """Write these runs' spans (all runs when None) to `out` as JSON Lines and/or hand them to `exporter`.

    The file appears whole or not at all (written beside `out`, then renamed: core.files.replacing); an
    existing `out` is replaced only with `force`, and a symbolic link, FIFO or device is never written. A
    run is loaded, turned into spans, written and sent before the next is read, so memory holds one run at
    a time. Returns the numbers of runs and spans."""
    from core.files import check_output, replacing

    if out is None and exporter is None:
        raise InvalidInputError("nothing to do: pass --out FILE.jsonl and/or --otlp-endpoint URL")
    if out is not None:
        check_output(out, what="--out", force=force)  # before any run is read or sent
    ids = _run_ids(store, run_ids)
    builder = SpanBuilder(project)
    count = sent = 0
    try:
        with replacing(out, what="--out", force=force) if out is not None else nullcontext() as f:
            for rid in ids:
                spans = builder.spans(store.load_run(rid))
                count += len(spans)
                if f is not None:
                    f.writelines(span_line(s) + "\n" for s in spans)
                if exporter is not None:
                    send_spans(spans, exporter, where or "the exporter")
                    sent += 1
    except OSError as e:
        raise ExportError(f"cannot write {out}: {e.strerror or type(e).__name__}; nothing was written") from None
    except ExportError as e:
        left = [f"{out} was not written."] if out is not None else []
        if sent:  # ids are derived from the runs: sending again repeats the same spans, it does not add copies
            left.append(f"The first {sent} of {len(ids)} runs were sent (sending them again is safe).")
        said = str(e) if not left or str(e).endswith((".", "?")) else f"{e}."
        raise ExportError(" ".join([said, *left])) from None
    finally:
        builder.close()
    return {"runs": len(ids), "spans": count}

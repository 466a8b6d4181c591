"""OTLP traces from the real SDK: ``exception`` span events become candidates."""

from __future__ import annotations

import json

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import StatusCode

from ephyra.core.states import Severity
from ephyra.telemetry import JSON, PROTOBUF, parse_traces
from tests.telemetry import shop
from tests.telemetry.otel import OPTIONS, fixture, otlp_json, raised, span_request


def both(request: ExportTraceServiceRequest):
    from_pb = parse_traces(request.SerializeToString(), PROTOBUF, options=OPTIONS)
    from_json = parse_traces(json.dumps(otlp_json(request)).encode(), JSON, options=OPTIONS)
    assert from_pb == from_json
    return from_pb


def test_an_exception_recorded_on_a_span_becomes_a_candidate_with_the_span_ids():
    def run(tracer):
        try:
            with tracer.start_as_current_span("POST /checkout") as span:
                span.set_attribute("http.route", "/checkout")
                span.set_attribute("http.request.method", "POST")
                shop.lookup("SKU-404")
        except KeyError:
            pass

    request = span_request(run)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    result = both(request)
    assert (result.signal, result.records, result.dropped, result.rejected) == ("traces", 1, 0, 0)
    [c] = result.candidates
    assert c.source == "span_event" and c.severity is Severity.ERROR
    assert c.title == "KeyError: 'SKU-404'"
    assert c.culprit == "tests/telemetry/shop.py in lookup"
    assert c.trace_id == span.trace_id.hex() and c.span_id == span.span_id.hex()
    assert c.logger == "shop.web"
    assert c.attributes["http.route"] == "/checkout"
    assert c.attributes["exception.escaped"] == "False"  # the event's own (the SDK writes a str)
    assert "exception.stacktrace" not in c.attributes  # already the candidate's stacktrace


def test_spans_without_exception_events_are_dropped_even_when_their_status_is_error():
    def run(tracer):
        with tracer.start_as_current_span("GET /health"):
            pass
        with tracer.start_as_current_span("GET /slow") as span:
            span.set_status(StatusCode.ERROR, "timeout")
            span.add_event("retry", {"attempt": 2})

    result = both(span_request(run))
    assert (result.records, result.dropped, len(result.candidates)) == (2, 2, 0)


def test_several_exception_events_on_one_span_give_several_candidates():
    def run(tracer):
        with tracer.start_as_current_span("batch") as span:
            span.record_exception(raised(shop.checkout, []))
            span.record_exception(raised(shop.pay, "bob@example.com", "r-1", 10))

    result = both(span_request(run))
    assert result.records == 1 and result.dropped == 0
    titles = [c.title for c in result.candidates]
    assert titles[0] == "ZeroDivisionError: division by zero"
    assert titles[1] == (
        "tests.telemetry.shop.PaymentDeclined: card declined for [redacted:email] "
        "(request r-1, amount 10)"
    )


def test_a_java_exception_event_reads_the_stacktrace_attribute():
    def run(tracer):
        with tracer.start_as_current_span("checkout") as span:
            span.add_event(
                "exception",
                {
                    "exception.type": "java.lang.IllegalStateException",
                    "exception.message": "cart 81723 has no lines",
                    "exception.stacktrace": fixture("java_spring.txt"),
                },
            )

    resource = {"service.name": "shop-jvm", "telemetry.sdk.language": "java"}
    [c] = both(span_request(run, resource)).candidates
    assert c.language == "java"
    assert c.culprit == "com.acme.shop.checkout.CheckoutService in total"
    assert c.paths[0] == "com/acme/shop/checkout/CheckoutService.java"


def test_a_span_with_one_unusable_exception_event_is_rejected_whole():
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def event(**attributes: str) -> Span.Event:
        return Span.Event(
            name="exception",
            time_unix_nano=1,
            attributes=[
                KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attributes.items()
            ],
        )

    usable = event(**{"exception.type": "ValueError", "exception.message": "bad"})
    spans = [
        Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="a", events=[usable, event()]),
        Span(trace_id=b"\x01" * 16, span_id=b"\x03" * 8, name="b", events=[usable]),
    ]
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=spans)])]
    )
    from_pb = parse_traces(request.SerializeToString(), PROTOBUF)
    from_json = parse_traces(json.dumps(otlp_json(request)).encode(), JSON)
    for result in (from_pb, from_json):
        assert (result.records, result.rejected) == (2, 1)
        assert [c.span_id for c in result.candidates] == ["03" * 8]  # none from the rejected
        assert result.rejection.endswith(
            "spans[0]: an error record with no body and no exception attributes"
        )

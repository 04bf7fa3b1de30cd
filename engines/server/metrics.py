"""Prometheus metrics, one registry per app (``GET /metrics``).

Request-level series are counted by the routes; engine-level series (queue depth, running requests,
steps, acceptance-length histogram, step time) are read from the scheduler at scrape time.
"""

import statistics

from prometheus_client import CollectorRegistry
from prometheus_client import Counter
from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest

LATENCY_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)


class SchedulerCollector:
    """Engine-level series from :class:`~specpilot.engines.scheduler.Scheduler` at scrape time."""

    def __init__(self, scheduler, block_size: int):
        self.scheduler, self.block_size = scheduler, block_size

    def collect(self):
        """Yield the metric families (prometheus-client collector protocol)."""
        s, stats = self.scheduler, self.scheduler.stats
        yield GaugeMetricFamily("specpilot_queue_depth", "Requests waiting for a batch row",
                                value=s.queue_depth)
        yield GaugeMetricFamily("specpilot_num_running_requests", "Requests in the running batch",
                                value=s.num_running)
        yield CounterMetricFamily("specpilot_scheduler_requests", "Requests submitted",
                                  value=stats.requests_total)
        yield CounterMetricFamily("specpilot_scheduler_requests_failed",
                                  "Requests failed by the engine", value=stats.requests_failed)
        yield CounterMetricFamily("specpilot_scheduler_tokens", "Tokens generated (all requests)",
                                  value=stats.tokens_total)
        yield CounterMetricFamily("specpilot_steps", "Batched decode steps",
                                  value=stats.steps_total)
        yield CounterMetricFamily("specpilot_admissions",
                                  "Prefill rounds that joined queued requests (each stalls every "
                                  "running request once)", value=stats.admissions_total)
        counts = dict(stats.accept_lengths)  # one C-level copy: safe against the scheduler thread
        buckets, cumulative = [], 0
        for bound in range(1, max([self.block_size, *counts]) + 1):
            cumulative += counts.get(bound, 0)
            buckets.append((str(bound), cumulative))
        buckets.append(("+Inf", sum(counts.values())))
        yield HistogramMetricFamily(
            "specpilot_accept_length", "Tokens kept per request per decode step (bonus included)",
            buckets=buckets, sum_value=sum(k * v for k, v in counts.items()))
        recent = list(stats.step_seconds)
        step = GaugeMetricFamily("specpilot_step_seconds",
                                 "Batched step time over the recent steps (up to 512)",
                                 labels=["quantile"])
        if recent:
            ranked = sorted(recent)
            for q in (0.5, 0.9, 0.99):
                step.add_metric([str(q)], ranked[min(len(ranked) - 1, int(q * len(ranked)))])
            step.add_metric(["mean"], statistics.fmean(recent))
        yield step


class ServerMetrics:
    """The app's registry: request and token counters, latency, plus the scheduler's series."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, scheduler, block_size: int):
        self.registry = CollectorRegistry()
        self.requests = Counter("specpilot_requests", "Finished generation requests",
                                ["endpoint", "finish_reason"], registry=self.registry)
        self.http = Counter("specpilot_http_requests", "HTTP requests answered",
                            ["method", "path", "status"], registry=self.registry)
        self.prompt_tokens = Counter("specpilot_prompt_tokens",
                                     "Prompt tokens of finished requests", registry=self.registry)
        self.completion_tokens = Counter("specpilot_completion_tokens",
                                         "Completion tokens of finished requests",
                                         registry=self.registry)
        self.latency = Histogram("specpilot_request_latency_seconds",
                                 "Generation request latency (submit to last token)", ["endpoint"],
                                 buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self.registry.register(SchedulerCollector(scheduler, block_size))

    def request_done(self, generation) -> None:
        """Count one finished :class:`~specpilot.engines.server.generation.Generation`."""
        self.requests.labels(generation.endpoint, generation.finish_reason).inc()
        self.prompt_tokens.inc(len(generation.prompt_ids))
        self.completion_tokens.inc(len(generation.output_ids))
        self.latency.labels(generation.endpoint).observe(generation.latency_s)

    def render(self) -> bytes:
        """The exposition text of every series."""
        return generate_latest(self.registry)

"""Prometheus metrics of one API server (own registry, so two apps in a process never clash)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from mstar.ipc.messages import WorkerStats

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                    2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("mstar_requests", "Finished HTTP generation requests, by route "
                                "template ('unmatched' for every path no route serves) and status.",
                                ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter("mstar_prompt_tokens", "Prompt tokens processed.",
                                     registry=r)
        self.output_tokens = Counter("mstar_generation_tokens", "Output tokens generated.",
                                     registry=r)
        self.in_flight = Gauge("mstar_http_requests_in_flight",
                               "Generation requests the API server is handling.", registry=r)
        self.running = Gauge("mstar_num_requests_running", "Requests running in the workers.",
                             registry=r)
        self.waiting = Gauge("mstar_num_requests_waiting", "Requests waiting in the workers.",
                             registry=r)
        self.kv_usage = Gauge("mstar_kv_cache_usage_ratio",
                              "Fraction of KV-cache blocks in use (mean over workers).", registry=r)
        self.preemptions = Gauge("mstar_num_preemptions",
                                 "Requests preempted so far (KV cache full; recomputed later), "
                                 "summed over workers.", registry=r)
        self.encoder_hits = Gauge("mstar_encoder_cache_hits", "Images whose vision-encoder "
                                  "output came from the encoder cache, summed over workers.",
                                  registry=r)
        self.encoder_misses = Gauge("mstar_encoder_cache_misses", "Images the vision encoder "
                                    "ran on (not in the encoder cache), summed over workers.",
                                    registry=r)
        self.encoder_seconds = Gauge("mstar_encoder_seconds", "Time spent in the vision "
                                     "encoder inside engine steps so far, summed over workers.",
                                     registry=r)
        self.settings_info = Gauge("mstar_settings_info", "The settings fingerprint (the same "
                                   "as system_fingerprint in responses); always 1.",
                                   ["fingerprint"], registry=r)
        self.dropped_frames = Gauge(
            "mstar_transport_dropped_frames", "Frames a process's inbox dropped so far (never "
            "delivered: undecodable, an unexpected message type, or over MSTAR_MAX_MESSAGE_MB), "
            "by process (api_server, conductor, worker I) and reason.", ["process", "reason"],
            registry=r)
        self.ttft = Histogram("mstar_time_to_first_token_seconds", "Time to first token.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.itl = Histogram("mstar_inter_token_latency_seconds",
                             "Time between streamed outputs of a request.",
                             buckets=_LATENCY_BUCKETS, registry=r)

    def show_fingerprint(self, fingerprint: str) -> None:
        """mstar_settings_info{fingerprint="..."} 1, for the settings running now."""
        self.settings_info.clear()
        self.settings_info.labels(fingerprint=fingerprint).set(1)

    def update_workers(self, stats: dict[int, WorkerStats]) -> None:
        values = list(stats.values())
        self.running.set(sum(s.running for s in values))
        self.waiting.set(sum(s.waiting for s in values))
        self.kv_usage.set(sum(s.kv_cache_usage for s in values) / len(values) if values else 0.0)
        self.preemptions.set(sum(s.preemptions for s in values))
        self.encoder_hits.set(sum(s.encoder_cache_hits for s in values))
        self.encoder_misses.set(sum(s.encoder_cache_misses for s in values))
        self.encoder_seconds.set(sum(s.encoder_seconds for s in values))

    def update_dropped_frames(self, dropped: dict[str, dict[str, int]]) -> None:
        for process, counts in dropped.items():
            for reason, count in counts.items():
                self.dropped_frames.labels(process=process, reason=reason).set(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)

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
        spec = ("method",)
        self.spec_proposed = Gauge("mstar_spec_decode_draft_tokens", "Speculative decoding: draft "
                                   "tokens proposed so far, summed over workers.", spec,
                                   registry=r)
        self.spec_accepted = Gauge("mstar_spec_decode_accepted_tokens", "Speculative decoding: "
                                   "draft tokens accepted so far, summed over workers.", spec,
                                   registry=r)
        self.spec_rate = Gauge("mstar_spec_decode_acceptance_ratio", "Speculative decoding: "
                               "accepted / proposed draft tokens so far.", spec, registry=r)
        self.spec_seconds = Gauge("mstar_spec_decode_seconds", "Speculative decoding: seconds "
                                  "spent so far proposing drafts (phase=propose) and in the "
                                  "forwards that verified them (phase=verify), summed over "
                                  "workers.", ("method", "phase"), registry=r)
        self.lora_requests = Counter("mstar_lora_requests", "Generation sub-requests (choices) "
                                     "sent to the workers for each LoRA adapter.", ["adapter"],
                                     registry=r)
        self.lora_loads = Gauge("mstar_lora_loads", "LoRA adapters read so far (at start and at "
                                "run time), summed over workers.", registry=r)
        self.lora_evictions = Gauge("mstar_lora_evictions", "LoRA adapters moved out of a device "
                                    "slot (MSTAR_MAX_LORAS) for another so far, summed over "
                                    "workers.", registry=r)
        self.codec_requests = Gauge("mstar_codec_requests", "Speech out: requests whose codec "
                                    "state (frames waiting for their window) the codec node "
                                    "holds, in the worker or in its process apart, summed over "
                                    "workers.", registry=r)
        self.settings_info = Gauge("mstar_settings_info", "The settings fingerprint (the same "
                                   "as system_fingerprint in responses); always 1.",
                                   ["fingerprint"], registry=r)
        self.dropped_frames = Gauge(
            "mstar_transport_dropped_frames", "Frames a process's inbox dropped so far (never "
            "delivered: undecodable, an unexpected message type, values that do not fit "
            "(invalid), or over MSTAR_MAX_MESSAGE_MB), by process (api_server, conductor, "
            "worker I) and reason.", ["process", "reason"],
            registry=r)
        # Per API key name (never the key): the keys file's names, mstar_api_key, anonymous.
        self.key_requests = Counter("mstar_key_requests", "Finished generation requests by API "
                                    "key name and status (429: over one of the key's limits).",
                                    ["key", "status"], registry=r)
        self.key_rate_limited = Counter("mstar_key_rate_limited", "Requests refused with 429, by "
                                        "API key name and the limit they hit (requests, tokens, "
                                        "concurrency).", ["key", "limit"], registry=r)
        self.key_tokens = Counter("mstar_key_tokens", "Tokens charged to an API key name, by "
                                  "kind (prompt, completion).", ["key", "kind"], registry=r)
        self.key_queue = Histogram("mstar_key_queue_seconds", "Per API key name: from admission "
                                   "to the request's first output token (the wait for the "
                                   "engine: queueing in the worker, and prefill).", ["key"],
                                   buckets=_LATENCY_BUCKETS, registry=r)
        route = ("replica", "rule")
        self.route_decisions = Gauge("mstar_route_decisions", "Sub-requests sent to each "
                                     "replica so far, by why it was chosen (MSTAR_ROUTE_POLICY): "
                                     "prefix (it was sent the prompt's longest known prefix), "
                                     "least_loaded (no known prefix, or that policy), imbalance "
                                     "(its prefix replica was over MSTAR_ROUTE_MAX_IMBALANCE), "
                                     "only (one replica).", route, registry=r)
        self.route_prefix_hits = Gauge("mstar_route_prefix_hits", "Finished sub-requests so far "
                                       "whose prompt began in the replica's prefix cache, by "
                                       "replica.", ("replica",), registry=r)
        self.route_cached_tokens = Gauge("mstar_route_cached_tokens", "Prompt tokens served from "
                                         "the prefix cache so far, by replica.", ("replica",),
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
        self.lora_loads.set(sum(s.lora_loads for s in values))
        self.lora_evictions.set(sum(s.lora_evictions for s in values))
        self.codec_requests.set(sum(s.codec_requests for s in values))
        self._update_speculation(values)

    def _update_speculation(self, values: list[WorkerStats]) -> None:
        for method in {s.spec_method for s in values if s.spec_method}:
            mine = [s for s in values if s.spec_method == method]
            proposed = sum(s.spec_proposed for s in mine)
            accepted = sum(s.spec_accepted for s in mine)
            self.spec_proposed.labels(method=method).set(proposed)
            self.spec_accepted.labels(method=method).set(accepted)
            self.spec_rate.labels(method=method).set(accepted / proposed if proposed else 0.0)
            self.spec_seconds.labels(method=method, phase="propose").set(
                sum(s.spec_propose_s for s in mine))
            self.spec_seconds.labels(method=method, phase="verify").set(
                sum(s.spec_verify_s for s in mine))

    def update_routing(self, decisions: dict[tuple[int, str], int], hits: dict[int, int],
                       cached_tokens: dict[int, int]) -> None:
        """The router's counts (``generation.routing.Router``)."""
        for (replica, rule), count in decisions.items():
            self.route_decisions.labels(replica=str(replica), rule=rule).set(count)
        for replica, count in hits.items():
            self.route_prefix_hits.labels(replica=str(replica)).set(count)
        for replica, count in cached_tokens.items():
            self.route_cached_tokens.labels(replica=str(replica)).set(count)

    def update_dropped_frames(self, dropped: dict[str, dict[str, int]]) -> None:
        for process, counts in dropped.items():
            for reason, count in counts.items():
                self.dropped_frames.labels(process=process, reason=reason).set(count)

    def render(self) -> bytes:
        return generate_latest(self.registry)

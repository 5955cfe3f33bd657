// The operator's page: every INTERVAL_S it reads /health and /metrics and adds a point to each
// plot; it reads /v1/config at start, when the settings fingerprint in /metrics changes (a reload)
// and every CONFIG_EVERY scrapes (a value waiting for a restart does not change the fingerprint).
"use strict";

const INTERVAL_S = 2;
const CONFIG_EVERY = 10;
const QUANTILES = [0.5, 0.9, 0.99];
const TTFT = "mstar_time_to_first_token_seconds";
const ITL = "mstar_inter_token_latency_seconds";
const GAUGES = [["running", "mstar_num_requests_running"], ["waiting", "mstar_num_requests_waiting"],
  ["in flight (HTTP)", "mstar_http_requests_in_flight"], ["KV cache in use", "mstar_kv_cache_usage_ratio"],
  ["preemptions", "mstar_num_preemptions"]];
// The series the plots and the health table show; the table of other series lists the rest.
const PLOTTED = new Set(["mstar_generation_tokens_total", "mstar_prompt_tokens_total", "mstar_requests_total",
  "mstar_settings_info", ...GAUGES.map(([, name]) => name)]);

let plots = null;
let previous = null; // the last scrape: {time, samples}
let config = null;
let fingerprint = null;
let scrapes = 0;
let timer = null;

function makePlots() {
  const parent = document.getElementById("plots");
  const percentiles = QUANTILES.map((q) => "p" + Math.round(q * 100));
  return {
    throughput: new Plot(parent, "plot-throughput", "Throughput", "tok/s", ["generated", "prompt"]),
    requests: new Plot(parent, "plot-requests", "Requests finished", "/s", ["requests"]),
    ttft: new Plot(parent, "plot-ttft", "Time to first token", "s", percentiles),
    itl: new Plot(parent, "plot-itl", "Inter-token latency", "s", percentiles),
    kv: new Plot(parent, "plot-kv", "KV cache in use", "ratio", ["KV"]),
    queue: new Plot(parent, "plot-queue", "Queue depth", "", ["running", "waiting", "in flight"]),
  };
}

function addPoints(scrape) {
  const s = scrape.samples;
  const rate = (name) => ratePerS(previous, scrape, name);
  plots.throughput.add([rate("mstar_generation_tokens_total"), rate("mstar_prompt_tokens_total")]);
  plots.requests.add([rate("mstar_requests_total")]);
  plots.ttft.add(QUANTILES.map((q) => quantileBetween(previous, scrape, TTFT, q)));
  plots.itl.add(QUANTILES.map((q) => quantileBetween(previous, scrape, ITL, q)));
  plots.kv.add([total(s, "mstar_kv_cache_usage_ratio")]);
  plots.queue.add([total(s, "mstar_num_requests_running"), total(s, "mstar_num_requests_waiting"),
    total(s, "mstar_http_requests_in_flight")]);
}

async function showHealth() {
  const response = await fetch("/health");
  const body = await response.json().catch(() => ({}));
  const state = response.ok ? body.status : "down";
  const badge = document.getElementById("health");
  badge.textContent = state;
  badge.className = "badge " + (state === "ok" || state === "degraded" ? state : "down");
  const message = body.message || (body.error && body.error.message) || "";
  document.getElementById("health-message").textContent = message;
}

function showWorkers(samples) {
  const rows = GAUGES.map(([label, name]) => el("tr", {}, el("th", {}, label),
    el("td", { class: "value" }, formatValue(total(samples, name), name.endsWith("_ratio") ? "ratio" : ""))));
  document.getElementById("workers").replaceChildren(...rows);
}

function labelText(labels) {
  return Object.entries(labels).map(([k, v]) => k + "=" + v).join(", ");
}

// Every other sample (requests by route and status, dropped frames, speculative decoding, and
// per-adapter or per-key series where the server has them), with its rate for a counter.
function showOtherSeries(scrape) {
  const skip = /(_created|_bucket|_sum|_count)$/;
  const rows = scrape.samples.filter((s) => !PLOTTED.has(s.name) && !skip.test(s.name)).map((s) => {
    const before = previous && previous.samples.find((p) => p.name === s.name && labelText(p.labels) === labelText(s.labels));
    const perS = before && s.name.endsWith("_total") ? (s.value - before.value) / ((scrape.time - previous.time) / 1000) : null;
    return el("tr", {}, el("td", { class: "name" }, s.name), el("td", {}, labelText(s.labels)),
      el("td", { class: "value" }, formatValue(s.value, "")),
      el("td", { class: "value" }, perS === null ? "" : formatValue(perS, "/s")));
  });
  const head = el("tr", {}, ...["Series", "Labels", "Value", "Rate"].map((name) => el("th", {}, name)));
  document.getElementById("series").replaceChildren(head, ...rows);
}

async function loadConfig() {
  const response = await api("/v1/config");
  if (!response.ok) throw new Error(await errorText(response));
  config = await response.json();
  fingerprint = config.fingerprint;
  renderSettings(config, document.getElementById("filter").value);
}

async function scrape() {
  await showHealth();
  const response = await api("/metrics");
  if (!response.ok) throw new Error(await errorText(response));
  const current = { time: performance.now(), samples: parseMetrics(await response.text()) };
  addPoints(current);
  showWorkers(current.samples);
  showOtherSeries(current);
  previous = current;
  const info = current.samples.find((s) => s.name === "mstar_settings_info");
  scrapes += 1;
  if ((info && info.labels.fingerprint !== fingerprint) || scrapes % CONFIG_EVERY === 0) await loadConfig();
  setStatus("");
}

// Polls until a request needs the key; entering it (withKey) starts polling again.
async function start() {
  if (timer !== null) return;
  await loadConfig();
  const tick = () => scrape().catch((error) => {
    if (error instanceof AuthError) {
      clearInterval(timer);
      timer = null;
    } else {
      setStatus(String(error.message || error));
    }
  });
  timer = setInterval(tick, INTERVAL_S * 1000);
  await tick();
}

document.addEventListener("DOMContentLoaded", () => {
  plots = makePlots();
  document.getElementById("interval").textContent = String(INTERVAL_S);
  document.getElementById("filter").addEventListener("input", () => {
    if (config) renderSettings(config, document.getElementById("filter").value);
  });
  withKey(start);
});

// Reading /metrics (Prometheus' text format) and deriving what the plots show: rates between two
// scrapes, and latency quantiles of the observations made between them.
"use strict";

// [{name, labels: {k: v}, value}] for each sample line; comments and blank lines skipped.
function parseMetrics(text) {
  const samples = [];
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (match) samples.push({ name: match[1], labels: parseLabels(match[3] || ""), value: Number(match[4]) });
  }
  return samples;
}

function parseLabels(text) {
  const labels = {};
  const pattern = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
  let match;
  while ((match = pattern.exec(text)) !== null) {
    labels[match[1]] = match[2].replace(/\\n/g, "\n").replace(/\\"/g, '"').replace(/\\\\/g, "\\");
  }
  return labels;
}

// The sum of a metric's samples over every label set (0 when it has none).
function total(samples, name) {
  return samples.filter((s) => s.name === name).reduce((sum, s) => sum + s.value, 0);
}

// Per second, between two scrapes {time (ms), samples}: a counter's increase (null before the
// second scrape, or after a restart reset it).
function ratePerS(before, after, name) {
  if (!before) return null;
  const increase = total(after.samples, name) - total(before.samples, name);
  const seconds = (after.time - before.time) / 1000;
  return increase >= 0 && seconds > 0 ? increase / seconds : null;
}

// Cumulative bucket counts of a histogram, {le: count} summed over label sets.
function buckets(samples, histogram) {
  const counts = {};
  for (const s of samples) {
    if (s.name === histogram + "_bucket") counts[s.labels.le] = (counts[s.labels.le] || 0) + s.value;
  }
  return counts;
}

// The q-quantile of the observations made between two scrapes, interpolated within its bucket as
// Prometheus' histogram_quantile does; null when nothing was observed in between.
function quantileBetween(before, after, histogram, q) {
  if (!before) return null;
  const old = buckets(before.samples, histogram);
  const now = buckets(after.samples, histogram);
  const upper = (le) => (le === "+Inf" ? Infinity : Number(le));
  const bounds = Object.keys(now).map((le) => ({ le, upper: upper(le) })).sort((a, b) => a.upper - b.upper);
  const counts = bounds.map((b) => now[b.le] - (old[b.le] || 0));
  const count = counts.length ? counts[counts.length - 1] : 0;
  if (!(count > 0)) return null;
  const rank = q * count;
  for (let i = 0; i < bounds.length; i++) {
    if (counts[i] < rank) continue;
    if (bounds[i].upper === Infinity) return i > 0 ? bounds[i - 1].upper : null;
    const lower = i > 0 ? bounds[i - 1].upper : 0;
    const below = i > 0 ? counts[i - 1] : 0;
    const inBucket = counts[i] - below;
    return inBucket > 0 ? lower + (bounds[i].upper - lower) * ((rank - below) / inBucket) : bounds[i].upper;
  }
  return null;
}

// The running settings from /v1/config, grouped by category as `mstar config show` prints them:
// each knob's value, source, default, bounds and reloadability, and a mark on a knob whose new value
// (read on SIGHUP) waits for a restart.
"use strict";

// A number as Python's "%g" writes it (six significant digits), so bounds read as in the docs.
function gFormat(x) {
  const abs = Math.abs(x);
  if (abs !== 0 && (abs >= 1e6 || abs < 1e-4)) {
    const [mantissa, exponent] = x.toExponential(5).split("e");
    const sign = exponent[0] === "-" ? "-" : "+";
    const digits = exponent.replace(/^[+-]/, "");
    return String(Number(mantissa)) + "e" + sign + digits.padStart(2, "0");
  }
  return String(Number(x.toPrecision(6)));
}

// What the knob allows, as the docs' Bounds column says it.
function boundsText(rec) {
  if (rec.choices) return rec.choices.join(" | ");
  const parts = [];
  if (rec.min !== null) parts.push((rec.min_exclusive ? "> " : ">= ") + gFormat(rec.min));
  if (rec.max !== null) parts.push("<= " + gFormat(rec.max));
  return parts.join(" and ");
}

function valueText(value) {
  if (value === null) return "unset";
  if (value === true) return "on";
  if (value === false) return "off";
  if (Array.isArray(value)) return value.join(",");
  return String(value);
}

function settingRow(rec) {
  const changed = valueText(rec.value) !== valueText(rec.default);
  const value = el("td", { class: "value" }, valueText(rec.value) + (rec.unit && rec.value !== null ? " " + rec.unit : ""));
  if (rec.pending_restart) {
    const waiting = rec.pending_restart;
    value.append(" ", el("span", { class: "badge pending", title: "from " + waiting.source },
      "restart pending: " + valueText(waiting.value)));
  }
  if (rec.no_effect) value.append(" ", el("span", { class: "badge down" }, "no effect since " + rec.no_effect));
  return el("tr", { id: "knob-" + rec.name, class: changed ? "changed" : null, "data-source": rec.source },
    el("td", { class: "name", title: rec.description }, rec.name),
    value,
    el("td", { class: "source" }, rec.source),
    el("td", {}, valueText(rec.default)),
    el("td", {}, boundsText(rec)),
    el("td", {}, rec.reloadable ? "reloadable" : "restart"),
    el("td", { class: "legend" }, rec.description));
}

// The tables, one per category, of the records that match `filter` (name, value or source).
function renderSettings(config, filter) {
  document.getElementById("fingerprint").textContent = config.fingerprint;
  const pending = config.settings.filter((r) => r.pending_restart).length;
  const badge = document.getElementById("pending");
  badge.hidden = pending === 0;
  badge.textContent = pending + " change(s) wait for a restart";
  const needle = filter.trim().toLowerCase();
  const shown = config.settings.filter((r) => !needle ||
    [r.name, valueText(r.value), r.source].some((text) => text.toLowerCase().includes(needle)));
  const groups = new Map();
  for (const rec of shown) {
    if (!groups.has(rec.category)) groups.set(rec.category, []);
    groups.get(rec.category).push(rec);
  }
  const head = el("tr", {}, ...["Variable", "Value", "Source", "Default", "Bounds", "Reload", "Meaning"]
    .map((name) => el("th", {}, name)));
  const sections = [...groups].map(([category, records]) => el("div", {}, el("h3", {}, category),
    el("table", {}, head.cloneNode(true), ...records.map(settingRow))));
  document.getElementById("settings").replaceChildren(...sections);
}

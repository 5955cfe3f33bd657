// A small time plot drawn as SVG: one path per series over the last POINTS scrapes (a gap
// where a value is missing), scaled to the largest value shown; the latest values and the scale
// are text under it.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const POINTS = 150;
const COLORS = ["#2f5bd3", "#e07b00", "#0e9384", "#b42318", "#7a5af8"];
const WIDTH = 300;
const HEIGHT = 100;

function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

// How a value of `unit` reads: seconds as ms below 1 s, a ratio as a percentage.
function formatValue(value, unit) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (unit === "s") return value < 1 ? (value * 1000).toFixed(1) + " ms" : value.toFixed(2) + " s";
  if (unit === "ratio") return (value * 100).toFixed(1) + " %";
  const digits = Math.abs(value) >= 100 || Number.isInteger(value) ? 0 : 1;
  return value.toFixed(digits) + (unit ? " " + unit : "");
}

class Plot {
  // labels: one per series; unit: "s", "ratio" or a word shown after the number.
  constructor(parent, id, title, unit, labels) {
    this.unit = unit;
    this.labels = labels;
    this.values = labels.map(() => []); // per series, [value or null] oldest first
    this.lines = labels.map((_, i) => svg("path", { fill: "none", stroke: COLORS[i % COLORS.length],
      "stroke-width": 2, "stroke-linecap": "round", "stroke-linejoin": "round", "vector-effect": "non-scaling-stroke",
      d: "" }));
    const chart = svg("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, preserveAspectRatio: "none", role: "img" });
    chart.append(svg("line", { x1: 0, y1: HEIGHT, x2: WIDTH, y2: HEIGHT, class: "axis" }), ...this.lines);
    this.legend = el("div", { class: "legend" });
    parent.append(el("div", { class: "plot", id }, el("h3", {}, title), chart, this.legend));
  }

  // One scrape's values, a number or null (no data: a gap) per series.
  add(values) {
    values.forEach((value, i) => {
      this.values[i].push(value);
      if (this.values[i].length > POINTS) this.values[i].shift();
    });
    this.draw();
  }

  draw() {
    const shown = this.values.flat().filter((v) => v !== null && Number.isFinite(v));
    const top = Math.max(...shown, 0) || 1;
    // Until POINTS scrapes are in, the ones there are fill the width.
    const span = Math.max(Math.min(this.values[0].length, POINTS) - 1, 1);
    this.values.forEach((series, i) => {
      let path = "";
      series.forEach((v, j) => {
        const missing = v === null || !Number.isFinite(v);
        if (missing) return;
        const point = `${(j / span) * WIDTH},${HEIGHT - (v / top) * HEIGHT * 0.95}`;
        // a point after a gap starts a segment; "h0" draws it as a dot (round caps) if it stays alone
        path += j > 0 && series[j - 1] !== null ? `L${point} ` : `M${point} h0 `;
      });
      this.lines[i].setAttribute("d", path.trim());
    });
    const latest = this.labels.map((label, i) => {
      const series = this.values[i];
      const swatch = el("b", {}, "■ ");
      swatch.style.color = COLORS[i % COLORS.length]; // CSSOM, which the page's CSP allows
      return el("span", {}, swatch, label + " " + formatValue(series[series.length - 1], this.unit));
    });
    this.legend.replaceChildren(...latest, el("span", {}, "scale " + formatValue(top, this.unit)));
  }
}

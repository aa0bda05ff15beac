/* proctor's run report: draws the charts and tables from the embedded data.
   Every text from the run goes in through textContent, never as markup. */
(function () {
  "use strict";
  var PALETTE = ["#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#0891b2"];
  var data = JSON.parse(document.getElementById("proctor-data").textContent);
  var drawn = 0;
  var plots = [];

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function width(box) {
    // The charts sit in a grid of columns at least 460 px wide, 12 px apart.
    var room = box.clientWidth || 960;
    var columns = Math.max(1, Math.floor((room + 12) / (460 + 12)));
    return Math.max(280, Math.floor((room - 12 * (columns - 1)) / columns) - 2);
  }

  function chart(box, title, xs, series, opts) {
    opts = opts || {};
    var holder = el("div", "chart");
    holder.appendChild(el("h3", null, title));
    box.appendChild(holder);
    var config = {
      width: width(box),
      height: opts.height || 180,
      scales: { x: { time: false }, y: opts.y || {} },
      axes: [{ label: "step" }, { label: opts.ylabel || "", size: 60 }],
      legend: { live: true },
      series: [{ label: "step" }].concat(series.map(function (s, i) {
        var out = {
          label: s.label,
          stroke: s.color || PALETTE[i % PALETTE.length],
          width: s.width || 1.5,
          spanGaps: false,
        };
        if (s.dash) {
          out.dash = s.dash;
          out.points = { show: false };
        }
        if (s.points) {
          out.paths = function () { return null; };
          out.points = { show: true, size: 7, fill: out.stroke };
        }
        if (s.bars) {
          out.paths = uPlot.paths.bars({ size: [0.9, 40] });
          out.fill = out.stroke;
          out.points = { show: false };
        }
        if (s.stepped) out.paths = uPlot.paths.stepped({ align: 1 });
        return out;
      })),
    };
    var plot = new uPlot(config, [xs].concat(series.map(function (s) { return s.values; })),
                         holder);
    plots.push({ plot: plot, box: box, height: config.height });
    drawn += 1;
  }

  function constant(xs, value) {
    return xs.map(function () { return value; });
  }

  function budgetCharts(box, runs) {
    // One chart per dimension: what is left of a limited one (with the
    // reserve line), or the running total of an unlimited one.
    var dims = [];
    runs.forEach(function (r) {
      Object.keys(r.limits).concat(Object.keys(r.cumulative)).forEach(function (d) {
        if (dims.indexOf(d) < 0 && d.indexOf(":") < 0) dims.push(d);
      });
    });
    dims.sort();
    if (!dims.length) {
      box.appendChild(el("p", "muted", "No budget dimension was limited or spent."));
      return;
    }
    dims.forEach(function (dim) {
      var xs = longest(runs);
      var series = [];
      var limited = runs.some(function (r) { return dim in r.limits; });
      runs.forEach(function (r, i) {
        var tag = runs.length > 1 ? r.label + " " : "";
        var values;
        if (limited && r.remaining[dim]) values = pad(r.remaining[dim], xs.length);
        else values = pad(r.cumulative[dim] || [], xs.length);
        series.push({ label: tag + (limited ? "left" : "spent"), values: values,
                      color: PALETTE[i * 2 % PALETTE.length], width: 2 });
        if (limited && dim in r.limits) {
          series.push({ label: tag + "limit", values: constant(xs, r.limits[dim]),
                        color: "#6b7280", dash: [4, 4], width: 1 });
          if (r.reserve[dim]) {
            series.push({ label: tag + "reserve", values: constant(xs, r.reserve[dim]),
                          color: "#f59e0b", dash: [8, 4], width: 1 });
          }
        }
      });
      var title = limited ? dim + ": left of the limit" : dim + ": spent (no limit)";
      chart(box, title, xs, series, { ylabel: dim, y: { range: function (u, lo, hi) {
        return [0, Math.max(hi, 1e-9)];
      } } });
    });
  }

  function longest(runs) {
    var n = 0;
    runs.forEach(function (r) { n = Math.max(n, r.steps.step.length); });
    var xs = [];
    for (var i = 1; i <= n; i++) xs.push(i);
    return xs;
  }

  function pad(values, n) {
    var out = values.slice(0, n);
    while (out.length < n) out.push(null);
    return out;
  }

  function progressCharts(box, runs) {
    var xs = longest(runs);
    var series = [];
    runs.forEach(function (r, i) {
      var tag = runs.length > 1 ? r.label + " " : "";
      var s = r.steps;
      series.push({ label: tag + "steps without progress", values: pad(s.stall, xs.length),
                    color: PALETTE[i * 2 % PALETTE.length], width: 2, stepped: true });
      var nudges = s.decision.map(function (d, k) { return d === "nudge" ? s.stall[k] : null; });
      var refusals = s.decision.map(function (d, k) { return d === "refuse" ? s.stall[k] : null; });
      series.push({ label: tag + "nudge", values: pad(nudges, xs.length), color: "#0891b2",
                    points: true });
      series.push({ label: tag + "refused", values: pad(refusals, xs.length),
                    color: "#d97706", points: true });
      if (r.stall_threshold > 0) {
        series.push({ label: tag + "stop at", values: constant(xs, r.stall_threshold),
                      color: "#dc2626", dash: [4, 4], width: 1 });
      }
    });
    chart(box, "No-progress counter, nudges and refusals", xs, series,
          { ylabel: "steps", y: { range: function (u, lo, hi) { return [0, Math.max(hi, 1) + 1]; } } });
    var dur = [];
    runs.forEach(function (r, i) {
      var tag = runs.length > 1 ? r.label + " " : "";
      dur.push({ label: tag + "seconds", values: pad(r.steps.duration, xs.length),
                 color: PALETTE[i * 2 % PALETTE.length], bars: runs.length === 1 });
    });
    chart(box, "Duration of each step", xs, dur, { ylabel: "seconds",
          y: { range: function (u, lo, hi) { return [0, Math.max(hi, 0.001)]; } } });
  }

  function timeline(box, r) {
    var s = r.steps;
    var table = el("table", "steps");
    var head = el("tr");
    ["step", "action", "status", "decision", "progress", "seconds", "spend", "reason"]
      .forEach(function (h) { head.appendChild(el("th", null, h)); });
    table.appendChild(head);
    for (var i = 0; i < s.step.length; i++) {
      var tr = el("tr", "d-" + s.decision[i]);
      tr.appendChild(el("td", "num", s.step[i]));
      var cell = el("td", "action", s.action[i]);
      if (s.output[i] >= 0) {
        var details = el("details");
        details.appendChild(el("summary", null, "output"));
        details.appendChild(el("pre", null, r.outputs[s.output[i]]));
        cell.appendChild(details);
      }
      tr.appendChild(cell);
      tr.appendChild(el("td", null, s.status[i] || ""));
      tr.appendChild(el("td", null, s.decision[i]));
      tr.appendChild(el("td", null, s.progress[i] ? "yes" : ""));
      tr.appendChild(el("td", "num", s.duration[i].toFixed(2)));
      tr.appendChild(el("td", null, s.spend[i]));
      tr.appendChild(el("td", null, r.reasons[s.reason[i]]));
      table.appendChild(tr);
    }
    box.appendChild(table);
  }

  var runs = data.runs;
  budgetCharts(document.getElementById("budget"), runs);
  progressCharts(document.getElementById("progress"), runs);
  runs.forEach(function (r, i) {
    var box = document.getElementById("timeline-" + i);
    if (box) timeline(box, r);
  });
  window.addEventListener("resize", function () {
    plots.forEach(function (p) { p.plot.setSize({ width: width(p.box), height: p.height }); });
  });
  document.body.setAttribute("data-charts", String(drawn));
})();

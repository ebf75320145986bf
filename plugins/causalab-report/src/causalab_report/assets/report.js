// causalab report: draws the run embedded in #report-data (heatmaps, lines, rows). Plain JS, no library,
// nothing fetched: every chart is SVG markup built here from the numbers the run's files hold.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const C = D.compare || null;
  const app = document.getElementById("app");
  const tip = document.getElementById("tip");
  const axes = D.axes;
  const fixed = axes.map(() => 0); // the value shown of each axis beyond the first two
  const MAX_ROWS = 2000;

  // ---------------------------------------------------------------- helpers
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  }
  function finite(v) { return typeof v === "number" && isFinite(v); }
  function fmt(v) {
    if (v === null || v === undefined) return "n/a";
    if (typeof v === "string") return v; // "NaN", "Infinity": a value the metric could not compute
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e5 || a < 1e-3) return v.toExponential(3);
    return String(Number(v.toPrecision(4)));
  }
  function short(v) { return finite(v) ? v.toFixed(2) : "n/a"; }
  function mean(s) { return s && finite(s.mean) ? s.mean : null; }
  function clamp(x, lo, hi) { return Math.max(lo, Math.min(hi, x)); }
  const VIRIDIS = ["#440154", "#472d7b", "#3b528b", "#2c728e", "#21918c", "#28ae80", "#5ec962", "#addc30", "#fde725"];
  function hex(c) { return [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)); }
  function mix(a, b, t) { const x = hex(a), y = hex(b); return "rgb(" + x.map((v, i) => Math.round(v + (y[i] - v) * t)).join(",") + ")"; }
  function viridis(t) {
    t = clamp(t, 0, 1) * (VIRIDIS.length - 1);
    const i = Math.min(Math.floor(t), VIRIDIS.length - 2);
    return mix(VIRIDIS[i], VIRIDIS[i + 1], t - i);
  }
  function diverging(t) { // -1 blue, 0 white, 1 red
    return t < 0 ? mix("#ffffff", "#2166ac", clamp(-t, 0, 1)) : mix("#ffffff", "#b2182b", clamp(t, 0, 1));
  }
  function el(tag, cls, html) { const e = document.createElement(tag); if (cls) e.className = cls; if (html !== undefined) e.innerHTML = html; return e; }

  const key = (at) => at.join(",");
  const byAt = new Map(D.points.map((p, i) => [key(p.at), i]));
  function pointAt(coords) { // coords for the first two axes; the others as chosen
    const at = axes.map((_, k) => (k < coords.length ? coords[k] : fixed[k]));
    const i = byAt.get(key(at));
    return i === undefined ? -1 : i;
  }
  function pointName(p) { return D.points[p].name || "(no sweep)"; }
  function where(p) {
    return axes.map((a, k) => a + " = " + D.ticks[a][D.points[p].at[k]]).join("\n") || "(no sweep)";
  }

  // ---------------------------------------------------------------- what a point's value is, per side
  function sideValue(side, metric, p) {
    const a = mean(D.summary[metric][p]);
    if (side === "A") return a;
    const s = C.summary[metric] ? C.summary[metric][p] : null;
    if (side === "B") return mean(s);
    const b = mean(s);
    return a === null || b === null ? null : b - a;
  }
  function tipText(metric, p) {
    const s = D.summary[metric][p] || {};
    const lines = [where(p), metric + ": " + fmt(s.mean) + (s.estimated ? " (estimated; clean run " + fmt(s.clean_mean) + ")" : "")];
    if (finite(s.patched_mean)) lines.push("patched for real: " + fmt(s.patched_mean));
    if ("mean_low" in s) lines.push("95% interval over rows: [" + fmt(s.mean_low) + ", " + fmt(s.mean_high) + "]");
    lines.push("eligible rows: " + s.eligible + " of " + s.rows);
    if (C) {
      const b = C.summary[metric] ? C.summary[metric][p] : null;
      if (b) {
        lines.push("B: " + fmt(b.mean) + ("mean_low" in b ? "  [" + fmt(b.mean_low) + ", " + fmt(b.mean_high) + "]" : "") +
                   ", eligible " + b.eligible + " of " + b.rows);
        const d = sideValue("diff", metric, p);
        if (d !== null) lines.push("B − A: " + fmt(d));
        const rows = (C.differs[metric] || {})[p];
        if (rows) lines.push(rows.length + " rows differ");
      } else lines.push("B: no such point");
    }
    lines.push("(click: the point's rows)");
    return lines.join("\n");
  }

  // ---------------------------------------------------------------- charts
  function range(metric, side) {
    // A and B share one scale, so that one color is one value on both
    const sides = side === "diff" ? ["diff"] : C && C.summary[metric] ? ["A", "B"] : ["A"];
    const vs = [];
    sides.forEach((sd) => D.points.forEach((_, p) => { const v = sideValue(sd, metric, p); if (v !== null) vs.push(v); }));
    if (!vs.length) return null;
    let lo = Math.min(...vs), hi = Math.max(...vs);
    if (side === "diff") { const m = Math.max(Math.abs(lo), Math.abs(hi)) || 1; return [-m, m]; }
    const c = centre(metric);
    if (c !== null) { const m = Math.max(Math.abs(lo - c), Math.abs(hi - c)) || 1; return [c - m, c + m]; }
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    return [lo, hi];
  }
  // A signed metric (a value below zero at some point or row) is drawn on a diverging scale centred on the
  // clean run's value where the run has one (an estimate's clean mean), else on zero.
  function centre(metric) {
    const sums = D.summary[metric].concat(C && C.summary[metric] ? C.summary[metric] : []);
    const clean = sums.map((s) => s && s.clean_mean).find(finite);
    const signed = sums.some((s) => s && finite(s.mean) && s.mean < 0) ||
      D.values[metric].some((vs) => vs.some((v) => finite(v) && v < 0));
    return signed ? (finite(clean) ? clean : 0) : null;
  }
  function halfWidth(s) { return s && finite(s.mean_low) && finite(s.mean_high) ? (s.mean_high - s.mean_low) / 2 : null; }
  function textWidth(s) { return 6.3 * String(s).length; }
  function niceStep(raw) {
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    return power * ([1, 2, 2.5, 5, 10].find((m) => m * power >= raw) || 10);
  }

  function guessed(metric, p) { return !!(D.summary[metric][p] || {}).estimated; }

  // An estimated run's figures say so in view: how it was estimated, and the confirmed points' patched values
  // beside their estimates with the agreement of the two (run.json's estimate.confirmed).
  function estimateNote(metric) {
    const e = D.estimate, c = e.confirmed;
    const how = esc(e.method) + (e.steps ? ", integrated gradients over " + e.steps + " steps" : "");
    let html = '<div class="notes estimate-note"><b>Estimated</b> (' + how + "), not patched: every value here is an estimate (≈)." ;
    if (c) {
      const share = finite(c.mean_abs_effect) && c.mean_abs_effect > 0 ? " (" + Math.round(100 * c.mean_abs_error / c.mean_abs_effect) + "% of the mean patched effect)" : "";
      html += ' <span class="agreement">The ' + c.points.length + " points the estimate moves most (by " + esc(c.metric) + ") were patched for real (outlined): Spearman " +
        (finite(c.spearman) ? c.spearman.toFixed(2) : "n/a") + ", same sign " + (finite(c.same_sign) ? Math.round(100 * c.same_sign) + "%" : "n/a") +
        ", mean error " + fmt(c.mean_abs_error) + share + ".</span>";
      const rows = D.points.map((_, p) => p).filter((p) => finite((D.summary[metric][p] || {}).patched_mean));
      if (rows.length) html += '<table class="confirmed"><thead><tr><th>point</th><th>estimate</th><th>patched</th><th>clean</th></tr></thead><tbody>' +
        rows.map((p) => { const s = D.summary[metric][p];
          return '<tr data-p="' + p + '" data-metric="' + esc(metric) + '"><td>' + esc(pointName(p)) + '</td><td class="est">' + fmt(s.mean) +
            '</td><td class="real">' + fmt(s.patched_mean) + '</td><td>' + fmt(s.clean_mean) + "</td></tr>"; }).join("") + "</tbody></table>";
    }
    return html + "</div>";
  }

  function heatmap(metric, side) {
    const nx = axes.length ? D.labels[axes[0]].length : 1, ny = axes.length > 1 ? D.labels[axes[1]].length : 1;
    const xt = axes.length ? D.ticks[axes[0]] : [""], yt = axes.length > 1 ? D.ticks[axes[1]] : [""];
    const w = clamp(Math.floor(640 / nx), 14, 64), h = clamp(Math.floor(360 / ny), 14, 36);
    const slant = xt.some((t) => textWidth(t) > w - 4);
    const left = clamp(Math.max(...yt.map(textWidth)) + (axes.length > 1 ? 34 : 8), 30, 240);
    const bottom = (slant ? clamp(Math.max(...xt.map(textWidth)) * 0.72 + 16, 30, 170) : 20) + 20;
    const W = left + nx * w + 70, H = 10 + ny * h + bottom;
    const r = range(metric, side);
    const c = side === "diff" ? 0 : centre(metric);
    const color = (v) => c !== null ? diverging((v - c) / (r[1] - c)) : viridis((v - r[0]) / (r[1] - r[0]));
    const out = ['<svg class="heatmap" data-metric="' + esc(metric) + '" data-side="' + side + '" width="' + W + '" height="' + H + '">'];
    for (let j = 0; j < ny; j++) {
      for (let i = 0; i < nx; i++) {
        const p = pointAt(axes.length > 1 ? [i, j] : axes.length ? [i] : []);
        if (p < 0) continue;
        const v = sideValue(side, metric, p);
        const x = left + i * w, y = 10 + (ny - 1 - j) * h; // the first value at the bottom, as the PNG has it
        const fill = v === null || r === null ? "#e8e8e8" : color(v);
        const raw = side === "A" ? (D.summary[metric][p] || {}).mean : v;
        const est = side === "A" && guessed(metric, p), real = est ? (D.summary[metric][p] || {}).patched_mean : undefined;
        out.push('<rect class="cell' + (est ? " estimated" : "") + (finite(real) ? " confirmed" : "") + '" x="' + x + '" y="' + y +
                 '" width="' + (w - 1) + '" height="' + (h - 1) + '" fill="' + fill + '" data-p="' + p + '" data-metric="' + esc(metric) +
                 '" data-value="' + esc(raw === null || raw === undefined ? "" : raw) + '"' +
                 (finite(real) ? ' data-patched="' + real + '" stroke="#000" stroke-width="2"' : "") + "></rect>");
        if (w >= 30 && h >= 13) {
          const light = v !== null && r !== null && (c === null ? (v - r[0]) / (r[1] - r[0]) < 0.5
                                                                 : Math.abs((v - c) / (r[1] - c)) > 0.6); // dark ends
          const hw = side === "diff" ? null : halfWidth(side === "B" ? ((C.summary[metric] || [])[p] || {}) : D.summary[metric][p]);
          const two = hw !== null && h >= 24; // the interval's half-width under the value, readable without hover
          const ink = (light ? "#fff" : "#000");
          out.push('<text class="v" x="' + (x + w / 2 - 0.5) + '" y="' + (y + h / 2 + (two ? -1 : 3.5)) + '" text-anchor="middle" fill="' +
                   ink + '" style="fill:' + ink + '">' + (est ? "≈" : "") + short(v) + "</text>");
          if (two) out.push('<text class="hw" x="' + (x + w / 2 - 0.5) + '" y="' + (y + h / 2 + 9) + '" text-anchor="middle" font-size="8" style="fill:' + ink + '">±' + hw.toFixed(2) + "</text>");
        }
      }
    }
    const base = 10 + ny * h;
    for (let i = 0; i < nx && axes.length; i++) {
      const x = left + i * w + w / 2;
      out.push(slant ? '<text x="' + x + '" y="' + (base + 12) + '" text-anchor="end" transform="rotate(-40 ' + x + " " + (base + 12) + ')">' + esc(xt[i]) + "</text>"
                     : '<text x="' + x + '" y="' + (base + 14) + '" text-anchor="middle">' + esc(xt[i]) + "</text>");
    }
    for (let j = 0; j < ny && axes.length > 1; j++) {
      out.push('<text x="' + (left - 5) + '" y="' + (10 + (ny - 1 - j) * h + h / 2 + 4) + '" text-anchor="end">' + esc(yt[j]) + "</text>");
    }
    if (axes.length) out.push('<text x="' + (left + nx * w / 2) + '" y="' + (H - 4) + '" text-anchor="middle" font-weight="600">' + esc(axes[0]) + "</text>");
    if (axes.length > 1) out.push('<text x="12" y="' + (10 + ny * h / 2) + '" text-anchor="middle" font-weight="600" transform="rotate(-90 12 ' + (10 + ny * h / 2) + ')">' + esc(axes[1]) + "</text>");
    if (r) { // the color scale
      const cx = left + nx * w + 14, n = 24, ch = ny * h;
      for (let k = 0; k < n; k++) {
        const t = k / (n - 1), v = r[0] + t * (r[1] - r[0]);
        out.push('<rect x="' + cx + '" y="' + (10 + ch - (k + 1) * ch / n) + '" width="12" height="' + (ch / n + 0.5) + '" fill="' + color(v) + '"></rect>');
      }
      out.push('<text x="' + (cx + 15) + '" y="' + (10 + ch) + '">' + short(r[0]) + '</text><text x="' + (cx + 15) + '" y="20">' + short(r[1]) + "</text>");
      if (c !== null && side !== "diff") out.push('<text class="centre" x="' + (cx + 15) + '" y="' + (10 + ch / 2 + 4) + '">' + short(c) + (finite((D.summary[metric].find((s) => s && finite(s.clean_mean)) || {}).clean_mean) ? " clean" : "") + "</text>");
    } else {
      out.push('<text x="' + (left + 4) + '" y="' + (10 + ny * h / 2) + '">no point has a defined ' + esc(metric) + "</text>");
    }
    out.push("</svg>");
    return out.join("");
  }

  function line(metric) {
    const labels = D.ticks[axes[0]], n = labels.length;
    const step = clamp(Math.floor(760 / n), 6, 60);
    const slant = labels.some((t) => textWidth(t) > step - 4);
    const left = 56, top = 10, ph = 220, bottom = (slant ? clamp(Math.max(...labels.map(textWidth)) * 0.72 + 16, 30, 170) : 20) + 20;
    const W = left + n * step + 20, H = top + ph + bottom;
    const S = D.summary[metric], B = C && C.summary[metric];
    const vals = [];
    D.points.forEach((_, p) => { const s = S[p] || {}; [s.mean, s.mean_low, s.mean_high, s.patched_mean].forEach((v) => finite(v) && vals.push(v));
      if (B && B[p]) [B[p].mean, B[p].mean_low, B[p].mean_high].forEach((v) => finite(v) && vals.push(v)); });
    const out = ['<svg class="line" data-metric="' + esc(metric) + '" width="' + W + '" height="' + H + '">'];
    if (!vals.length) {
      out.push('<text x="' + left + '" y="' + (top + ph / 2) + '">no point has a defined ' + esc(metric) + "</text></svg>");
      return out.join("");
    }
    let lo = Math.min(...vals), hi = Math.max(...vals);
    if (lo === hi) { lo -= 0.5; hi += 0.5; }
    const pad = (hi - lo) * 0.06; lo -= pad; hi += pad;
    const X = (i) => left + i * step + step / 2, Y = (v) => top + ph - (v - lo) / (hi - lo) * ph;
    out.push('<rect x="' + left + '" y="' + top + '" width="' + n * step + '" height="' + ph + '" fill="none" stroke="#ccc"></rect>');
    const tick = niceStep((hi - lo) / 4); // round values on the axis: 1, 2, 2.5 or 5 times a power of ten
    for (let v = Math.ceil(lo / tick) * tick; v <= hi; v += tick) {
      const shown = Math.abs(v) < tick / 1e6 ? 0 : v;
      out.push('<text x="' + (left - 4) + '" y="' + (Y(v) + 4) + '" text-anchor="end">' + fmt(shown) + "</text>" +
               '<line x1="' + left + '" x2="' + (left + n * step) + '" y1="' + Y(v) + '" y2="' + Y(v) + '" stroke="#eee"></line>');
    }
    const series = [["A", S, "#1f77b4"]].concat(B ? [["B", B, "#ff7f0e"]] : []);
    for (const [side, sums, color] of series) {
      const index = (i) => pointAt([i]);
      let band = [], path = "", down = false; // the 95% interval over rows, where the files have one
      for (let i = 0; i < n; i++) {
        const p = index(i), s = p >= 0 ? sums[p] : null;
        if (s && finite(s.mean_low) && finite(s.mean_high)) band.push([i, s.mean_low, s.mean_high]);
        else if (band.length) { out.push(polygon(band, color)); band = []; }
        if (s && finite(s.mean)) { path += (down ? "L" : "M") + X(i) + " " + Y(s.mean); down = true; } else down = false;
      }
      if (band.length) out.push(polygon(band, color));
      out.push('<path d="' + path + '" fill="none" stroke="' + color + '" stroke-width="2"' + (side === "B" ? ' stroke-dasharray="5 3"' : "") + "></path>");
      for (let i = 0; i < n; i++) {
        const p = index(i), s = p >= 0 ? sums[p] : null;
        if (p < 0) continue;
        const v = s && finite(s.mean) ? s.mean : null;
        out.push(v === null ? '<text x="' + X(i) + '" y="' + (top + ph - 4) + '" text-anchor="middle">n/a</text>' : "");
        const est = side === "A" && guessed(metric, p), real = est ? s.patched_mean : undefined;
        out.push('<circle class="pt' + (est ? " estimated" : "") + '" cx="' + X(i) + '" cy="' + (v === null ? top + ph - 16 : Y(v)) + '" r="' + (v === null ? 3 : 4.5) +
                 '" fill="' + (v === null ? "#bbb" : est ? "#fff" : color) + '"' + (est ? ' stroke="' + color + '" stroke-width="2"' : "") +
                 ' data-p="' + p + '" data-metric="' + esc(metric) + '" data-side="' + side +
                 '" data-value="' + esc(s && s.mean !== null && s.mean !== undefined ? s.mean : "") + '"></circle>');
        if (finite(real)) out.push('<rect class="patched" x="' + (X(i) - 4) + '" y="' + (Y(real) - 4) + '" width="8" height="8" fill="#000" data-p="' + p +
                                   '" data-metric="' + esc(metric) + '" data-value="' + real + '"></rect>');
      }
    }
    const base = top + ph;
    for (let i = 0; i < n; i++) {
      const x = X(i);
      out.push(slant ? '<text x="' + x + '" y="' + (base + 12) + '" text-anchor="end" transform="rotate(-40 ' + x + " " + (base + 12) + ')">' + esc(labels[i]) + "</text>"
                     : '<text x="' + x + '" y="' + (base + 14) + '" text-anchor="middle">' + esc(labels[i]) + "</text>");
    }
    out.push('<text x="' + (left + n * step / 2) + '" y="' + (H - 4) + '" text-anchor="middle" font-weight="600">' + esc(axes[0]) + "</text>");
    if (B) out.push('<text x="' + (W - 90) + '" y="22" fill="#1f77b4" style="fill:#1f77b4">— A</text><text x="' + (W - 50) + '" y="22" fill="#ff7f0e" style="fill:#ff7f0e">-- B</text>');
    out.push("</svg>");
    return out.join("");
    function polygon(band, color) {
      const up = band.map(([i, , h]) => X(i) + "," + Y(h)), dn = band.slice().reverse().map(([i, l]) => X(i) + "," + Y(l));
      return '<polygon class="band" points="' + up.concat(dn).join(" ") + '" fill="' + color + '" fill-opacity="0.2"></polygon>';
    }
  }

  // ---------------------------------------------------------------- a point's rows
  const iia = D.metrics.filter((m) => m.kind === "iia").map((m) => m.name);
  const state = {}; // per metric: {p, filter, text, sort, dir}

  function promptsOf(p, row) {
    const recs = D.at_point[p].map((i) => D.records[i]);
    // in the document's order; a point with no positions record (an edge patch reads every position): every input
    const inputs = recs.length ? D.inputs.filter((i) => recs.some((r) => r.input === i)) : D.inputs.slice();
    recs.forEach((r) => { if (!inputs.includes(r.input)) inputs.push(r.input); });
    return inputs.map((input) => {
      const marks = new Map();
      recs.filter((r) => r.input === input).forEach((r) => (r.windows[row] || []).forEach((pos) => {
        const m = marks.get(pos) || {roles: new Set(), names: []};
        m.roles.add(r.role); m.names.push(r.name + " (" + r.role + ")"); marks.set(pos, m);
      }));
      const reason = recs.filter((r) => r.input === input).map((r) => r.reasons[row]).filter(Boolean);
      const toks = D.prompts && D.prompts[input] ? D.prompts[input][row] : null;
      let body;
      if (toks) {
        body = toks.map((t, i) => {
          const m = marks.get(i);
          const shown = esc(t.replace(/\n/g, "⏎"));
          return m ? '<span class="tok win ' + Array.from(m.roles).join(" ") + '" data-pos="' + i + '" title="' + esc(i + ": " + m.names.join(", ")) + '">' + shown + "</span>"
                   : '<span class="tok" data-pos="' + i + '">' + shown + "</span>";
        }).join("");
      } else { // no tokenizer here: each window's own tokens, as the positions record has them
        body = recs.filter((r) => r.input === input).map((r) => esc(r.name) + " @ " + (r.windows[row] || []).join(",") + " " +
          (r.tokens[row] || []).map((t, k) => '<span class="tok win ' + r.role + '" data-pos="' + r.windows[row][k] + '">' + esc(t) + "</span>").join("")).join(" · ");
        const column = D.data && D.data[row] ? D.data[row][input] : null;
        if (typeof column === "string") body = '<span class="raw">' + esc(column) + "</span> — " + body;
      }
      return '<div class="prompt" data-input="' + esc(input) + '"><span class="input">' + esc(input) + "</span>" + body +
             (reason.length ? ' <span class="reason">' + esc(reason.join(", ")) + "</span>" : "") + "</div>";
    }).join("");
  }

  function filters(metric, p) {
    const list = [["all", "all rows"], ["zero", "value 0"], ["nonzero", "value not 0"], ["ineligible", "not eligible"], ["nan", "not a number"]];
    if (iia.length > 1 && iia.includes(metric)) list.push(["nohyp", "0 under every IIA metric (fits no hypothesis)"]);
    if (C && C.values[metric] && C.values[metric][p]) {
      list.push(["differs", "differ from B"]);
      if ((C.flips[metric] || {})[p]) list.push(["flipped", "IIA flipped in B"]);
    }
    return list;
  }
  function keep(f, metric, p, row) {
    const v = D.values[metric][p][row];
    switch (f) {
      case "zero": return v === 0;
      case "nonzero": return v !== null && v !== 0;
      case "ineligible": return v === null;
      case "nan": return typeof v === "string";
      case "nohyp": return iia.every((m) => D.values[m][p][row] === 0);
      case "differs": return ((C.differs[metric] || {})[p] || []).includes(row);
      case "flipped": return ((C.flips[metric] || {})[p] || []).includes(row);
      default: return true;
    }
  }
  function rowText(metric, p, row) {
    const parts = [String(row), D.reasons[metric][p][row] || ""];
    const m = D.metrics.find((x) => x.name === metric);
    if (D.data && D.data[row]) m.columns.forEach((c) => parts.push(c + " " + D.data[row][c]));
    D.inputs.forEach((input) => { if (D.prompts && D.prompts[input]) parts.push(D.prompts[input][row].join("")); });
    return parts.join(" ").toLowerCase();
  }
  function sortKey(s, metric, p, row) {
    if (s === "value") { const v = D.values[metric][p][row]; return finite(v) ? v : null; }
    if (s === "b") { const v = bValue(metric, p, row); return finite(v) ? v : null; }
    if (s === "reason") return D.reasons[metric][p][row] || "";
    return row;
  }
  function bValue(metric, p, row) {
    const vs = C && C.values[metric] && C.values[metric][p];
    return vs ? vs[row] : D.values[metric][p][row]; // B's file is the same where it is not listed
  }

  function predictedRoles(metric, p) { // the runs whose top next token the metric file records
    const at = D.predicted && D.predicted[metric] && D.predicted[metric][p];
    return at ? ["base", "intervened"].filter((role) => at[role]) : [];
  }

  function showRows(metric, p) {
    const st = state[metric] = Object.assign({filter: "all", text: "", sort: "row", dir: 1}, state[metric] || {}, {p: p});
    const box = document.querySelector('.detail[data-metric="' + CSS.escape(metric) + '"]');
    const s = D.summary[metric][p] || {};
    const m = D.metrics.find((x) => x.name === metric);
    if (!filters(metric, p).some(([f]) => f === st.filter)) st.filter = "all";
    const rows = [];
    for (let row = 0; row < D.values[metric][p].length; row++) {
      if (keep(st.filter, metric, p, row) && (!st.text || rowText(metric, p, row).includes(st.text))) rows.push(row);
    }
    rows.sort((a, b) => {
      const x = sortKey(st.sort, metric, p, a), y = sortKey(st.sort, metric, p, b);
      if (x === y) return a - b;
      if (x === null) return 1; if (y === null) return -1;
      return (x < y ? -1 : 1) * st.dir;
    });
    const differs = C ? new Set(((C.differs[metric] || {})[p]) || []) : new Set();
    const others = D.metrics.filter((x) => x.name !== metric).map((x) => x.name);
    const head = ['<th data-sort="row">row</th>', '<th data-sort="value">' + esc(metric) + "</th>"]
      .concat(C && C.values[metric] && C.values[metric][p] ? ['<th data-sort="b">B</th>'] : [])
      .concat(['<th data-sort="reason">scored</th>', "<th>answers</th>"])
      .concat(predictedRoles(metric, p).map((role) => "<th>predicted (" + esc(role) + ")</th>"))
      .concat(others.length ? ["<th>other metrics</th>"] : []).concat(["<th>prompts (windows highlighted)</th>"]);
    const body = rows.slice(0, MAX_ROWS).map((row) => {
      const v = D.values[metric][p][row], reason = D.reasons[metric][p][row];
      const cells = ['<td class="num">' + row + "</td>", '<td class="value" data-value="' + esc(v === null ? "" : v) + '">' + fmt(v) + "</td>"];
      if (C && C.values[metric] && C.values[metric][p]) { const b = bValue(metric, p, row); cells.push('<td class="value-b" data-value="' + esc(b === null ? "" : b) + '">' + fmt(b) + "</td>"); }
      cells.push(v === null ? '<td class="reason">' + esc(reason || "not eligible") + "</td>" : "<td>" + (reason ? '<span class="reason">' + esc(reason) + "</span>" : "yes") + "</td>");
      const answers = D.data && D.data[row] ? m.columns.map((c) => '<div class="ans">' + esc(c) + " <code>" + esc(JSON.stringify(D.data[row][c])) + "</code></div>").join("") : "";
      cells.push("<td>" + answers + "</td>");
      predictedRoles(metric, p).forEach((role) => cells.push('<td class="pred" data-role="' + esc(role) + '"><code>' + esc(JSON.stringify(D.predicted[metric][p][role][row])) + "</code></td>"));
      if (others.length) cells.push('<td class="others">' + others.map((o) => esc(o) + " " + fmt(D.values[o][p][row])).join("<br>") + "</td>");
      cells.push("<td>" + promptsOf(p, row) + "</td>");
      return '<tr class="row' + (v === null ? " ineligible" : "") + (differs.has(row) ? " differs" : "") + '" data-row="' + row + '">' + cells.join("") + "</tr>";
    }).join("");
    const interval = "mean_low" in s ? " [" + fmt(s.mean_low) + ", " + fmt(s.mean_high) + "]" : "";
    box.hidden = false;
    box.dataset.point = p;
    box.innerHTML = "<h3>" + esc(pointName(p)) + " — " + esc(metric) + " " + fmt(s.mean) + esc(interval) + ", " + s.eligible + " of " + s.rows + " rows eligible</h3>" +
      '<div class="tools"><label>show <select class="filter">' + filters(metric, p).map(([f, label]) => '<option value="' + f + '"' + (f === st.filter ? " selected" : "") + ">" + esc(label) + "</option>").join("") +
      '</select></label><input class="search" type="search" placeholder="filter: text in a row" value="' + esc(st.text) + '"><span class="count">' + rows.length + " of " + D.values[metric][p].length + " rows" +
      (rows.length > MAX_ROWS ? " (the first " + MAX_ROWS + " shown)" : "") + "</span> " +
      '<span class="legend"><span class="tok win write">write</span> <span class="tok win read">read</span> window</span></div>' +
      (D.data ? "" : '<div class="notes">' + esc(D.data_note || "no data rows") + "</div>") +
      (D.prompts || !D.prompts_note ? "" : '<div class="notes">' + esc(D.prompts_note) + "</div>") +
      '<table class="rows"><thead><tr>' + head.join("") + "</tr></thead><tbody>" + body + "</tbody></table>";
    box.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () => {
      st.dir = st.sort === th.dataset.sort ? -st.dir : 1; st.sort = th.dataset.sort; showRows(metric, p);
    }));
    box.querySelector("select.filter").addEventListener("change", (e) => { st.filter = e.target.value; showRows(metric, p); });
    const search = box.querySelector("input.search");
    search.addEventListener("change", () => { st.text = search.value.toLowerCase(); showRows(metric, p); });
    document.querySelectorAll('[data-metric="' + CSS.escape(metric) + '"] .chosen').forEach((x) => x.classList.remove("chosen"));
    document.querySelectorAll('[data-metric="' + CSS.escape(metric) + '"][data-p="' + p + '"]').forEach((x) => x.classList.add("chosen"));
  }

  // ---------------------------------------------------------------- the page
  function drawCharts() {
    D.metrics.forEach((m) => {
      const box = document.querySelector('.charts[data-metric="' + CSS.escape(m.name) + '"]');
      const sides = C && axes.length !== 1 ? [["A", "A: " + D.title], ["B", "B: " + C.title], ["diff", "B − A"]] : [["A", ""]];
      box.innerHTML = sides.map(([side, title]) => '<div class="chart" data-side="' + side + '">' + (title ? "<h4>" + esc(title) + "</h4>" : "") +
        (axes.length === 1 ? line(m.name) : heatmap(m.name, side)) + "</div>").join("");
      const st = state[m.name];
      if (st && st.p !== undefined) document.querySelectorAll('[data-metric="' + CSS.escape(m.name) + '"][data-p="' + st.p + '"]').forEach((x) => x.classList.add("chosen"));
    });
  }

  function build() {
    const notes = [D.data_note, D.prompts_note].filter(Boolean);
    if (notes.length) app.appendChild(el("div", "notes", notes.map(esc).join("<br>")));
    if (axes.length > 2) {
      const ctl = el("div", "controls");
      ctl.innerHTML = "showing " + esc(axes[0]) + " × " + esc(axes[1]) + " at " + axes.slice(2).map((a, k) => '<label>' + esc(a) + ' <select data-axis="' + (k + 2) + '">' +
        D.ticks[a].map((t, i) => '<option value="' + i + '">' + esc(t) + "</option>").join("") + "</select></label>").join("");
      ctl.querySelectorAll("select").forEach((s) => s.addEventListener("change", () => {
        fixed[+s.dataset.axis] = +s.value;
        document.querySelectorAll(".detail").forEach((d) => { d.hidden = true; });
        Object.keys(state).forEach((k) => { delete state[k].p; });
        drawCharts();
      }));
      app.appendChild(ctl);
    }
    if (C) app.appendChild(differences());
    D.metrics.forEach((m) => {
      const sec = el("section", "metric");
      sec.id = "metric-" + m.name;
      sec.dataset.metric = m.name;
      const sums = D.summary[m.name].map(mean).filter((v) => v !== null);
      sec.innerHTML = "<h2>" + esc(m.name) + (m.kind ? ' <span class="summary-line">(' + esc(m.kind) + ")</span>" : "") + "</h2>" +
        '<div class="summary-line">' + D.points.length + " point" + (D.points.length === 1 ? "" : "s") +
        (sums.length ? ", mean from " + fmt(Math.min(...sums)) + " to " + fmt(Math.max(...sums)) : ", no defined mean") +
        (sums.length < D.points.length ? "; " + (D.points.length - sums.length) + " points n/a" : "") + ". Hover a point for its value; click it for its rows.</div>" +
        (D.estimate ? estimateNote(m.name) : "") +
        '<div class="charts" data-metric="' + esc(m.name) + '"></div><div class="detail" data-metric="' + esc(m.name) + '" hidden></div>';
      app.appendChild(sec);
    });
    if (D.featurizers.length) app.appendChild(featurizers());
    if (D.circuit) app.insertBefore(circuit(), app.querySelector("section.metric"));
    drawCharts();
    app.addEventListener("mouseover", (e) => {
      const t = e.target.closest("[data-p]");
      if (!t || !t.dataset.metric) return;
      tip.textContent = tipText(t.dataset.metric, +t.dataset.p);
      tip.hidden = false;
    });
    app.addEventListener("mousemove", (e) => {
      if (tip.hidden) return;
      tip.style.left = Math.min(e.clientX + 14, window.innerWidth - tip.offsetWidth - 6) + "px";
      tip.style.top = Math.min(e.clientY + 14, window.innerHeight - tip.offsetHeight - 6) + "px";
    });
    app.addEventListener("mouseout", (e) => { if (e.target.closest("[data-p]")) tip.hidden = true; });
    app.addEventListener("click", (e) => {
      const d = e.target.closest("tr.diff");
      if (d) { // a difference listed at the top: that point's rows, those that differ
        const metric = d.dataset.metric;
        state[metric] = Object.assign(state[metric] || {}, {filter: "differs"});
        showRows(metric, +d.dataset.p);
        document.querySelector('.detail[data-metric="' + CSS.escape(metric) + '"]').scrollIntoView();
        return;
      }
      const t = e.target.closest("[data-p]");
      if (t && t.dataset.metric) showRows(t.dataset.metric, +t.dataset.p);
    });
  }

  function differences() {
    const sec = el("section", "compare");
    sec.id = "differences";
    const list = [];
    D.metrics.forEach((m) => Object.keys(C.differs[m.name] || {}).forEach((p) => list.push([m.name, +p])));
    const rows = list.map(([metric, p]) => {
      const a = (D.summary[metric][p] || {}).mean, b = ((C.summary[metric] || [])[p] || {}).mean;
      const flips = (C.flips[metric] || {})[p] || [];
      const differ = C.differs[metric][p];
      return '<tr class="diff" data-metric="' + esc(metric) + '" data-p="' + p + '"><td>' + esc(metric) + "</td><td>" + esc(pointName(p)) +
        '</td><td class="num">' + fmt(a) + '</td><td class="num">' + fmt(b) + '</td><td class="num">' + (finite(a) && finite(b) ? fmt(b - a) : "n/a") +
        '</td><td class="num">' + differ.length + "</td><td>" + esc(differ.slice(0, 12).join(", ") + (differ.length > 12 ? ", …" : "")) +
        "</td><td>" + esc(flips.join(", ")) + "</td></tr>";
    }).join("");
    const only = [["only in A", C.only_in_a], ["only in B", C.only_in_b]].filter(([, l]) => l.length)
      .map(([what, l]) => "<p>" + esc(what) + ": " + esc(l.slice(0, 20).join(", ") + (l.length > 20 ? " and " + (l.length - 20) + " more" : "")) + "</p>").join("");
    sec.innerHTML = "<h2>A vs B</h2><pre class=\"line\">" + esc(C.line) + "</pre>" +
      (list.length ? '<table class="diffs"><thead><tr><th>metric</th><th>point</th><th>A</th><th>B</th><th>B − A</th><th>rows differ</th><th>which rows</th><th>IIA rows flipped</th></tr></thead><tbody>' + rows + "</tbody></table>"
                   : "<p>No point's metric file differs.</p>") + only +
      '<p class="tolerance">Row values that differ by at most ' + C.tolerance + " count as equal" +
      (C.hidden ? ": " + C.hidden + " point" + (C.hidden === 1 ? "'s" : "s'") + " metric files differ by no more and are not listed." : ".") + "</p>";
    return sec;
  }

  function circuit() { // nodes by row (embeddings at the bottom, logits on top), edges by score; a click shows its rows
    const K = D.circuit, sec = el("section", "circuit");
    const W = 720, rowH = 56, H = K.rows * rowH + 20, byRow = {};
    K.nodes.forEach((n) => { (byRow[n.row] = byRow[n.row] || []).push(n.name); });
    const at = {};
    Object.keys(byRow).forEach((r) => byRow[r].forEach((name, i) => {
      at[name] = [(i + 1) * W / (byRow[r].length + 1), H - 20 - r * rowH];
    }));
    const top = Math.max(1e-9, ...K.edges.map((e) => Math.abs(e.score || 0)));
    const lines = K.edges.map((e) => e.to.filter((to) => at[to] && at[e.s]).map((to) => {
      const [x1, y1] = at[e.s], [x2, y2] = at[to], w = 1 + 5 * Math.abs(e.score || 0) / top;
      return '<line class="edge" x1="' + x1 + '" y1="' + y1 + '" x2="' + x2 + '" y2="' + y2 + '" stroke="' + ((e.score || 0) < 0 ? "#2166ac" : "#b2182b") +
        '" stroke-width="' + w.toFixed(1) + '"' + (e.p === null || e.p === undefined ? "" : ' data-p="' + e.p + '" data-metric="' + esc(K.metric) + '"') +
        ' data-edge="' + esc(e.s + "->" + e.r) + '"><title>' + esc(e.s + " → " + e.r + ": " + fmt(e.score)) + "</title></line>";
    }).join("")).join("");
    const circles = Object.entries(at).map(([name, [x, y]]) => '<g class="node" data-node="' + esc(name) + '"><circle cx="' + x + '" cy="' + y +
      '" r="13"></circle><text x="' + x + '" y="' + (y + 4) + '" text-anchor="middle">' + esc(name) + "</text></g>").join("");
    const f = K.faithfulness || {};
    sec.innerHTML = "<h2>Circuit</h2><div class=\"summary-line\">" + K.size + " edges, chosen by " + esc(JSON.stringify(K.select)) +
      " from scores by " + esc(K.scored_by) + " (" + esc(K.metric) + ", patched by " + esc(K.ablation) + "); faithfulness " + fmt(f.share) +
      (finite(f.share_low) ? " (" + fmt(f.share_low) + " to " + fmt(f.share_high) + ")" : "") + ", CPR " + fmt(K.cpr) +
      ". Width: the edge's score; red raises the metric when patched, blue lowers it. Click an edge for its rows.</div>" +
      '<svg class="circuit" width="' + W + '" height="' + H + '">' + lines + circles + "</svg>";
    return sec;
  }

  function featurizers() {
    const sec = el("section", "featurizers");
    const keys = [];
    D.featurizers.forEach((f) => Object.keys(f).forEach((k) => { if (!keys.includes(k)) keys.push(k); }));
    sec.innerHTML = "<h2>Trained featurizers</h2><table class=\"feat\"><thead><tr>" + keys.map((k) => "<th>" + esc(k) + "</th>").join("") + "</tr></thead><tbody>" +
      D.featurizers.map((f) => "<tr>" + keys.map((k) => "<td>" + esc(f[k] === undefined || f[k] === null ? "" : typeof f[k] === "object" ? JSON.stringify(f[k]) : f[k]) + "</td>").join("") + "</tr>").join("") +
      "</tbody></table>";
    return sec;
  }

  build();
  document.body.dataset.ready = "1";
})();

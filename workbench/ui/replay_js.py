"""The replay's step switch, done in the browser: a Gradio `js=` handler that draws one step from the run's
step data (replay_view.step_data, sent once when the run loads) with no round trip to the server.

It returns the header (StepPanel.outputs: the Markdown above the step); it writes the draft tree and the
threshold figure as SVG and the node table as HTML into their slots (replay_view.slot_html, boxes of fixed
height, so the page is not laid out again around them); and it cuts the run's text (sent once) at the step's
end by moving token spans between a shown and a hidden part, only those between the old end and the new.
(A <style> rule hiding the spans past the end re-styled the whole page on every switch: ~35 ms of a 55 ms
median on the 2-core CI machine.) SVG and not Plotly: Plotly.react of these two figures alone took 100-300 ms
there; an SVG string is drawn in a few. What is drawn mirrors figures.replay.tree_figure and figures.replay.threshold_figure
(same titles, colours, shapes, layout and hover text); the tree's layout, the emitted path, the gate flags,
the headers and the titles are computed in Python (replay_view.step_data), so only painting lives here.
Every string from the trace is escaped before it reaches the page.
"""

from __future__ import annotations

import json

from core.token_text import WHITESPACE_SIGNS
from workbench.ui.replay_view import NODE_COLUMNS

_JS = r"""
(data, k, info) => {
  const COLUMNS = __COLUMNS__;
  const E = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
  const num = (v) => (v === null || v === undefined) ? '–' : String(v);
  const SIGNS = __SIGNS__;  // core.token_text.WHITESPACE_SIGNS: the node rows' tokens carry them already
  const show = (t, limit) => {
    let s = String(t ?? '').replace(/[ \n\t\r]/g, (c) => SIGNS[c] || c);
    if (s.length > limit) s = s.slice(0, limit - 1) + '…';
    return s || '∅';
  };
  const table = (rows) => '<div class="replay-nodes-table"><style>.replay-nodes-table table{border-collapse:collapse;'
    + 'font-size:0.85em;width:100%}.replay-nodes-table th{position:sticky;top:0;background:#f4f4f5;text-align:left;'
    // !important: Gradio's .prose padding (10px 14px) made each row ~38 px, so a 16-node tree's table scrolled inside
    + 'padding:2px 6px !important}.replay-nodes-table td{border-top:1px solid #e4e4e7;padding:1px 6px !important}'
    + '</style><table><thead><tr>'
    + COLUMNS.map((c) => `<th>${E(c)}</th>`).join('') + '</tr></thead><tbody>'
    + rows.map((r) => '<tr>' + r.map((v) => `<td>${E(v ?? '')}</td>`).join('') + '</tr>').join('')
    + '</tbody></table></div>';
  const svg = (k, w, h, body) => `<svg class="replay-fig" data-step="${k}" viewBox="0 0 ${w} ${h}" width="100%" `
    + `style="max-width:${w}px;font-family:sans-serif;background:#fff" xmlns="http://www.w3.org/2000/svg">${body}</svg>`;
  const title = (w, text) => `<text class="fig-title" x="${w / 2}" y="22" text-anchor="middle" font-size="14">${E(text)}</text>`;
  // Each figure is drawn as tall as its box (fit: the run's tallest figure, data.heights) and stretched into it:
  // a step with a smaller tree, no CSD gate panel or no drafts leaves no blank band above the node table.
  const tall = (name, H) => Math.max(H, (data && data.heights && data.heights[name]) || 0);
  const empty = (k, head, text, name) => {
    const H = tall(name, 120);
    return svg(k, 640, H, title(640, head)
      + `<text x="320" y="${Math.round(H / 2) + 15}" text-anchor="middle" font-size="15" fill="#777">${E(text)}</text>`);
  };
  // The run's text (#replay-text, all of it) split in a shown and a hidden part. Gradio renders a new text
  // (the next run's) whenever it likes, so an observer on #replay-text cuts it again at the current step.
  // Gradio morphs a new text into the old elements, so the split is recognised by its two parts, not by a flag.
  const isCut = (box) => box.children.length === 2 && box.children[0].className === 'replay-shown'
    && box.children[1].className === 'replay-hidden';
  const cutText = (end) => {
    window.__replayEnd = end;
    const host = document.querySelector('#replay-text');
    if (host && !host.__replayWatch) {
      host.__replayWatch = new MutationObserver(() => {
        const t = host.querySelector('span.tok');
        if (t && !isCut(t.closest('div'))) cutText(window.__replayEnd);
      });
      host.__replayWatch.observe(host, {childList: true, subtree: true});
    }
    const first = host && host.querySelector('span.tok'), box = first && first.closest('div');  // tokens.tokens_html div
    if (!box) return;
    if (!isCut(box)) {
      Object.assign(box.style, {height: '', overflowY: '', contain: ''});
      const shown = document.createElement('span'), hidden = document.createElement('span');
      shown.className = 'replay-shown';
      hidden.className = 'replay-hidden';
      hidden.style.display = 'none';
      hidden.append(...Array.from(box.childNodes));
      box.append(shown, hidden);
      // A box of fixed height, as tall as the whole text up to 16 lines and scrolling past that, is a layout
      // boundary: the text changing inside re-lays out the box, not the page below it.
      shown.append(...Array.from(hidden.childNodes));
      const full = box.scrollHeight, line = parseFloat(getComputedStyle(box).lineHeight) || 22;
      hidden.append(...Array.from(shown.childNodes));
      if (full > 0) Object.assign(box.style, {height: `${Math.min(full, 16 * line) + 2}px`, overflowY: 'auto', contain: 'strict'});
    }
    const [shown, hidden] = box.children, have = shown.childNodes.length, range = document.createRange();
    if (end > have && hidden.firstChild) {
      range.setStartBefore(hidden.firstChild);
      range.setEndAfter(hidden.childNodes[Math.min(end - have, hidden.childNodes.length) - 1]);
      shown.appendChild(range.extractContents());
    } else if (end < have) {
      range.setStartBefore(shown.childNodes[end]);
      range.setEndAfter(shown.lastChild);
      hidden.insertBefore(range.extractContents(), hidden.firstChild);
    }
    if (box.style.height) {  // as tall as the text shown so far (up to 16 lines): no blank lines under step 0's text
      const line = box.__line || (box.__line = parseFloat(getComputedStyle(box).lineHeight) || 22);
      const lines = Math.min(16, Math.max(1, Math.ceil(shown.getBoundingClientRect().height / line)));
      const h = `${lines * line + 2}px`;
      if (box.style.height !== h) box.style.height = h;
    }
    box.scrollTop = box.scrollHeight;  // the step's own tokens in view
  };
  // The figures and the table go straight into their slots (replay_view.slot_html): one parse, no diff
  // against the last step's elements, and each slot is a box of fixed height the page is not laid out around.
  const put = (id, html) => { const slot = document.querySelector(`#${id} .replay-slot`); if (slot) slot.innerHTML = html; };
  // Each figure box is made as tall as the run's tallest figure once per run: every step's figure is drawn at least
  // that tall (tall: data.heights, replay_view.step_data), so the box takes the drawn figure's height at the width
  // it is shown at. No step's figure is cut, and switching steps never changes the page's layout.
  const fit = (id) => {
    const slot = document.querySelector(`#${id} .replay-slot`), fig = slot && slot.querySelector('svg');
    if (!fig || slot.__run === data.run) return;
    const h = fig.getBoundingClientRect().height;
    if (!h) return;  // not laid out (another tab is shown): fitted at a later step
    slot.__run = data.run;
    slot.style.height = `${Math.ceil(h) + 4}px`;
  };
  // The node table's box is made as tall as this step's table (up to its fixed height, a 16-node tree's): a box
  // fitted to the run's largest step left ~250 px blank under a 2-node step's table (fourteenth newcomer pass), and
  // one of fixed height left as much under every step of a run of small trees (seventh). The row and header heights
  // are measured once per run; a step switch then sets one height, one layout of what lies below the table.
  const fitTable = (count) => {
    const slot = document.querySelector('#replay-nodes .replay-slot');
    if (!slot) return;
    slot.__most = slot.__most || parseFloat(slot.style.height);
    if (slot.__run !== data.run) {
      const rows = Array.from(slot.querySelectorAll('tbody tr')), head = slot.querySelector('thead');
      const row = rows.length ? Math.max(...rows.map((r) => r.getBoundingClientRect().height)) : 0;
      if (!row || !head) return;  // not laid out (another tab is shown), or no rows: measured at a later step
      Object.assign(slot, {__run: data.run, __row: row, __head: head.getBoundingClientRect().height});
    }
    const h = `${Math.min(slot.__most, Math.ceil(slot.__head + Math.max(1, count) * slot.__row) + 6)}px`;
    if (slot.style.height !== h) slot.style.height = h;
  };
  if (!data || !Array.isArray(data.steps)) {  // no run: the last run's figures go
    // with a message (a bad run id's error, shown in the body) the tree slot says no run is shown, so the body stays
    // shown for the message; with none (a fresh page) every slot is empty and the body hides (builder.CSS)
    put('replay-tree', info ? '<p class="replay-none" style="color:#777">no run is shown</p>' : '');
    put('replay-thresholds', '');
    put('replay-nodes', '');
    return [info];
  }
  if (!data.steps.length) {  // a run stopped before its first step: its header says so, in view (the body shows)
    cutText(Infinity);
    put('replay-tree', '<p class="replay-none" style="color:#777">no steps to draw</p>');
    put('replay-thresholds', '');
    put('replay-nodes', table([]));
    return [data.info];
  }
  k = Math.max(0, Math.min(Number(k) || 0, data.steps.length - 1));
  // a number typed into the slider's box past the run's last step draws the last step: the box says so too (it
  // showed 39 beside "step 19", seventeenth newcomer pass)
  const box = document.querySelector('#replay-step input[type="number"]');
  if (box && box.value !== '' && Number(box.value) !== k) {
    box.value = String(k);
    box.dispatchEvent(new Event('input', {bubbles: true}));  // Gradio's value too: Play goes on from the step shown
  }
  const st = data.steps[k], F = data.fields, C = data.colors, S = data.symbols;
  const nodes = st.nodes.map((r) => Object.fromEntries(F.map((f, i) => [f, r[i]])));
  const key = (n) => n.parent === -1 ? 'root' : n.decision;
  const hover = (n) => [
    `#${n.node} ${JSON.stringify(String(n.token))}  id ${n.token_id}`,
    `source ${n.source} · depth ${n.depth} · parent ${n.parent}`,
    `${key(n)}: ${n.reason}`,
    `p ${num(n.p)} · threshold ${num(n.threshold)}`,
    `entropy ${num(n.entropy)} · max p ${num(n.max_p)} · p_eos ${num(n.p_eos)}`,
    `rank ${num(n.rank)} · logit gap ${num(n.logit_gap)}`,
    `draft p ${num(n.draft_p)} · mem count ${num(n.mem_count)}`,
  ].concat(n.correction_id === null || n.correction_id === undefined ? [] : [`correction t* ${n.correction_id}`]).join('\n');
  // Plotly's marker symbols as polygons: [corners, inner radius of a star, rotation]
  const SHAPES = {square: [4, 0, Math.PI / 4], diamond: [4, 0, 0], 'triangle-up': [3, 0, 0], hexagon: [6, 0, Math.PI / 6],
                  pentagon: [5, 0, 0], star: [5, 0.45, 0]};
  const marker = (sym, x, y, r, fill, stroke) => {
    const s = SHAPES[sym];
    if (!s) return `<circle cx="${x.toFixed(1)}" cy="${y.toFixed(1)}" r="${r}" fill="${fill}" stroke="${stroke}"/>`;
    const m = s[1] ? 2 * s[0] : s[0], pts = [];
    for (let i = 0; i < m; i++) {
      const a = s[2] - Math.PI / 2 + i * 2 * Math.PI / m, rr = s[1] && i % 2 ? r * s[1] : r;
      pts.push(`${(x + rr * Math.cos(a)).toFixed(1)},${(y + rr * Math.sin(a)).toFixed(1)}`);
    }
    return `<polygon points="${pts.join(' ')}" fill="${fill}" stroke="${stroke}"/>`;
  };
  const legend = (w, y, items) => {  // items: [label, svg of the key at (0, 0)]
    let x = 10, out = '';
    for (const [label, key] of items) {
      const width = 24 + 6.5 * label.length;
      if (x + width > w - 10) { x = 10; y += 16; }
      out += `<g transform="translate(${x + 6},${y})">${key}<text x="10" y="4" font-size="11">${E(label)}</text></g>`;
      x += width;
    }
    return [out, y];
  };

  // ---- the draft tree (figures.replay.tree_figure): x = depth, y from figures.replay.tree_layout, markers by decision and source
  const drawTree = () => {
    const placed = nodes.filter((n) => n.y !== null && n.y !== undefined);
    if (!placed.length) return empty(k, st.title, 'no node records for this step', 'tree');
    const seen = [...new Set(placed.map(key))], sources = [...new Set(nodes.map((n) => n.source))];
    const items = Object.keys(C).filter((d) => seen.includes(d)).map((d) => [d, marker('circle', 0, 0, 5, C[d], '#fff')])
      .concat([['emitted path', `<line x1="-6" y1="0" x2="6" y2="0" stroke="${C.accepted}" stroke-width="3"/>`]])
      .concat(sources.map((s) => ['source: ' + s, marker(S[s] || 'circle', 0, 0, 5, '#666', '#666')]));
    const W = 640, [keys, last] = legend(W, 44, items);
    const ys = placed.map((n) => n.y), top = Math.max(...ys), bottom = Math.min(...ys);
    const maxD = Math.max(...placed.map((n) => n.depth)), leaves = new Set(ys).size;
    const T = last + 22, B = 40, L = 24, R = 120, H = tall('tree', Math.max(320, 26 * leaves + 120) + (last - 44));
    const sx = (d) => L + (maxD ? d / maxD : 0.5) * (W - L - R);
    const sy = (y) => T + (top === bottom ? 0.5 : (top - y) / (top - bottom)) * (H - T - B);
    const by = new Map(placed.map((n) => [n.node, n]));
    // A label gets the room to the next depth's marker (~7 px a character at 11 px): on a long chain the full 14 characters
    // ran into the next node's label; the hover and the node table keep the whole token.
    const room = maxD ? Math.max(3, Math.min(14, Math.floor(((W - L - R) / maxD - 20) / 7))) : 14;
    let grey = '', green = '', marks = '', ticks = '';
    for (const n of placed) {
      const p = by.get(n.parent);
      if (!p || p === n) continue;
      const line = `<line x1="${sx(p.depth).toFixed(1)}" y1="${sy(p.y).toFixed(1)}" x2="${sx(n.depth).toFixed(1)}" y2="${sy(n.y).toFixed(1)}"`;
      if (n.path && p.path) green += `${line} stroke="${C.accepted}" stroke-width="3"/>`;
      else grey += `${line} stroke="#c8c8c8" stroke-width="1"/>`;
    }
    for (const n of placed) {
      const x = sx(n.depth), y = sy(n.y);
      marks += `<g class="node" data-node="${n.node}"><title>${E(hover(n))}</title>`
        + marker(S[n.source] || 'circle', x, y, 7, C[key(n)] || '#999', '#fff')
        + `<text x="${(x + 10).toFixed(1)}" y="${(y + 4).toFixed(1)}" font-size="11">${E(show(n.token, room))}</text></g>`;
    }
    for (let d = 0; d <= maxD; d++) ticks += `<text x="${sx(d).toFixed(1)}" y="${H - B + 18}" text-anchor="middle" font-size="11" fill="#444">${d}</text>`;
    ticks += `<text x="${(W - R + L) / 2}" y="${H - 4}" text-anchor="middle" font-size="12" fill="#444">depth</text>`;
    return svg(k, W, H, title(W, st.title) + keys + grey + green + marks + ticks);
  };

  // ---- p against the threshold, entropy on a second axis, CSD's gate below (figures.replay.threshold_figure)
  const drawThresholds = () => {
    const head = `step ${st.index}: thresholds`;
    const ns = nodes.filter((n) => n.parent !== -1 && n.decision !== 'bonus');
    if (!ns.length) return empty(k, head, 'this step drafted no tokens', 'thresholds');
    const gated = ns.some((n) => n.gate);
    const decisions = ['accepted', 'rescued', 'rejected', 'unreached'].filter((d) => ns.some((n) => n.decision === d));
    const drawn = (n) => !n.gate && n.threshold !== null && n.threshold !== undefined;  // a threshold line is drawn
    const items = decisions.map((d) => [d, `<rect x="-5" y="-5" width="10" height="10" fill="${C[d]}"/>`])
      .concat(ns.some(drawn) ? [['threshold', '<line x1="-7" y1="0" x2="7" y2="0" stroke="#000" stroke-width="3"/>']] : [])
      .concat([['entropy (nats)', '<line x1="-7" y1="0" x2="7" y2="0" stroke="#7f7f7f" stroke-dasharray="2,2"/>']]);
    const W = 640, [keys, last] = legend(W, 44, items);
    const T = last + 34, B = 90, L = 50, R = 50, H = tall('thresholds', 340 + (gated ? 220 : 0) + (last - 44));
    const PH = H - T - B, bw = (W - L - R) / ns.length, cx = (i) => L + bw * (i + 0.5);
    const p1 = [T, T + (gated ? 0.55 : 1) * PH], p2 = [T + 0.69 * PH, T + PH];
    const yv = (panel, top, v) => panel[1] - Math.max(0, Math.min(1, (v ?? 0) / top)) * (panel[1] - panel[0]);
    // Ticks at round values (1, 2 or 5 × a power of ten, at most 5 steps to `top`), each printed with the decimals its
    // step needs: a quarter of the axis' top (1.05 → 0.26, 0.53, …; 0.012 → 0.00, 0.01, 0.01) printed odd or repeated labels.
    const ticks = (top) => {
      let step = 10 ** Math.floor(Math.log10(top / 5));
      for (const m of [1, 2, 5, 10]) if (top / (step * m) <= 5) { step *= m; break; }
      const places = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
      const out = [];
      for (let i = 0; i * step <= top * (1 + 1e-9); i++) out.push([i * step, (i * step).toFixed(places)]);
      return out;
    };
    const axis = (panel, top, side, label) => {
      const x = side === 'left' ? L : W - R, anchor = side === 'left' ? 'end' : 'start', dx = side === 'left' ? -4 : 4;
      let out = `<line x1="${x}" y1="${panel[0]}" x2="${x}" y2="${panel[1]}" stroke="#ccc"/>`;
      for (const [v, text] of ticks(top)) {
        const y = yv(panel, top, v).toFixed(1);
        out += `<text class="tick" x="${x + dx}" y="${y}" dy="4" text-anchor="${anchor}" font-size="10" fill="#444">${text}</text>`;
        if (side === 'left') out += `<line x1="${L}" y1="${y}" x2="${W - R}" y2="${y}" stroke="#eee"/>`;
      }
      const lx = side === 'left' ? 12 : W - 8, ly = (panel[0] + panel[1]) / 2;
      return out + `<text transform="translate(${lx},${ly}) rotate(-90)" text-anchor="middle" font-size="11" fill="#444">${E(label)}</text>`;
    };
    const sub = (panel, text) => `<text x="${W / 2}" y="${panel[0] - 6}" text-anchor="middle" font-size="13">${E(text)}</text>`;
    let body = title(W, head) + keys + axis(p1, 1.05, 'left', 'p')
      + sub(p1, `p vs threshold${ns.some((n) => (n.p ?? 0) < 0.01) ? ' (a p under 1% is drawn as a 2 px bar)' : ''}`);
    const ent = Math.max(1e-9, ...ns.map((n) => n.entropy ?? 0)) * 1.1;
    body += axis(p1, ent, 'right', 'entropy (nats)');
    ns.forEach((n, i) => {
      const y = Math.min(yv(p1, 1.05, n.p), p1[1] - 2);  // at least 2 px: a rejected node's p of 1e-4 was no bar at all
      body += `<g class="bar" data-node="${n.node}"><title>${E(hover(n))}</title><rect x="${(cx(i) - bw * 0.4).toFixed(1)}" y="${y.toFixed(1)}" `
        + `width="${(bw * 0.8).toFixed(1)}" height="${(p1[1] - y).toFixed(1)}" fill="${C[n.decision] || '#999'}"/>`;
      if (drawn(n)) {
        const t = yv(p1, 1.05, n.threshold).toFixed(1);
        body += `<line x1="${(cx(i) - bw * 0.45).toFixed(1)}" y1="${t}" x2="${(cx(i) + bw * 0.45).toFixed(1)}" y2="${t}" stroke="#000" stroke-width="3"/>`;
      }
      body += '</g>';
    });
    const pts = ns.map((n, i) => `${cx(i).toFixed(1)},${yv(p1, ent, n.entropy).toFixed(1)}`);
    body += `<polyline points="${pts.join(' ')}" fill="none" stroke="#7f7f7f" stroke-dasharray="3,3"/>`
      + pts.map((p) => `<circle cx="${p.split(',')[0]}" cy="${p.split(',')[1]}" r="2.5" fill="#7f7f7f"/>`).join('');
    if (gated) {
      const limit = (n) => (n.threshold > 0 && n.threshold <= 1) ? -Math.log(n.threshold) : null;
      const top = Math.max(1e-9, ...ns.filter((n) => n.gate).map((n) => Math.max(n.logit_gap ?? 0, limit(n) ?? 0))) * 1.1;
      body += axis(p2, top, 'left', 'logit gap') + sub(p2, 'CSD gate: logit gap z(t*) − z(x) vs −ln τ');
      ns.forEach((n, i) => {
        if (!n.gate) return;
        const y = yv(p2, top, n.logit_gap);
        body += `<g class="gate" data-node="${n.node}"><title>${E(hover(n))}</title><rect x="${(cx(i) - bw * 0.4).toFixed(1)}" y="${y.toFixed(1)}" `
          + `width="${(bw * 0.8).toFixed(1)}" height="${(p2[1] - y).toFixed(1)}" fill="${C[n.decision] || '#999'}"/>`;
        const lim = limit(n);
        if (lim !== null) {
          const t = yv(p2, top, lim).toFixed(1);
          body += `<line x1="${(cx(i) - bw * 0.45).toFixed(1)}" y1="${t}" x2="${(cx(i) + bw * 0.45).toFixed(1)}" y2="${t}" stroke="#ff7f0e" stroke-width="3">`
            + `<title>τ ${num(n.threshold)}, −ln τ ${lim.toPrecision(4)}</title></line>`;
        }
        body += '</g>';
      });
    }
    const base = gated ? p2[1] : p1[1];
    ns.forEach((n, i) => {
      body += `<text transform="translate(${cx(i).toFixed(1)},${base + 8}) rotate(-45)" text-anchor="end" font-size="10" fill="#444">`
        + `${E(n.node + ':' + show(n.token, 10))}</text>`;
    });
    return svg(k, W, H, body);
  };

  // A window made narrower can stack the two figures, each then drawn wider and so taller than the box fitted to
  // it (the nineteenth newcomer pass found them cut): the boxes follow the figures' drawn height on a resize.
  if (!window.__replayRefit) {
    window.__replayRefit = () => requestAnimationFrame(() => ['replay-tree', 'replay-thresholds'].forEach((id) => {
      const slot = document.querySelector(`#${id} .replay-slot`), fig = slot && slot.querySelector('svg');
      const h = fig ? fig.getBoundingClientRect().height : 0;
      if (h && slot.style.height !== `${Math.ceil(h) + 4}px`) slot.style.height = `${Math.ceil(h) + 4}px`;
    }));
    window.addEventListener('resize', window.__replayRefit);
  }
  cutText(data.ends[k]);
  put('replay-tree', drawTree());
  put('replay-thresholds', drawThresholds());
  fit('replay-tree');
  fit('replay-thresholds');
  put('replay-nodes', table(st.nodes.map((r) => r.slice(0, COLUMNS.length))));
  fitTable(st.nodes.length);
  return [st.info];
}
"""

STEP_JS = _JS.replace("__COLUMNS__", json.dumps(list(NODE_COLUMNS))).replace(
    "__SIGNS__", json.dumps(WHITESPACE_SIGNS, ensure_ascii=False)
)

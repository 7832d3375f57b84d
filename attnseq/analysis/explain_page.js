// The script of `attnseq explain`'s page (inlined by explain_page.py). It reads the JSON of
// #explain-data (explain_page.py documents its fields; weights are integers in thousandths)
// and draws: the outputs (one per beam hypothesis, selectable), the source and output pieces,
// for the chosen output piece the source weights of every method side by side, and a
// layer x head grid of attention maps on canvases (an RNN's one map titled as such), each
// naming its pieces on its axes, under one colour scale from 0 to the largest weight shown,
// stated once, where hovering or focusing a cell shows its token pair and weight and clicking
// a map enlarges it. Everything is keyboard navigable:
// Tab between groups, arrow keys inside a group, Enter to act.
(function () {
  "use strict";

  const SCALE = 1000;
  const data = JSON.parse(document.getElementById("explain-data").textContent);
  // top: the weight the colour scale ends at (the largest of the maps shown, in thousandths)
  const state = { output: 0, step: 0, kind: "cross", cursor: null, enlarged: null, top: SCALE };
  const app = document.getElementById("app");
  app.textContent = "";

  // ---------------------------------------------------------------------------- helpers
  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "text") node.textContent = value;
      else if (key === "className") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) node.append(child);
    return node;
  }

  function weight(value) {
    return (value / SCALE).toFixed(3);
  }

  // A piece as the page prints it: a space (char tokenizers) as "\u2423", so it can be seen.
  function shown(piece) {
    return piece === "" ? "\u2205" : piece.replace(/ /g, "\u2423");
  }

  function quote(piece) {
    return "\u201c" + shown(piece) + "\u201d";
  }

  // viridis (matplotlib's default map) at five stops, interpolated linearly
  const VIRIDIS = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
  function colour(value) {
    const x = Math.min(1, Math.max(0, value / state.top)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x));
    const f = x - i;
    const c = VIRIDIS[i].map((v, k) => Math.round(v + f * (VIRIDIS[i + 1][k] - v)));
    return "rgb(" + c.join(",") + ")";
  }

  // The colour scale of the maps shown: the ramp drawn by `colour` itself from weight 0 (left)
  // to the largest weight of the kind's maps (right), with its ends' values. Every map of the
  // kind is painted on this one scale, so a colour means the same weight in every thumbnail
  // and the enlarged map; a scale fixed at 1 would paint weights of 0.15 and 0.26 alike.
  const RAMP_WIDTH = 120;
  function legend() {
    const ramp = el("canvas", { className: "ramp", width: String(RAMP_WIDTH), height: "10", "aria-hidden": "true" });
    const context = ramp.getContext("2d");
    for (let x = 0; x < RAMP_WIDTH; x++) {
      context.fillStyle = colour((x / (RAMP_WIDTH - 1)) * state.top);
      context.fillRect(x, 0, 1, 10);
    }
    return el("div", {
      className: "legend", role: "img",
      "aria-label": "colour scale of every map: weight " + weight(0) + " dark purple to " + weight(state.top) + " yellow",
    }, [
      el("span", { text: "weight" }),
      el("span", { className: "legend-min", text: weight(0) }), ramp,
      el("span", { className: "legend-max", text: weight(state.top) }),
      el("span", { className: "legend-note", text: "one scale for every map, to their largest weight" }),
    ]);
  }

  // The largest weight of a kind's maps (at least 0.001, so that a scale has a length).
  function largest(maps) {
    let top = 1;
    for (const layer of maps.weights) for (const head of layer) for (const row of head) for (const value of row) top = Math.max(top, value);
    return top;
  }

  // Arrow keys (and Home/End) move the focus inside a group of buttons; `select` runs on the
  // newly focused one when the selection follows the focus.
  function arrowKeys(container, items, select) {
    container.addEventListener("keydown", (event) => {
      const list = items();
      const index = list.indexOf(document.activeElement);
      if (index < 0) return;
      let next = null;
      if (event.key === "ArrowRight" || event.key === "ArrowDown") next = Math.min(list.length - 1, index + 1);
      if (event.key === "ArrowLeft" || event.key === "ArrowUp") next = Math.max(0, index - 1);
      if (event.key === "Home") next = 0;
      if (event.key === "End") next = list.length - 1;
      if (next === null) return;
      event.preventDefault();
      list[next].focus();
      select(next);
    });
  }

  function output() {
    return data.outputs[state.output];
  }

  // ---------------------------------------------------------------------------- sections
  const outputsSection = el("section", { "aria-labelledby": "outputs-title" });
  const tokensSection = el("section", { "aria-labelledby": "tokens-title" });
  const methodsSection = el("section", { "aria-labelledby": "methods-title" });
  const mapsSection = el("section", { "aria-labelledby": "maps-title" });
  app.append(outputsSection, tokensSection, methodsSection, mapsSection);

  // --- outputs: one radio button per hypothesis
  const hypotheses = el("div", { id: "outputs", className: "hypotheses", role: "radiogroup", "aria-label": "outputs" });
  outputsSection.append(
    el("h2", { id: "outputs-title", text: data.forced ? "Forced target" : "Outputs (beam search, best first)" }),
    el("p", { className: "hint", text: data.forced
      ? "The given target, teacher-forced: score = mean log-probability per piece."
      : "Each hypothesis has its own attention and attributions; score = the beam's length-normalised log-probability." }),
    hypotheses,
  );
  data.outputs.forEach((item, index) => {
    const button = el("button", { type: "button", className: "hypothesis", role: "radio" }, [
      el("span", { className: "rank", text: "#" + (index + 1) }),
      el("span", { className: "score", text: "score " + item.score.toFixed(3) }),
      el("span", { className: "text", text: item.text }),
    ]);
    button.addEventListener("click", () => chooseOutput(index));
    hypotheses.append(button);
  });
  arrowKeys(hypotheses, () => Array.from(hypotheses.children), chooseOutput);

  // --- source and output pieces
  const sourceTokens = el("div", { id: "source-tokens", className: "tokens", "aria-label": "source pieces" });
  const outputTokens = el("div", { id: "output-tokens", className: "tokens", role: "listbox", "aria-label": "output pieces: arrow keys choose the piece to explain" });
  const tokenDetail = el("p", { id: "token-detail", className: "detail", "aria-live": "polite" });
  tokensSection.append(
    el("h2", { id: "tokens-title", text: "Pieces" }),
    el("p", { className: "hint", text: "Choose an output piece (click, or Tab to the pieces and use the arrow keys): the methods below show which source pieces it comes from. The source pieces are shaded by the first method's weights." }),
    el("h3", { text: "Source" }), sourceTokens,
    el("h3", { text: "Output" }), outputTokens, tokenDetail,
  );
  arrowKeys(outputTokens, () => Array.from(outputTokens.children), chooseStep);

  // --- methods side by side
  const methods = el("div", { id: "methods", className: "methods" });
  methodsSection.append(
    el("h2", { id: "methods-title", text: "Source weights of each method" }),
    el("p", { className: "hint", text: "For the chosen output piece: each method's weight on every source piece (non-negative, summing to 1); the largest is bold." }),
    methods,
  );

  // --- attention maps
  const tabs = el("div", { className: "tabs", role: "tablist", "aria-label": "attention kind" });
  const gridScroll = el("div", { className: "grid-scroll" });
  const mapDetail = el("p", { id: "map-detail", className: "detail", "aria-live": "polite" });
  const enlarged = el("div", { id: "enlarged", className: "enlarged", hidden: "" });
  const mapLegend = el("div", { id: "map-legend" });
  mapsSection.append(
    el("h2", { id: "maps-title", text: data.one_map ? "Attention map" : "Attention maps, layer \u00d7 head" }),
    el("p", { className: "hint", text: "Hover over a map, or focus it with Tab and move with the arrow keys, to read a cell; click or press Enter to enlarge it. The chosen output piece's row is outlined." }),
    tabs, mapLegend, mapDetail, gridScroll, enlarged,
  );
  arrowKeys(tabs, () => Array.from(tabs.children), (index) => chooseKind(tabs.children[index].dataset.kind));

  const KIND_TITLES = { cross: "cross-attention", encoder: "encoder self-attention", decoder: "decoder self-attention" };

  // A map's title: an RNN's attention is one map, not layer 1, head 1 of a grid (data.one_map).
  function mapTitle(kind, layer, head) {
    if (data.one_map) return KIND_TITLES[kind] + " (one map)";
    return KIND_TITLES[kind] + ", layer " + (layer + 1) + ", head " + (head + 1);
  }

  function kindMaps(kind) {
    if (kind === "encoder") return data.encoder;
    return output()[kind];
  }

  // ---------------------------------------------------------------------------- drawing
  function drawOutputs() {
    Array.from(hypotheses.children).forEach((button, index) => {
      const chosen = index === state.output;
      button.setAttribute("aria-checked", String(chosen));
      button.tabIndex = chosen ? 0 : -1;
    });
  }

  function drawTokens() {
    const item = output();
    const first = data.methods.length ? item.attributions[data.methods[0]].source[state.step] : null;
    sourceTokens.textContent = "";
    data.source_pieces.forEach((piece, s) => {
      const token = el("span", { className: "token", text: shown(piece) });
      if (first) {
        token.style.background = "rgba(47,126,216," + (first[s] / SCALE).toFixed(3) + ")";
        token.style.color = first[s] > 550 ? "#fff" : "";
        token.title = data.methods[0] + ": " + weight(first[s]);
      }
      sourceTokens.append(token);
    });
    const focused = outputTokens.contains(document.activeElement);
    outputTokens.textContent = "";
    item.rows.forEach((piece, t) => {
      const chosen = t === state.step;
      const token = el("button", {
        type: "button", className: "token output", role: "option", "data-step": String(t),
        "aria-selected": String(chosen), text: shown(piece),
      });
      token.tabIndex = chosen ? 0 : -1;
      token.addEventListener("click", () => chooseStep(t));
      token.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") { event.preventDefault(); chooseStep(t); }
      });
      outputTokens.append(token);
    });
    if (focused) outputTokens.children[state.step].focus();
    const logProb = item.token_log_probs[state.step];
    let text = "Output piece " + (state.step + 1) + " of " + item.rows.length + " " + quote(item.rows[state.step]) +
      ": log p = " + logProb.toFixed(3) + " (p = " + Math.exp(logProb).toFixed(3) + ")";
    if (item.p_gen) text += "; p_gen = " + weight(item.p_gen[state.step]) + " (1 = generated, 0 = copied)";
    tokenDetail.textContent = text;
  }

  function bars(labels, values, side) {
    const list = el("div", { className: "bars " + side });
    const top = values.indexOf(Math.max(...values));
    labels.forEach((label, i) => {
      const mark = i === top ? " top" : "";
      const fill = el("div", { className: "fill" });
      fill.style.width = Math.max(0, Math.min(100, values[i] / 10)).toFixed(1) + "%";
      list.append(
        el("span", { className: "label" + mark, text: shown(label), title: shown(label) }),
        el("div", { className: "track", "aria-hidden": "true" }, [fill]),
        el("span", { className: "value" + mark, text: weight(values[i]) }),
      );
    });
    return list;
  }

  const openPrefixes = new Set();  // the methods whose target prefix list is open

  function drawMethods() {
    const item = output();
    methods.textContent = "";
    for (const name of data.methods) {
      const attribution = item.attributions[name];
      const card = el("div", { className: "method", "data-method": name }, [
        el("h3", { text: name }),
        bars(data.source_pieces, attribution.source[state.step], "source"),
      ]);
      if (attribution.prefix) {
        const inputs = ["<s>", ...item.pieces];
        const share = attribution.source_share
          ? " (the source holds " + weight(attribution.source_share[state.step]) + " of the step's attribution)"
          : "";
        const details = el("details", { className: "prefix" }, [
          el("summary", { className: "prefix-title", text: "target prefix" + share }),
          bars(inputs.slice(0, state.step + 1), attribution.prefix[state.step].slice(0, state.step + 1), "prefix"),
        ]);
        details.open = openPrefixes.has(name);
        details.addEventListener("toggle", () => {
          if (details.open) openPrefixes.add(name); else openPrefixes.delete(name);
        });
        card.append(details);
      }
      methods.append(card);
    }
  }

  function drawTabs() {
    tabs.textContent = "";
    for (const kind of ["cross", "encoder", "decoder"]) {
      if (!kindMaps(kind)) continue;
      const chosen = kind === state.kind;
      const tab = el("button", {
        type: "button", className: "tab", role: "tab", "data-kind": kind,
        "aria-selected": String(chosen), text: KIND_TITLES[kind],
      });
      tab.tabIndex = chosen ? 0 : -1;
      tab.addEventListener("click", () => chooseKind(kind));
      tabs.append(tab);
    }
  }

  // Which row of a map belongs to the chosen output piece: the cross map's row t predicts
  // piece t; the decoder map's row t has input y_{t-1}, the step that predicts piece t.
  function chosenRow(kind) {
    return kind === "encoder" ? null : state.step;
  }

  // A thumbnail's cell: 16 px at least, so that its colour can be told and its labels read
  // (the grid scrolls sideways where it is wider than the page), larger for short sentences.
  const MIN_CELL = 16;
  function cellSize(maps) {
    const longest = Math.max(maps.rows.length, maps.columns.length);
    return Math.max(MIN_CELL, Math.min(24, Math.floor(320 / longest)));
  }

  const LABEL_FONT = "12px ui-monospace, monospace";

  // A map on a canvas, its row pieces on the left and its column pieces turned above it, cells
  // of `size` px; data-left, data-top and data-size say where the cells lie, and hovering one
  // shows its token pair and weight. An RNN's map and a transformer's head are drawn alike.
  function mapCanvas(kind, maps, layer, head, size, label) {
    const matrix = maps.weights[layer][head];
    const probe = document.createElement("canvas").getContext("2d");
    probe.font = LABEL_FONT;
    const labelWidth = (labels) => Math.ceil(Math.max(...labels.map((piece) => probe.measureText(shown(piece)).width))) + 8;
    const left = labelWidth(maps.rows);
    const top = labelWidth(maps.columns);
    const canvas = el("canvas", {
      width: String(left + maps.columns.length * size), height: String(top + matrix.length * size),
      role: "img", "aria-label": label, "data-left": String(left), "data-top": String(top), "data-size": String(size),
    });
    const context = canvas.getContext("2d");
    context.fillStyle = "#fff";
    context.fillRect(0, 0, canvas.width, canvas.height);
    context.font = LABEL_FONT;
    context.fillStyle = "#1b1f24";
    context.textBaseline = "middle";
    maps.rows.forEach((piece, r) => context.fillText(shown(piece), 2, top + r * size + size / 2));
    maps.columns.forEach((piece, c) => {
      context.save();
      context.translate(left + c * size + size / 2, top - 4);
      context.rotate(-Math.PI / 2);
      context.fillText(shown(piece), 0, 0);
      context.restore();
    });
    paint(canvas, matrix, size, left, top, chosenRow(kind));
    canvas.addEventListener("mousemove", (event) => {
      const box = canvas.getBoundingClientRect();
      const scale = box.width / canvas.width;
      const c = Math.floor(((event.clientX - box.left) / scale - left) / size);
      const r = Math.floor(((event.clientY - box.top) / scale - top) / size);
      if (r >= 0 && r < matrix.length && c >= 0 && c < maps.columns.length) {
        mapDetail.textContent = describeCell(kind, maps, layer, head, r, c);
      }
    });
    return canvas;
  }

  function paint(canvas, matrix, size, left, top, row) {
    const context = canvas.getContext("2d");
    matrix.forEach((values, r) => {
      values.forEach((value, c) => {
        context.fillStyle = colour(value);
        context.fillRect(left + c * size, top + r * size, size, size);
      });
    });
    if (row !== null && row < matrix.length) {
      context.strokeStyle = "#d4380d";
      context.lineWidth = Math.max(1, Math.min(2, size / 3));
      context.strokeRect(left + 0.5, top + row * size + 0.5, matrix[0].length * size - 1, size - 1);
    }
  }

  function describeCell(kind, maps, layer, head, r, c) {
    const value = maps.weights[layer][head][r][c];
    const where = mapTitle(kind, layer, head) + ": ";
    const pair = kind === "cross"
      ? "output " + quote(maps.rows[r]) + " (row " + (r + 1) + ") \u2192 source " + quote(maps.columns[c])
      : quote(maps.rows[r]) + " (row " + (r + 1) + ") \u2192 " + quote(maps.columns[c]);
    return where + pair + " (column " + (c + 1) + ") = " + weight(value);
  }

  function drawGrid() {
    const kind = state.kind;
    const maps = kindMaps(kind);
    const size = cellSize(maps);
    state.top = largest(maps);
    mapLegend.textContent = "";
    mapLegend.append(legend());
    const grid = el("div", { id: "grid", className: data.one_map ? "grid one-map" : "grid" });
    if (data.one_map) {
      grid.append(el("div", { className: "cell" }, [
        el("span", { className: "axis", text: mapTitle(kind, 0, 0) }), thumbnail(kind, maps, 0, 0, size),
      ]));
    } else {
      grid.style.gridTemplateColumns = "auto repeat(" + maps.heads + ", max-content)";
      grid.append(el("span", { className: "corner" }));
      for (let h = 0; h < maps.heads; h++) grid.append(el("span", { className: "axis", text: "head " + (h + 1) }));
      for (let l = 0; l < maps.layers; l++) {
        grid.append(el("span", { className: "axis", text: "layer " + (l + 1) }));
        for (let h = 0; h < maps.heads; h++) grid.append(el("div", { className: "cell" }, [thumbnail(kind, maps, l, h, size)]));
      }
    }
    gridScroll.textContent = "";
    gridScroll.append(grid);
    if (state.enlarged) drawEnlarged();
  }

  function thumbnail(kind, maps, layer, head, size) {
    const matrix = maps.weights[layer][head];
    const canvas = mapCanvas(kind, maps, layer, head, size, mapTitle(kind, layer, head) + " (Enter enlarges)");
    canvas.tabIndex = 0;
    canvas.dataset.layer = String(layer + 1);
    canvas.dataset.head = String(head + 1);
    canvas.addEventListener("click", () => enlarge(kind, layer, head));
    canvas.addEventListener("focus", () => {
      const row = chosenRow(kind);
      state.cursor = [row === null ? 0 : Math.min(row, matrix.length - 1), 0];
      mapDetail.textContent = describeCell(kind, maps, layer, head, ...state.cursor);
    });
    canvas.addEventListener("keydown", (event) => cursorKeys(event, kind, maps, layer, head));
    return canvas;
  }

  // Arrow keys move a cursor over the focused map's cells; Enter enlarges the map.
  function cursorKeys(event, kind, maps, layer, head) {
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      enlarge(kind, layer, head);
      return;
    }
    const move = moves[event.key];
    if (!move || !state.cursor) return;
    event.preventDefault();
    const rows = maps.weights[layer][head].length;
    const r = Math.min(rows - 1, Math.max(0, state.cursor[0] + move[0]));
    const c = Math.min(maps.columns.length - 1, Math.max(0, state.cursor[1] + move[1]));
    state.cursor = [r, c];
    mapDetail.textContent = describeCell(kind, maps, layer, head, r, c);
  }

  function enlarge(kind, layer, head) {
    state.enlarged = { kind: kind, layer: layer, head: head };
    drawEnlarged();
    enlarged.scrollIntoView({ block: "nearest" });
    enlarged.querySelector("button").focus();
  }

  function drawEnlarged() {
    const { kind, layer, head } = state.enlarged;
    const maps = kindMaps(kind);
    if (!maps || kind !== state.kind) { closeEnlarged(); return; }
    enlarged.hidden = false;  // shown before measuring the room it has
    const room = Math.max(160, enlarged.clientWidth - 24 - 120);
    const size = Math.max(MIN_CELL, Math.min(28, Math.floor(room / maps.columns.length)));
    const canvas = mapCanvas(kind, maps, layer, head, size, "enlarged map");
    const close = el("button", { type: "button", className: "tab", text: "Close" });
    close.addEventListener("click", closeEnlarged);
    enlarged.textContent = "";
    enlarged.append(
      el("div", { className: "bar-row" }, [
        el("h3", { text: mapTitle(kind, layer, head) }), close,
      ]),
      legend(),
      el("div", { className: "enlarged-scroll" }, [canvas]),
    );
    enlarged.hidden = false;
  }

  function closeEnlarged() {
    state.enlarged = null;
    enlarged.hidden = true;
    enlarged.textContent = "";
  }

  document.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && state.enlarged) closeEnlarged();
  });

  // ---------------------------------------------------------------------------- choices
  function chooseOutput(index) {
    state.output = index;
    state.step = Math.min(state.step, output().rows.length - 1);
    if (!kindMaps(state.kind)) state.kind = "cross";
    drawAll();
  }

  function chooseStep(step) {
    state.step = step;
    drawTokens();
    drawMethods();
    drawGrid();
  }

  function chooseKind(kind) {
    const focused = tabs.contains(document.activeElement);
    state.kind = kind;
    drawTabs();
    if (focused) tabs.querySelector('[aria-selected="true"]').focus();
    drawGrid();
  }

  function drawAll() {
    drawOutputs();
    drawTokens();
    drawMethods();
    drawTabs();
    drawGrid();
  }

  drawAll();
})();

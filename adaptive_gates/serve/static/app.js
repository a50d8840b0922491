// The chat page of `adaptive-gates serve`: streams each answer from
// /v1/chat/completions and shows the gate's decision next to it. Every piece of
// server or user text goes into the page as a text node, never as markup.
"use strict";

(() => {
  const DECISION_HEADER = "X-Adaptive-Gates-Decision";
  // Passages longer than this start collapsed.
  const LONG_PASSAGE = 280;
  const ROUTE_MEANING = {
    direct: "answered from the model's own knowledge, no retrieval",
    retrieve: "passages retrieved first, then answered with them",
    draft: "the gate's own confident draft answer, no second LLM call",
  };

  /** The element with data-testid `id` under `root`. */
  const byTestId = (id, root = document) => root.querySelector(`[data-testid="${id}"]`);

  /** A new element; string children become text nodes (escaped by construction). */
  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "testid") node.dataset.testid = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    node.append(...children.filter((c) => c !== null && c !== undefined));
    return node;
  }

  /** A thumb icon (up, or down when ``down``), drawn inline: no icon font is needed. */
  function thumb(down) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("aria-hidden", "true");
    svg.setAttribute("class", "thumb-icon");
    const path = document.createElementNS(SVG, "path");
    path.setAttribute("d", "M3 10h4v11H3z M8 10l3-7c1.5 0 3 1 2.6 2.8L13 10h6a2 2 0 0 1 2 2.3l-1.2 7A2 2 0 0 1 17.8 21H8z");
    if (down) path.setAttribute("transform", "rotate(180 12 12)");
    svg.append(path);
    return svg;
  }
  const SVG = "http://www.w3.org/2000/svg";

  const isNumber = (x) => typeof x === "number" && Number.isFinite(x);
  const fixed = (x, digits = 3) => (isNumber(x) ? x.toFixed(digits) : "n/a");
  const percent = (x) => (isNumber(x) ? `${(100 * x).toFixed(1)}%` : "–");
  const millis = (x) => (isNumber(x) ? `${x.toFixed(1)} ms` : "n/a");
  const shown = (value) =>
    typeof value === "string" ? value : isNumber(value) ? String(+value.toFixed(4)) : JSON.stringify(value);

  /** The message of an OpenAI-shaped error response, with its status. */
  async function errorMessage(response) {
    return (await errorOf(response)).message;
  }

  /** An OpenAI-shaped error response: its message (with its status) and its code. */
  async function errorOf(response) {
    const text = await response.text();
    let message = text.trim() || response.statusText;
    let code = null;
    try {
      const body = JSON.parse(text);
      if (body && body.error && body.error.message) message = body.error.message;
      if (body && body.error && body.error.code) code = body.error.code;
    } catch (_) {
      // not JSON: the raw body is the message
    }
    return { message: `HTTP ${response.status}: ${message}`, code };
  }

  /** The codes of a refusal that a shorter conversation would not get. */
  const CONVERSATION_TOO_LONG = ["context_length_exceeded", "too_many_messages"];

  // ---- the API key ---------------------------------------------------------
  // Shown once the server asks for a key (401), kept for this tab only.

  const KEY_STORE = "adaptive-gates-api-key";

  /** Request headers, with the key entered when there is one. */
  function apiHeaders(headers = {}) {
    const key = byTestId("api-key").value.trim();
    return key ? { ...headers, Authorization: `Bearer ${key}` } : headers;
  }

  /** After a 401, show the key field so the user can give one. */
  function askForKeyOn(response) {
    if (response.status !== 401) return;
    byTestId("api-key-field").hidden = false;
    byTestId("api-key").focus();
  }

  function restoreKey() {
    const kept = sessionStorage.getItem(KEY_STORE);
    if (kept) {
      byTestId("api-key").value = kept;
      byTestId("api-key-field").hidden = false;
    }
    byTestId("api-key").addEventListener("change", (event) => {
      sessionStorage.setItem(KEY_STORE, event.target.value.trim());
      loadStats();
    });
  }

  // ---- running statistics ------------------------------------------------

  function showStats(stats) {
    if (!stats) return;
    byTestId("requests").textContent = String(stats.requests);
    byTestId("retrieval-rate").textContent = stats.requests ? percent(stats.retrieval_rate) : "–";
    byTestId("calls-saved").textContent = String(stats.retrieval_calls_saved);
    byTestId("llm-calls-saved").textContent = String(stats.llm_calls_saved);
  }

  function showMemory(memory) {
    const item = byTestId("memory");
    item.parentElement.hidden = !memory;
    if (memory) item.textContent = `${memory.known} known · ${memory.unknown} unknown`;
  }

  function showPageError(message) {
    const notice = byTestId("page-error");
    notice.textContent = message;
    notice.hidden = false;
  }

  /** Hide the thumbs when the served gate does not learn from feedback (``/v1/models``
   * says so): a verdict could only be refused. Where the server has keys and none is
   * given yet, the thumbs stay. */
  async function loadModels() {
    try {
      const response = await fetch("/v1/models", { headers: apiHeaders() });
      if (!response.ok) return;
      const body = await response.json();
      const served = body.data && body.data[0] && body.data[0].adaptive_gates;
      document.body.classList.toggle("no-feedback", Boolean(served) && served.learns_from_feedback === false);
    } catch (_) {
      // the thumbs stay; a verdict's refusal would say why
    }
  }

  async function loadStats() {
    try {
      const response = await fetch("/v1/stats", { headers: apiHeaders() });
      // The figures need an admin key where the server has keys: without one the
      // page works on, with no figures.
      if (response.status === 401 || response.status === 403) return;
      if (!response.ok) throw new Error(await errorMessage(response));
      const body = await response.json();
      byTestId("gate-name").textContent = `gate ${body.gate} · threshold ${fixed(body.threshold)}`;
      showStats(body.stats);
      showMemory(body.memory);
    } catch (err) {
      showPageError(`Could not load the server's statistics: ${err.message}`);
    }
  }

  // ---- reading the event stream -------------------------------------------

  /** The JSON chunks of a text/event-stream body, up to `data: [DONE]`. A body that
   * ends without it was cut (the server or the network went away mid-answer): an error. */
  async function* streamedChunks(body) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value, { stream: !done });
      buffer = buffer.replace(/\r\n/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = event
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, ""))
          .join("\n");
        if (!data) continue;
        if (data === "[DONE]") return;
        yield JSON.parse(data);
      }
      if (done) throw new Error("the connection closed before its end");
    }
  }

  // ---- one answer and its decision panel -----------------------------------

  class Answer {
    constructor() {
      this.text = "";
      this.decisionId = null;
      // What the answer shows, as it came: kept with the conversation (see `saved`).
      this.header = null;
      this.record = null;
      this.errorMessage = null;
      this.verdict = null;
      this.textNode = el("p", { testid: "answer-text", class: "answer-text" });
      this.error = el("p", { testid: "answer-error", class: "error", role: "alert", hidden: true });
      this.hint = el("p", { testid: "new-chat-hint", class: "hint", hidden: true });
      this.up = el("button", { type: "button", testid: "feedback-up", class: "thumb", title: "the answer is right: tell the gate", disabled: true }, thumb(false), "Right");
      this.down = el("button", { type: "button", testid: "feedback-down", class: "thumb", title: "the answer is wrong: tell the gate", disabled: true }, thumb(true), "Wrong");
      this.feedbackStatus = el("span", { testid: "feedback-status", class: "feedback-status" });
      this.up.addEventListener("click", () => this.sendFeedback(true, this.up));
      this.down.addEventListener("click", () => this.sendFeedback(false, this.down));

      this.route = el("span", { testid: "route", class: "route" }, "deciding…");
      this.gate = el("span", { testid: "gate", class: "muted" });
      this.score = el("span", { testid: "score" }, "–");
      this.threshold = el("span", { testid: "threshold" }, "–");
      this.fill = el("span", { class: "gauge-fill" });
      this.tick = el("span", { class: "gauge-tick" });
      this.judged = el("p", { testid: "judged", class: "judged", hidden: true });
      this.fallback = el("p", { testid: "fallback", class: "error", hidden: true });
      this.evidence = el("div", { testid: "evidence", class: "evidence" }, el("p", { class: "muted" }, "waiting for the evidence…"));
      this.passages = el("div", { testid: "passages", class: "passages" });
      this.latency = el("dl", { testid: "latency", class: "latency" });

      this.feedback = el("div", { class: "feedback" }, this.up, this.down, this.feedbackStatus);
      this.panel = el(
        "section",
        { testid: "decision", class: "decision", "aria-label": "gate decision" },
        el("div", { class: "decision-head" }, this.route, this.gate),
        el(
          "div",
          { class: "gauge-row" },
          el("span", { class: "gauge", "aria-hidden": "true" }, this.fill, this.tick),
          el("span", { class: "gauge-text" }, "score ", this.score, " vs threshold ", this.threshold),
        ),
        this.judged,
        this.fallback,
        el("h3", {}, "Evidence"),
        this.evidence,
        el("h3", {}, "Passages"),
        this.passages,
        el("h3", {}, "Latency"),
        this.latency,
      );
      this.node = el(
        "li",
        { testid: "answer", class: "turn assistant", "data-state": "waiting" },
        el(
          "div",
          { class: "bubble" },
          this.textNode,
          this.error,
          this.hint,
          this.feedback,
        ),
        this.panel,
      );
    }

    setState(state) {
      this.node.dataset.state = state;
    }

    appendText(piece) {
      this.text += piece;
      this.textNode.textContent = this.text;
    }

    fail(message, hint = "") {
      this.errorMessage = message;
      this.error.textContent = message;
      this.error.hidden = false;
      this.hint.textContent = hint;
      this.hint.hidden = !hint;
      this.setState("error");
      this.feedback.hidden = true;
      this.panel.hidden = !this.decisionId;
    }

    /** The decision as the response header gives it, before the first token. */
    showHeader(header) {
      this.header = header;
      this.decisionId = header.id;
      this.node.dataset.decisionId = header.id;
      this.showRoute(header.route);
      this.gate.textContent = header.gate;
      this.showScore(header.score, header.threshold, header.retrieve);
    }

    /** The full decision record of the last chunk. */
    showRecord(record) {
      this.record = record;
      const decision = record.decision || {};
      this.decisionId = record.id;
      this.node.dataset.decisionId = record.id;
      this.showRoute(record.route);
      this.gate.textContent = decision.gate || "";
      this.showScore(decision.score, decision.threshold, decision.retrieve);
      // The text the gate judged: the question after the recent turns of the conversation.
      this.judged.hidden = !decision.question;
      this.judged.replaceChildren(el("span", { class: "muted" }, "judged: "), decision.question || "");
      this.fallback.hidden = !decision.error;
      this.fallback.textContent = decision.error ? `Fallback decision: ${decision.error}` : "";
      this.showEvidence(decision.details || {});
      this.showPassages(record.passages || []);
      this.showLatency(record.latency_ms || {});
    }

    showRoute(route) {
      this.node.dataset.route = route;
      this.route.textContent = route;
      this.route.className = `route route-${route}`;
      this.route.title = ROUTE_MEANING[route] || "";
    }

    showScore(score, threshold, retrieve) {
      this.score.textContent = fixed(score);
      this.threshold.textContent = fixed(threshold);
      // Need scores of most gates lie in [0, 1]; others are drawn on their own scale.
      const top = Math.max(1, isNumber(score) ? score : 0, isNumber(threshold) ? threshold : 0);
      this.fill.style.width = isNumber(score) ? `${(100 * Math.max(score, 0)) / top}%` : "0";
      this.fill.classList.toggle("over", Boolean(retrieve));
      this.tick.hidden = !isNumber(threshold);
      if (isNumber(threshold)) this.tick.style.left = `${(100 * Math.max(threshold, 0)) / top}%`;
    }

    showEvidence(details) {
      const parts = [];
      const rest = { ...details };
      if (Array.isArray(details.neighbours)) {
        const { k, n_known: known } = details;
        delete rest.neighbours;
        delete rest.k;
        delete rest.n_known;
        if (isNumber(k) && isNumber(known)) {
          parts.push(el("p", { class: "muted" }, `${known} of the ${k} nearest past questions were known`));
        }
        const rows = details.neighbours.map((n) =>
          el(
            "tr",
            { testid: "neighbour", "data-label": n.label, "data-taught-by-another-key": n.taught_by_another_key === true },
            // another key's question taught through feedback: its label only, never its text
            n.taught_by_another_key || typeof n.question !== "string"
              ? el("td", { testid: "neighbour-question", class: "muted" }, "a question another user taught")
              : el("td", { testid: "neighbour-question" }, n.question),
            el("td", {}, el("span", { class: `label label-${n.label}` }, n.label)),
            el("td", { testid: "neighbour-similarity", class: "number" }, fixed(n.similarity)),
          ),
        );
        parts.push(
          el(
            "table",
            { class: "neighbours" },
            el("thead", {}, el("tr", {}, el("th", {}, "past question"), el("th", {}, "label"), el("th", { class: "number" }, "similarity"))),
            el("tbody", {}, ...rows),
          ),
        );
      }
      if ("certainty" in details) {
        delete rest.certainty;
        delete rest.reply;
        parts.push(el("p", { testid: "certainty" }, "stated certainty: ", el("strong", {}, details.certainty || "none")));
        if (details.reply) parts.push(el("blockquote", { class: "reply" }, details.reply));
      }
      const keys = Object.keys(rest);
      if (keys.length) {
        parts.push(el("dl", { class: "details" }, ...keys.flatMap((key) => [el("dt", {}, key), el("dd", {}, shown(rest[key]))])));
      }
      if (!parts.length) parts.push(el("p", { class: "muted" }, "no evidence recorded"));
      this.evidence.replaceChildren(...parts);
    }

    showPassages(passages) {
      if (!passages.length) {
        this.passages.replaceChildren(el("p", { class: "muted" }, "none: answered without retrieval"));
        return;
      }
      this.passages.replaceChildren(
        ...passages.map((p) =>
          el(
            "details",
            { testid: "passage", class: "passage", open: p.text.length <= LONG_PASSAGE },
            el("summary", {}, el("strong", {}, p.title || p.id), " ", el("span", { class: "muted" }, `score ${fixed(p.score)}`)),
            el("p", {}, p.text),
          ),
        ),
      );
    }

    showLatency(latency) {
      this.latency.replaceChildren(
        ...["gate", "retrieval", "upstream", "total"].flatMap((part) => [el("dt", {}, part), el("dd", {}, millis(latency[part]))]),
      );
    }

    finish() {
      this.setState("done");
      this.up.disabled = this.down.disabled = !this.decisionId;
    }

    async sendFeedback(correct, button) {
      this.up.disabled = this.down.disabled = true;
      button.setAttribute("aria-pressed", "true");
      this.feedbackStatus.textContent = "sending…";
      let response;
      try {
        response = await fetch("/v1/feedback", {
          method: "POST",
          headers: apiHeaders({ "Content-Type": "application/json" }),
          body: JSON.stringify({ decision_id: this.decisionId, correct }),
        });
      } catch (err) {
        // Nothing reached the server: the verdict can be sent again.
        this.feedbackStatus.textContent = `Could not send the feedback: ${err.message}`;
        this.up.disabled = this.down.disabled = false;
        button.removeAttribute("aria-pressed");
        return;
      }
      if (!response.ok) {
        askForKeyOn(response);
        this.feedbackStatus.classList.add("error");
        this.feedbackStatus.textContent = await errorMessage(response);
        return;
      }
      const body = await response.json();
      this.showVerdict(correct, body);
      if (body.memory) showMemory(body.memory);
      saveConversation();
    }

    /** The verdict the server took (`body`, its answer to the feedback). */
    showVerdict(correct, body) {
      this.verdict = { correct, body };
      this.up.disabled = this.down.disabled = true;
      (correct ? this.up : this.down).setAttribute("aria-pressed", "true");
      this.feedbackStatus.dataset.label = body.label || "none";
      if (body.status === "pending") {
        const quorum = body.quorum ? ` (${body.quorum.keys} of the ${body.quorum.needed} keys needed)` : "";
        this.feedbackStatus.textContent = `pending: the gate learns it once other keys agree${quorum}`;
      } else if (body.label) {
        const memory = body.memory ? ` · memory now ${body.memory.known} known, ${body.memory.unknown} unknown` : "";
        this.feedbackStatus.replaceChildren("the gate learned: ", el("span", { class: `label label-${body.label}` }, body.label), memory);
      } else {
        this.feedbackStatus.textContent = "logged: an answer given with retrieval teaches the gate no label";
      }
    }

    /** What it takes to show this answer again (JSON). */
    saved() {
      const { text, header, record, errorMessage: error, verdict } = this;
      return { state: this.node.dataset.state, text, header, record, error, verdict };
    }

    /** An answer shown again from what `saved` gave. */
    static restored(saved) {
      const answer = new Answer();
      if (saved.header) answer.showHeader(saved.header);
      answer.appendText(saved.text);
      if (saved.record) answer.showRecord(saved.record);
      if (saved.error) answer.fail(saved.error);
      else if (saved.state === "done") answer.finish();
      else answer.fail("The page was reloaded before this answer ended: the rest of it is lost.");
      if (saved.verdict) answer.showVerdict(saved.verdict.correct, saved.verdict.body);
      return answer;
    }
  }

  // ---- the conversation ------------------------------------------------------

  // Kept in sessionStorage, as the API key is: it survives a reload of the tab but
  // not the tab, and each tab holds its own conversation (with localStorage two tabs
  // would overwrite each other's, and old decisions would outlive the server's memory
  // of them, so their thumbs would only meet refusals).
  const CONVERSATION_STORE = "adaptive-gates-conversation";
  /** The messages sent with the next question. */
  const history = [];
  /** The turns of this conversation as shown: {question, answer}. */
  const turns = [];
  let busy = false;

  function saveConversation() {
    const saved = { history, turns: turns.map(({ question, answer }) => ({ question, answer: answer.saved() })) };
    try {
      sessionStorage.setItem(CONVERSATION_STORE, JSON.stringify(saved));
    } catch (err) {
      // a full store (passages are long): the page works on, a reload loses the conversation
      showPageError(`The conversation could not be kept for a reload: ${err.message}`);
    }
  }

  function restoreConversation() {
    const saved = JSON.parse(sessionStorage.getItem(CONVERSATION_STORE));
    if (!saved) return;
    history.push(...saved.history);
    for (const { question, answer } of saved.turns) showTurn(question, Answer.restored(answer));
  }

  function setBusy(value) {
    busy = value;
    byTestId("send").disabled = value;
    byTestId("new-chat").disabled = value;
  }

  /** Show a question and its answer; the turn joins the conversation. */
  function showTurn(question, answer) {
    const asked = el("li", { testid: "user-turn", class: "turn user" }, el("div", { class: "bubble" }, question));
    byTestId("empty").hidden = true;
    byTestId("conversation").append(asked, answer.node);
    turns.push({ question, answer });
    return asked;
  }

  /** Scroll `node` to the top of the window, below the header where the header stays
   * on screen (it does on wide screens), so the header never covers it. */
  function scrollToTop(node) {
    const header = document.querySelector("header");
    const covered = getComputedStyle(header).position === "sticky" ? header.offsetHeight : 0;
    const air = 8;
    window.scrollTo({ top: window.scrollY + node.getBoundingClientRect().top - covered - air });
  }

  async function ask(question) {
    const turn = { role: "user", content: question };
    const request = { messages: [...history, turn], stream: true };
    const maxTokens = Number.parseInt(byTestId("max-tokens").value, 10);
    if (maxTokens > 0) request.max_tokens = maxTokens;
    const answer = new Answer();
    scrollToTop(showTurn(question, answer));
    saveConversation();
    setBusy(true);
    try {
      const response = await fetch("/v1/chat/completions", {
        method: "POST",
        headers: apiHeaders({ "Content-Type": "application/json" }),
        body: JSON.stringify(request),
      });
      if (!response.ok) {
        askForKeyOn(response);
        const { message, code } = await errorOf(response);
        // a kept conversation past the server's bounds fails every next question: say how to go on
        const hint = CONVERSATION_TOO_LONG.includes(code) && history.length ? "Press New chat to go on: the earlier turns are then no longer sent." : "";
        answer.fail(message, hint);
        return;
      }
      answer.setState("streaming");
      const header = response.headers.get(DECISION_HEADER);
      if (header) answer.showHeader(JSON.parse(header));
      for await (const chunk of streamedChunks(response.body)) {
        if (chunk.error) {
          answer.fail(chunk.error.message || JSON.stringify(chunk.error));
          return;
        }
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) answer.appendText(delta.content);
        if (chunk.adaptive_gates) {
          answer.showRecord(chunk.adaptive_gates);
          showStats(chunk.adaptive_gates.stats);
        }
      }
      answer.finish();
      history.push(turn, { role: "assistant", content: answer.text });
    } catch (err) {
      answer.fail(`The answer stopped: ${err.message}`);
    } finally {
      setBusy(false);
      saveConversation();
    }
  }

  /** Start a new conversation: the answers so far stay on the page (their decisions
   * can still be compared and judged) but are no longer sent as history, nor kept
   * for a reload. */
  function newChat() {
    const conversation = byTestId("conversation");
    const last = conversation.lastElementChild;
    if (history.length && last && last.dataset.testid !== "new-conversation") {
      conversation.append(el("li", { testid: "new-conversation", class: "divider" }, "new conversation: the turns above are not sent with the next questions"));
    }
    history.length = 0;
    turns.length = 0;
    sessionStorage.removeItem(CONVERSATION_STORE);
    byTestId("question").focus();
  }

  function submit() {
    const box = byTestId("question");
    const question = box.value.trim();
    if (busy || !question) return;
    box.value = "";
    ask(question);
  }

  document.addEventListener("DOMContentLoaded", () => {
    byTestId("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      submit();
    });
    byTestId("question").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        submit();
      }
    });
    byTestId("new-chat").addEventListener("click", newChat);
    byTestId("question").focus();
    restoreKey();
    restoreConversation();
    loadModels();
    loadStats();
  });
})();

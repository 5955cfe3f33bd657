// The playground: a chat with the served model over /v1/chat/completions, streamed.
//
// Per reply it shows the time to first token (from sending the request to the first text) and the
// decode speed: the tokens after the first (usage.completion_tokens, from stream_options'
// include_usage) over the time after the first text.
"use strict";

const CHAT_PATH = "/v1/chat/completions";
const history = []; // the conversation so far: {role, content}
let models = []; // /v1/models' data
let controller = null; // the running reply's AbortController

const $ = (id) => document.getElementById(id);

async function loadModels() {
  const response = await api("/v1/models");
  if (!response.ok) throw new Error(await errorText(response));
  models = (await response.json()).data;
  const select = $("model");
  select.replaceChildren(...models.map((m) => el("option", { value: m.id }, m.id)));
  modelChanged();
  setStatus("");
}

function modelChanged() {
  const card = models.find((m) => m.id === $("model").value);
  showModalities(card ? card.modalities : ["text"]);
}

function numberOf(id) {
  const text = $(id).value.trim();
  return text === "" ? undefined : Number(text);
}

// The body of the request for the conversation so far plus `next` (a user message), from the
// panel's fields. Empty fields are left out, so the server's defaults apply.
function requestBody(next) {
  const messages = [];
  const system = $("system").value;
  if (system.trim()) messages.push({ role: "system", content: system });
  messages.push(...history);
  if (next) messages.push(next);
  const body = { model: $("model").value, messages, stream: true, stream_options: { include_usage: true } };
  for (const [name, id] of [["temperature", "temperature"], ["top_p", "top-p"], ["max_tokens", "max-tokens"], ["seed", "seed"]]) {
    const value = numberOf(id);
    if (value !== undefined) body[name] = value;
  }
  const stop = $("stop").value.split("\n").filter((s) => s !== "");
  if (stop.length) body.stop = stop;
  return body;
}

// A message of the transcript: its role, a reasoning block (hidden until used), text, a meta line.
function addMessage(role, content) {
  const text = el("div", { class: "text" }, typeof content === "string" ? content : "");
  const node = el("div", { class: "message " + role }, el("div", { class: "role" }, role),
    el("div", { class: "reasoning", hidden: "" }), text, el("div", { class: "meta" }));
  if (Array.isArray(content)) {
    for (const part of content) {
      if (part.type === "text") text.append(part.text);
      else if (part.type === "image_url") node.append(el("img", { class: "thumb", src: part.image_url.url, alt: "image" }));
      else node.append(el("div", { class: "meta" }, "♪ audio"));
    }
  }
  $("messages").append(node);
  node.scrollIntoView({ block: "end" });
  return node;
}

function setBusy(busy) {
  $("send").disabled = busy;
  $("stop-button").disabled = !busy;
}

async function send() {
  const text = $("prompt").value;
  if (!text.trim() && !attachments.length) return;
  const user = { role: "user", content: takeContent(text) };
  const body = requestBody(user);
  $("prompt").value = "";
  history.push(user);
  addMessage("user", user.content);
  const reply = addMessage("assistant", "");
  setBusy(true);
  try {
    const answer = await streamReply(body, reply);
    if (answer === null) history.pop(); // failed: the next message goes without this one
    else history.push({ role: "assistant", content: answer });
  } finally {
    reply.classList.remove("streaming");
    controller = null;
    setBusy(false);
  }
}

// Streams one reply into `node`; returns its text (null when the request failed).
async function streamReply(body, node) {
  controller = new AbortController();
  node.classList.add("streaming");
  const textNode = node.querySelector(".text");
  const reasoning = node.querySelector(".reasoning");
  const meta = node.querySelector(".meta");
  const timing = { start: performance.now(), first: null, end: null, tokens: null };
  try {
    const response = await api(CHAT_PATH, { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal: controller.signal });
    if (!response.ok) {
      node.classList.add("error");
      meta.textContent = await errorText(response);
      return null;
    }
    await readEvents(response, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) timing.tokens = chunk.usage.completion_tokens;
      const delta = chunk.choices && chunk.choices.length ? chunk.choices[0].delta : {};
      if (delta.reasoning_content) {
        reasoning.hidden = false;
        reasoning.append(delta.reasoning_content);
      }
      if (delta.content) {
        if (timing.first === null) timing.first = performance.now();
        textNode.append(delta.content); // a text node: whatever the model writes stays text
      }
    });
    timing.end = performance.now();
    meta.textContent = timingText(timing);
  } catch (error) {
    if (error.name === "AbortError") {
      meta.textContent = "stopped";
    } else {
      node.classList.add("error");
      meta.textContent = error instanceof AuthError ? "needs the API key" : String(error.message || error);
      return null;
    }
  }
  return textNode.textContent;
}

function timingText(t) {
  const parts = [];
  if (t.first !== null) parts.push("TTFT " + ((t.first - t.start) / 1000).toFixed(2) + " s");
  if (t.tokens !== null && t.first !== null && t.tokens > 1 && t.end > t.first) {
    parts.push(((t.tokens - 1) / ((t.end - t.first) / 1000)).toFixed(1) + " tok/s");
  }
  if (t.tokens !== null) parts.push(t.tokens + " tokens");
  return parts.join(" · ") || "no text";
}

function showSnippet(make) {
  const text = $("prompt").value;
  const next = text.trim() ? { role: "user", content: text } : null;
  const snippet = make(window.location.origin, requestBody(next));
  $("snippet").hidden = false;
  $("snippet").textContent = snippet;
  if (navigator.clipboard) navigator.clipboard.writeText(snippet).catch(() => {});
}

function wire() {
  $("chat").addEventListener("submit", (event) => {
    event.preventDefault();
    run(send);
  });
  $("prompt").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      if (!$("send").disabled) run(send);
    }
  });
  $("stop-button").addEventListener("click", () => controller && controller.abort());
  $("clear").addEventListener("click", () => {
    history.length = 0;
    $("messages").replaceChildren();
  });
  $("model").addEventListener("change", modelChanged);
  $("copy-curl").addEventListener("click", () => showSnippet(curlSnippet));
  $("copy-python").addEventListener("click", () => showSnippet(pythonSnippet));
  wireAttachments();
}

document.addEventListener("DOMContentLoaded", () => {
  wire();
  withKey(loadModels);
});

// Shared by both pages: the API key, API calls that carry it, and building the DOM.
//
// The key is typed once into the key form and kept in this tab's sessionStorage (gone when the tab
// closes). Every API call sends it as "Authorization: Bearer <key>"; a 401 shows the key form.
// Everything is rendered with textContent or attributes, never as HTML: model output, setting
// values and metric labels are text.
"use strict";

const KEY_ITEM = "mstar.apiKey";

class AuthError extends Error {}

function apiKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

function authHeaders(extra) {
  const headers = Object.assign({}, extra || {});
  const key = apiKey();
  if (key) headers.Authorization = "Bearer " + key;
  return headers;
}

// fetch() of an API path with the key; a 401 shows the key form and throws AuthError.
async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = authHeaders(opts.headers);
  const response = await fetch(path, opts);
  if (response.status === 401) {
    showKeyForm(true);
    throw new AuthError("this server needs an API key");
  }
  return response;
}

// The body of an error response as one line (OpenAI's {"error": {"message"}} when it is that).
async function errorText(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    if (body.error && body.error.message) return response.status + ": " + body.error.message;
  } catch (e) {
    // not JSON: shown as it is
  }
  return response.status + ": " + text;
}

// el("div", {class: "x", title: "y"}, "text", child...): an element with attributes and children;
// a string child is a text node, never markup.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value !== null && value !== undefined) node.setAttribute(name, String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function showKeyForm(visible) {
  document.getElementById("key-form").hidden = !visible;
}

// Wires the key form: a submitted key is kept, and start() runs again with it. start() runs once
// now too: without a key on a server that needs none, it simply works.
function withKey(start) {
  const form = document.getElementById("key-form");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const input = document.getElementById("key-input");
    sessionStorage.setItem(KEY_ITEM, input.value.trim());
    input.value = "";
    showKeyForm(false);
    run(start);
  });
  document.getElementById("key-forget").addEventListener("click", () => {
    sessionStorage.removeItem(KEY_ITEM);
    showKeyForm(true);
  });
  run(start);
}

// Runs an async step; an AuthError is already shown as the key form, anything else in #status.
function run(step) {
  step().catch((error) => {
    if (!(error instanceof AuthError)) setStatus(String(error.message || error));
  });
}

function setStatus(text) {
  const status = document.getElementById("status");
  if (status) status.textContent = text;
}

// Attachments of the next message, for what the chosen model takes as /v1/models lists it in
// "modalities": images (image_url parts with a data: URL) and audio (input_audio parts, base64).
"use strict";

const attachments = []; // {kind: "image"|"audio", name, part}

// Shows the inputs the model's modalities allow; drops attachments it cannot take.
function showModalities(modalities) {
  document.getElementById("image-input").hidden = !modalities.includes("image");
  document.getElementById("audio-input").hidden = !modalities.includes("audio");
  const kept = attachments.filter((a) => modalities.includes(a.kind));
  attachments.splice(0, attachments.length, ...kept);
  renderAttachments();
}

function readAsDataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

async function attachImage(file) {
  const url = await readAsDataUrl(file);
  attachments.push({ kind: "image", name: file.name, part: { type: "image_url", image_url: { url } } });
}

async function attachAudio(file) {
  const url = await readAsDataUrl(file);
  const format = file.type === "audio/mpeg" ? "mp3" : "wav";
  const data = url.slice(url.indexOf(",") + 1);
  attachments.push({ kind: "audio", name: file.name, part: { type: "input_audio", input_audio: { data, format } } });
}

function wireAttachments() {
  for (const [id, attach] of [["image", attachImage], ["audio", attachAudio]]) {
    const input = document.getElementById(id);
    input.addEventListener("change", () => run(async () => {
      for (const file of input.files) await attach(file);
      input.value = "";
      renderAttachments();
    }));
  }
}

// The attachments as small previews, each with a button that removes it.
function renderAttachments() {
  const box = document.getElementById("attachments");
  box.replaceChildren(...attachments.map((a, i) => {
    const remove = el("button", { type: "button", class: "quiet", title: "remove" }, "×");
    remove.addEventListener("click", () => {
      attachments.splice(i, 1);
      renderAttachments();
    });
    return el("div", { class: "attachment" }, preview(a), remove);
  }));
}

function preview(attachment) {
  if (attachment.kind === "image") {
    return el("img", { src: attachment.part.image_url.url, alt: attachment.name, class: "thumb" });
  }
  return el("span", {}, "♪ " + attachment.name);
}

// The user message's content: the text alone, or parts (the text, then each attachment).
// Taking the content empties the attachments.
function takeContent(text) {
  if (!attachments.length) return text;
  const parts = text ? [{ type: "text", text }] : [];
  parts.push(...attachments.map((a) => a.part));
  attachments.length = 0;
  renderAttachments();
  return parts;
}

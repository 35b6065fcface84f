// dpmtv page: no framework, no build step, no network beyond this server.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { cards: {}, imageUrl: null };

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value;
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function loadModels() {
  const health = await (await fetch("/healthz")).json();
  $("key-row").hidden = !health.auth_required;
  const response = await fetch("/v1/models", { headers: headers() });
  const body = await response.json();
  if (!response.ok) { showError(body); return; }
  const select = $("model");
  select.innerHTML = "";
  for (const card of body.data) {
    state.cards[card.id] = card;
    const option = document.createElement("option");
    option.value = card.id;
    option.textContent = card.dpmtv.kind === "zero_shot" ? card.id + " (zero-shot, no vector)" : card.id;
    select.appendChild(option);
  }
  showPrivacy();
}

function showPrivacy() {
  const card = state.cards[$("model").value];
  if (!card) return;
  const p = $("privacy");
  p.textContent = card.dpmtv.privacy_statement;
  const g = card.dpmtv.guarantee;
  p.classList.toggle("warn", Boolean(g && (!g.private || !g.secure_noise)));
}

function readImage(file) {
  if (!file || !file.type.startsWith("image/")) { showError({ error: { message: "choose an image file" } }); return; }
  const reader = new FileReader();
  reader.onload = () => {
    state.imageUrl = reader.result;
    $("preview").src = reader.result;
    $("preview").hidden = false;
    $("drop-hint").textContent = file.name;
  };
  reader.readAsDataURL(file);
}

function showError(body) {
  $("error").textContent = (body && body.error && body.error.message) || "request failed";
}

async function ask(event) {
  event.preventDefault();
  $("error").textContent = "";
  $("answer").textContent = "";
  $("latency").textContent = "";
  const content = [{ type: "text", text: $("question").value }];
  if (state.imageUrl) content.push({ type: "image_url", image_url: { url: state.imageUrl } });
  const request = { model: $("model").value, messages: [{ role: "user", content }], temperature: 0 };
  $("ask").disabled = true;
  const started = performance.now();
  try {
    const response = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), body: JSON.stringify(request),
    });
    const body = await response.json();
    if (!response.ok) { showError(body); return; }
    $("answer").textContent = body.choices[0].message.content;
    $("latency").textContent = Math.round(performance.now() - started) + " ms";
  } catch (err) {
    showError({ error: { message: String(err) } });
  } finally {
    $("ask").disabled = false;
  }
}

const drop = $("drop");
drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  readImage(e.dataTransfer.files[0]);
});
$("image").addEventListener("change", (e) => readImage(e.target.files[0]));
$("model").addEventListener("change", showPrivacy);
$("api-key").addEventListener("change", loadModels);
$("ask-form").addEventListener("submit", ask);
loadModels();

// The page of `serve`: POST /search with the form's query, k and risk; show the ranked videos (thumbnail of
// the best moment, its span, the score), the probability that the right video is among them (or "not
// calibrated"), the decision, and the query type in words. No external resource is loaded.
"use strict";

const form = document.getElementById("search-form");
const verdict = document.getElementById("verdict");
const queryType = document.getElementById("query-type");
const results = document.getElementById("results");
const mode = document.getElementById("mode");

function text(tag, className, content) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.textContent = content;
  return node;
}

function percent(p) {
  return p >= 0.995 ? "over 99 %" : p < 0.005 ? "under 1 %" : `${Math.round(100 * p)} %`;
}

function showVerdict(answer) {
  const shown = answer.results.length;
  if (answer.decision === "not calibrated") {
    verdict.className = "uncalibrated";
    verdict.textContent = "Not calibrated: this gallery has no held-out captions, so there is no estimate of how " +
      "likely these videos are to be right. Index it with captions (a val split) to get one.";
  } else {
    const chance = answer.probability === null ? "no estimate for this many videos" :
      `${percent(answer.probability)} chance that the right video is among these ${shown}`;
    if (answer.decision === "answer") {
      verdict.className = "answer";
      verdict.textContent = `Answer: ${chance} (confident enough at risk ${answer.risk}).`;
    } else {
      verdict.className = "rephrase";
      verdict.textContent = `Rephrase: ${chance}, not confident enough at risk ${answer.risk}. ` +
        "Say more about what happens in the moment you want: who, what, where." +
        (answer.note ? ` (${answer.note})` : "");
    }
  }
  verdict.dataset.probability = answer.probability === null ? "" : String(answer.probability);
  const kind = answer.query_type === null ? "Query type not identified" :
    `Query type: ${answer.query_type === "underdetermined" ? "under-determined" : answer.query_type}`;
  queryType.textContent = `${kind}: ${answer.query_type_meaning}.`;
}

function showResults(answer) {
  results.replaceChildren();
  for (const hit of answer.results) {
    const item = document.createElement("li");
    item.dataset.video = hit.video;
    const middle = (hit.moment.start + hit.moment.end) / 2;
    const image = document.createElement("img");
    image.src = `/videos/${encodeURIComponent(hit.video)}/thumbnail?t=${middle.toFixed(1)}`;
    image.alt = `${hit.video} at ${middle.toFixed(1)} s`;
    const about = document.createElement("div");
    about.append(text("div", "video", hit.video),
                 text("div", "moment", `moment ${hit.moment.start.toFixed(1)}-${hit.moment.end.toFixed(1)} s`),
                 text("div", "score", `score ${hit.score.toFixed(3)}`));
    item.append(text("span", "rank", String(hit.rank)), image, about);
    item.tabIndex = 0;
    results.append(item);
  }
}

async function showMode() {
  try {
    const health = await (await fetch("/health")).json();
    const scoring = health.mode === "zero-shot" ? "zero-shot (the encoder alone)" : `trained checkpoint (${health.mode})`;
    mode.textContent = `${health.videos} videos, ${scoring}, ` +
      (health.calibrated ? "calibrated on held-out captions" : "not calibrated");
  } catch (error) {
    mode.textContent = "";
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = {
    query: document.getElementById("query").value,
    k: Number(document.getElementById("k").value),
    risk: Number(document.getElementById("risk").value),
  };
  verdict.className = "";
  verdict.textContent = "Searching...";
  queryType.textContent = "";
  try {
    const response = await fetch("/search", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
    const data = await response.json();
    if (!response.ok) {
      verdict.className = "error";
      verdict.textContent = `Not searched: ${data.error}`;
      results.replaceChildren();
      document.body.dataset.state = "done";
      return;
    }
    const answer = data.answers[0];
    showVerdict(answer);
    showResults(answer);
    document.body.dataset.state = "done";
  } catch (error) {
    verdict.className = "error";
    verdict.textContent = `The service did not answer: ${error}`;
  }
});

showMode();

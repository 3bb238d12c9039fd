// The page of `serve`: POST /search with the form's query, k and risk; show the ranked videos (thumbnail of
// the best moment, its span, the score) and the decision in words. No external resource is loaded.
"use strict";

const form = document.getElementById("search-form");
const verdict = document.getElementById("verdict");
const results = document.getElementById("results");

function text(tag, className, content) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.textContent = content;
  return node;
}

function showVerdict(answer) {
  const confidence = `type ${answer.query_type}, confidence ${answer.confidence.toPrecision(3)}`;
  if (answer.decision === "answer") {
    verdict.className = "answer";
    verdict.textContent = `Answer: confident enough at risk ${answer.risk} (${confidence}).`;
  } else {
    verdict.className = "rephrase";
    verdict.textContent = `Rephrase: not confident enough at risk ${answer.risk} (${confidence}). ` +
      "Say more about what happens in the moment you want: who, what, where." +
      (answer.note ? ` (${answer.note})` : "");
  }
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

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = {
    query: document.getElementById("query").value,
    k: Number(document.getElementById("k").value),
    risk: Number(document.getElementById("risk").value),
  };
  verdict.className = "";
  verdict.textContent = "Searching...";
  try {
    const response = await fetch("/search", {
      method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
    });
    const data = await response.json();
    if (!response.ok) {
      verdict.className = "error";
      verdict.textContent = `Not searched: ${data.error}`;
      results.replaceChildren();
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

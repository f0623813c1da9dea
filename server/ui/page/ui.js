// The operator's page: reads sluiced's figures from /ui/api/ (the browser sends the admin
// token it was given at the login prompt) and keeps the page current. Every text that comes
// from the server goes in as text (textContent), never as markup.
"use strict";

const $ = (selector) => document.querySelector(selector);

function element(name, text, className) {
  const made = document.createElement(name);
  if (text !== undefined && text !== null) {
    made.textContent = String(text);
  }
  if (className) {
    made.className = className;
  }
  return made;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    tr.append(cell instanceof Node ? cell : element("td", cell));
  }
  return tr;
}

// Each source's failure (a refresh, the forms), shown together where a screen reader announces
// them; a source's own success clears its own. Written only when the text changes.
const problems = new Map();
function problem(text, source = "form") {
  if (text) {
    problems.set(source, text);
  } else {
    problems.delete(source);
  }
  const p = $("#problem");
  const shown = [...problems.values()].join(" · ");
  if (p.textContent !== shown) {
    p.textContent = shown;
  }
  p.hidden = shown === "";
}

// GET (or POST `body`) /ui/api/<what>: the parsed JSON, or throws naming what failed.
async function api(what, body) {
  let response;
  try {
    response = await fetch("/ui/api/" + what, body === undefined ? {} : {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch (e) {
    throw new Error(`${what.split("?")[0]}: sluiced did not answer (${e.message})`);
  }
  const text = await response.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch (e) {
    throw new Error(`${what}: HTTP ${response.status}, not JSON`);
  }
  if (!response.ok && !(what === "check" && response.status === 429) && !(what === "health" && response.status === 503)) {
    throw new Error(`${what}: HTTP ${response.status}: ${json.error || text}`);
  }
  return json;
}

// The charts' 15 minutes, kept here: after the first answer only the seconds since are asked
// (a few numbers a rule, not 1,800), and laid after those kept.
const seriesKept = { end: null, fetchedAt: 0, series: new Map() };
const FULL = 900;

// `recent` (an answer of `n` seconds ending at end_ms) merged into `seriesKept`: null when it does
// not join what is kept (a gap, or the server's clock stepped back), so that all is asked. The
// answer must hold the last second kept, which a sample in that same second may have grown.
function mergeSeries(recent, n) {
  const shift = seriesKept.end === null ? -1 : (recent.end_ms - seriesKept.end) / 1000;
  if (!(shift >= 0 && shift < n && Number.isInteger(shift))) {
    return null;
  }
  const zeros = new Array(FULL).fill(0);
  const merged = recent.series.map((s) => {
    const kept = seriesKept.series.get(s.name) || { admitted: zeros, denied: zeros };
    return {
      name: s.name,
      admitted: kept.admitted.slice(shift, shift + FULL - n).concat(s.admitted),
      denied: kept.denied.slice(shift, shift + FULL - n).concat(s.denied),
    };
  });
  return { end_ms: recent.end_ms, seconds: FULL, series: merged, untracked: recent.untracked };
}

async function refreshSeries() {
  const since = Math.ceil((performance.now() - seriesKept.fetchedAt) / 1000) + 2;
  const n = seriesKept.end === null ? FULL : Math.min(FULL, since);
  const fetchedAt = performance.now();
  let window = n === FULL ? await api("series") : mergeSeries(await api(`series?seconds=${n}`), n);
  if (window === null) {
    window = await api("series");
  }
  seriesKept.end = window.end_ms;
  seriesKept.fetchedAt = fetchedAt;
  seriesKept.series = new Map(window.series.map((s) => [s.name, s]));
  renderCharts($("#charts"), window);
  const note = window.series.length === 0 ? "No rule has admitted or denied a request in the last 15 minutes." : "";
  $("#rates-note").textContent = note + (window.untracked > 0 ? ` ${window.untracked} more rule limits were active; the page follows the first 256.` : "");
  $("#updated").textContent = "figures of " + new Date(window.end_ms).toLocaleTimeString();
}

async function refreshHealth() {
  let health;
  try {
    health = await api("health");
  } catch (e) {
    $("#health").textContent = "sluiced unreachable";
    $("#health").className = "badge down";
    throw e;
  }
  const badge = $("#health");
  const status = health.status || "unknown";
  const text = `store ${health.store || ""}: ${status}`;
  if (badge.textContent !== text) {
    badge.textContent = text;
  }
  badge.className = "badge " + (status === "ok" ? "ok" : status === "degraded" ? "degraded" : "down");
  const list = $("#store-list");
  list.replaceChildren();
  for (const [key, value] of Object.entries(health)) {
    list.append(element("dt", key), element("dd", typeof value === "object" ? JSON.stringify(value) : value));
  }
}

async function refreshTop() {
  const by = $("#top-by").value;
  const rule = $("#top-rule").value;
  const top = await api(`top?by=${encodeURIComponent(by)}&n=10` + (rule ? `&rule=${encodeURIComponent(rule)}` : ""));
  const body = $("#top-table tbody");
  body.replaceChildren();
  for (const ruleTop of top.rules || []) {
    for (const key of ruleTop.keys) {
      body.append(row([ruleTop.rule, element("td", key.key, "key"), element("td", key.count, "num"), element("td", ruleTop.bound, "num")]));
    }
  }
  if (body.children.length === 0) {
    const empty = element("td", by === "denied" ? "No key was denied in the last five minutes." : "No key was counted in the last five minutes.");
    empty.colSpan = 4;
    body.append(row([empty]));
  }
}

function describeLimit(limit) {
  let text = `${limit.algorithm || ""} ${limit.limit ?? ""} per ${limit.period || limit.unit || ""}`;
  if (limit.burst !== undefined) {
    text += `, burst ${limit.burst}`;
  }
  return (limit.name ? limit.name + ": " : "") + text.trim();
}

async function refreshRules() {
  const rules = await api("rules");
  const body = $("#rules-table tbody");
  const topRule = $("#top-rule");
  const simulateRule = $("#simulate-rule");
  const chosenTop = topRule.value;
  const chosenSimulate = simulateRule.value;
  body.replaceChildren();
  topRule.replaceChildren(new Option("every rule", ""));
  simulateRule.replaceChildren();
  for (const domain of rules.domains) {
    for (const rule of domain.rules) {
      const limits = element("td");
      for (const limit of rule.limits) {
        limits.append(element("div", describeLimit(limit)));
        topRule.append(new Option(limit.name || rule.path, limit.name || rule.path));
      }
      body.append(row([rule.path, rule.mode, limits]));
      if (rule.limits.some((l) => l.algorithm)) {
        simulateRule.append(new Option(rule.path, rule.path));
      }
    }
  }
  topRule.value = chosenTop;
  if (chosenSimulate) {
    simulateRule.value = chosenSimulate;
  }
  if (!$("#explain-domain").value && rules.domains.length > 0) {
    $("#explain-domain").value = rules.domains[0].domain;
  }
}

// "key=value, key=value" per line into /v1/check's descriptors.
function parseDescriptors(text) {
  return text.split("\n").map((line) => line.trim()).filter((line) => line).map((line) => ({
    entries: line.split(",").map((pair) => pair.trim()).filter((pair) => pair).map((pair) => {
      const equals = pair.indexOf("=");
      return equals < 0 ? { key: pair, value: "" } : { key: pair.slice(0, equals).trim(), value: pair.slice(equals + 1).trim() };
    }),
  }));
}

function renderExplanation(answer) {
  const out = $("#explain-answer");
  out.replaceChildren();
  const explain = answer.explain || {};
  out.append(element("p", answer.allowed ? "admitted" : "denied", "verdict " + (answer.allowed ? "admitted" : "denied")));
  (explain.descriptors || []).forEach((descriptor, index) => {
    const section = element("div", null, "descriptor");
    section.dataset.index = String(index);
    section.append(element("h3", `descriptor ${index}: ${descriptor.entries.map((e) => e.key + "=" + e.value).join(", ")}`));
    section.append(element("p", descriptor.match, "match"));
    const table = element("table");
    table.append(row(["Limit", "Key", "Before", "After", "Verdict"].map((h) => element("th", h))));
    for (const limit of descriptor.limits || []) {
      const decided = explain.decided_by && explain.decided_by.descriptor === index && explain.decided_by.name === limit.name;
      const remaining = (state) => (state ? `${state.remaining} remaining` : "—");
      const tr = row([describeLimit(limit) + (decided ? " (decided the answer)" : ""), element("td", limit.key, "key"), remaining(limit.before), remaining(limit.after), element("td", limit.verdict, "limit-verdict")]);
      table.append(tr);
    }
    if (table.rows.length > 1) {
      section.append(table);
    }
    out.append(section);
  });
  const details = element("details");
  details.append(element("summary", "The answer as JSON"), element("pre", JSON.stringify(answer, null, 2), "raw"));
  out.append(details);
}

async function explain(event) {
  event.preventDefault();
  const request = {
    domain: $("#explain-domain").value.trim(),
    descriptors: parseDescriptors($("#explain-descriptors").value),
    cost: 0,
    explain: true,
  };
  try {
    renderExplanation(await api("check", request));
    problem(null);
  } catch (e) {
    problem(e.message);
  }
}

async function simulate(event) {
  event.preventDefault();
  const rule = $("#simulate-rule").value;
  const burst = $("#simulate-burst").value;
  const picture = $("#simulate-picture");
  let response;
  try {
    response = await fetch(`/ui/api/simulate?rule=${encodeURIComponent(rule)}&burst=${encodeURIComponent(burst)}`);
  } catch (e) {
    problem(`simulate: sluiced did not answer (${e.message})`);
    return;
  }
  if (!response.ok) {
    picture.hidden = true;
    const answer = await response.json().catch(() => ({}));
    problem(`simulate: HTTP ${response.status}: ${answer.error || ""}`);
    return;
  }
  problem(null);
  // As an image, from a blob: an SVG shown by <img> runs no script, whatever it holds.
  if (picture.src) {
    URL.revokeObjectURL(picture.src);
  }
  picture.src = URL.createObjectURL(await response.blob());
  picture.alt = `${rule}'s limits against a burst of ${burst} requests: admitted above, denied below, over time`;
  picture.hidden = false;
}

// Runs `refresh` now and then `ms` after each run ends, showing a failure where it is read.
function every(ms, refresh) {
  const run = async () => {
    try {
      await refresh();
      problem(null, refresh.name);
    } catch (e) {
      problem(e.message, refresh.name);
    } finally {
      setTimeout(run, ms);
    }
  };
  run();
}

document.addEventListener("DOMContentLoaded", () => {
  $("#explain-form").addEventListener("submit", explain);
  $("#simulate-form").addEventListener("submit", simulate);
  $("#top-form").addEventListener("change", () => refreshTop().catch((e) => problem(e.message, "refreshTop")));
  every(1000, refreshSeries);
  every(2000, refreshHealth);
  every(3000, refreshTop);
  every(30000, refreshRules);
});

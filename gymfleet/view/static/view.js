// gymfleet view: renders the viewer's JSON API. Every text from a store goes into the page through
// textContent or a text node (h() below), never as HTML; links and images only ever point at this
// origin (sameOrigin()), so a trajectory cannot add a script, a handler or a javascript: link.
"use strict";
(() => {
  const app = document.getElementById("app");
  const crumbs = document.getElementById("crumbs");
  const live = document.getElementById("live");
  const POLL_MS = 2000;
  const TOKENS_PER_CHUNK = 4000;

  function sameOrigin(value) {
    const url = new URL(String(value), location.origin);
    return url.origin === location.origin ? url.pathname + url.search : "#";
  }

  function h(tag, attrs, ...kids) {
    const svg = ["svg", "polyline", "line", "text", "circle", "g", "title"].includes(tag);
    const e = svg ? document.createElementNS("http://www.w3.org/2000/svg", tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.setAttribute("class", v);
      else if (k === "href" || k === "src") e.setAttribute(k, sameOrigin(v));
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "vars") for (const [name, val] of Object.entries(v)) e.style.setProperty(name, String(val));
      else e.setAttribute(k, String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return e;
  }

  function fill(target, ...kids) {  // nested lists flattened, strings as text nodes
    target.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false)
      .map((k) => (k instanceof Node ? k : document.createTextNode(String(k)))));
  }
  const show = (...kids) => fill(app, ...kids);

  async function api(path) {
    const response = await fetch(path, { headers: { accept: "application/json" } });
    const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
    if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
    return body;
  }

  const enc = encodeURIComponent;
  const runUrl = (run, page, query) => `/run/${enc(run)}${page ? "/" + page : ""}${query ? "?" + new URLSearchParams(query) : ""}`;
  const apiUrl = (run, page, query) => `/api/runs/${enc(run)}${page ? "/" + page : ""}${query ? "?" + new URLSearchParams(query) : ""}`;
  const fmt = (x, digits = 3) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));
  const when = (iso) => (iso ? new Date(iso).toLocaleString() : "–");
  const secs = (s) => (s < 120 ? `${s.toFixed(0)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`);
  const byStatus = (m) => Object.entries(m || {}).sort().map(([k, v]) => h("span", { class: `status-${k}` }, `${k}=${v} `));
  const card = (label, value) => h("div", { class: "card" }, h("b", {}, value), label);
  const status = (s) => h("span", { class: `status-${s}` }, s);

  function setCrumbs(run, here) {
    fill(crumbs, h("a", { href: "/" }, "runs"),
      run ? [" / ", h("a", { href: runUrl(run) }, run)] : null, here ? [" / ", h("span", {}, here)] : null);
  }

  function fail(error) {
    show(h("p", { class: "error" }, String(error.message || error)));
  }

  function every(ms, fn) {
    let stopped = false;
    const tick = async () => { if (stopped) return; try { await fn(); } catch (e) { live.textContent = `live: ${e.message}`; } if (!stopped) setTimeout(tick, ms); };
    setTimeout(tick, ms);
    return () => { stopped = true; };
  }

  // ---- runs -------------------------------------------------------------------------------
  async function runsPage() {
    setCrumbs(null, null);
    const draw = async () => {
      const data = await api("/api/runs");
      const rows = data.runs.map((r) => h("tr", {},
        h("td", { class: "id" }, h("a", { href: runUrl(r.run_id) }, r.run_id)), h("td", {}, status(r.status)),
        h("td", {}, when(r.created_at), r.n_starts > 1 ? ` ×${r.n_starts}` : ""), h("td", { class: "num" }, secs(r.wall_s)),
        h("td", {}, byStatus(r.by_status)), h("td", { class: "num" }, fmt(r.mean_reward)),
        h("td", { class: "num" }, `${r.n_groups_complete}/${r.n_groups}`), h("td", { class: "num" }, r.n_in_flight),
        h("td", { class: "num" }, r.learner_steps),
        h("td", {}, r.report_dir ? h("a", { href: runUrl(r.run_id), title: r.report_dir }, "report") : h("span", { class: "muted" }, "no report"),
          " · ", h("a", { href: runUrl(r.run_id, "trajectories") }, "rollouts"), " · ", h("a", { href: runUrl(r.run_id, "groups") }, "groups")),
        h("td", { class: "id muted" }, r.store)));
      show(h("h1", {}, "Runs"),
        data.errors.map((e) => h("p", { class: "error" }, e)),
        rows.length ? h("table", { id: "runs" }, h("thead", {}, h("tr", {}, ["run", "status", "started", "wall", "rollouts",
          "mean reward", "groups", "in flight", "learner steps", "", "store"].map((c) => h("th", {}, c)))), h("tbody", {}, rows))
          : h("p", { class: "muted" }, "no runs in this store yet"));
    };
    await draw();
    live.textContent = "refreshing every 5 s"; every(5000, draw);
  }

  // ---- one run ----------------------------------------------------------------------------
  function rewardChart(points) {
    const tasks = [...new Set(points.map((p) => p.task))];
    const versions = points.map((p) => p.version), rewards = points.map((p) => p.mean_reward);
    if (!points.length) return h("p", { class: "muted" }, "no scored rollouts yet");
    const [v0, v1] = [Math.min(...versions), Math.max(...versions, Math.min(...versions) + 1)];
    const [r0, r1] = [Math.min(0, ...rewards), Math.max(1, ...rewards)];
    const W = 520, H = 220, P = 34;
    const x = (v) => P + ((v - v0) / (v1 - v0)) * (W - 2 * P), y = (r) => H - P - ((r - r0) / (r1 - r0)) * (H - 2 * P);
    const hues = tasks.map((_, i) => `hsl(${(i * 137) % 360},65%,42%)`);
    return h("svg", { class: "chart", width: W, height: H, viewBox: `0 0 ${W} ${H}` },
      h("line", { x1: P, y1: H - P, x2: W - P, y2: H - P, stroke: "#999" }), h("line", { x1: P, y1: P, x2: P, y2: H - P, stroke: "#999" }),
      h("text", { x: P, y: H - 8, "font-size": 11 }, `policy version ${v0}`), h("text", { x: W - P - 20, y: H - 8, "font-size": 11 }, v1),
      h("text", { x: 2, y: y(r1) + 4, "font-size": 11 }, fmt(r1, 1)), h("text", { x: 2, y: y(r0), "font-size": 11 }, fmt(r0, 1)),
      tasks.map((t, i) => {
        const mine = points.filter((p) => p.task === t);
        return h("g", {}, h("polyline", { fill: "none", stroke: hues[i], "stroke-width": 2, points: mine.map((p) => `${x(p.version)},${y(p.mean_reward)}`).join(" ") }),
          mine.map((p) => h("circle", { cx: x(p.version), cy: y(p.mean_reward), r: 3, fill: hues[i] }, h("title", {}, `${t} v${p.version}: ${fmt(p.mean_reward)} (n=${p.n})`))),
          h("text", { x: W - P - 140, y: P + 14 * i, "font-size": 11, fill: hues[i] }, t));
      }));
  }

  async function runPage(run) {
    setCrumbs(run, null);
    const draw = async () => {
      const d = await api(apiUrl(run));
      const r = d.run;
      const versions = [...new Set(d.rewards.map((p) => p.version))].sort((a, b) => a - b);
      const cell = (t, v) => d.rewards.find((p) => p.task === t && p.version === v);
      show(
        h("h1", {}, run), h("p", {}, h("a", { href: runUrl(run, "trajectories") }, "trajectories"), " · ",
          h("a", { href: runUrl(run, "groups") }, "groups"), h("span", { class: "muted" }, `  store ${d.store}`)),
        h("div", { class: "cards", id: "cards" }, card("status", status(r.status)), card("rollouts", Object.values(r.by_status).reduce((a, b) => a + b, 0)),
          card("mean reward (ok, truncated)", fmt(r.mean_reward)), card("groups complete", `${r.n_groups_complete}/${r.n_groups}`),
          card("in flight", r.n_in_flight), card("newest policy version", d.newest_version), card("learner steps", d.learner_steps),
          card("wall time", secs(r.wall_s))),
        h("div", {}, byStatus(r.by_status)),
        h("h2", {}, "Reward per task over policy versions"), rewardChart(d.rewards),
        h("table", { id: "rewards" }, h("thead", {}, h("tr", {}, h("th", {}, "task"), versions.map((v) => h("th", { class: "num" }, `v${v}`)))),
          h("tbody", {}, [...new Set(d.rewards.map((p) => p.task))].map((t) => h("tr", {}, h("td", {}, h("a", { href: runUrl(run, "trajectories", { task: t }) }, t)),
            versions.map((v) => { const p = cell(t, v); return h("td", { class: "num", title: p ? `n=${p.n}` : "" }, p ? fmt(p.mean_reward) : ""); }))))),
        h("h2", {}, "In flight"), Object.keys(d.in_flight_by_task).length
          ? h("table", {}, h("tbody", {}, Object.entries(d.in_flight_by_task).map(([t, n]) => h("tr", {}, h("td", {}, t), h("td", { class: "num" }, n)))))
          : h("p", { class: "muted" }, "nothing in flight"),
        h("h2", {}, "Staleness: rollouts by versions behind the newest (oldest token)"),
        h("table", {}, h("tbody", {}, Object.entries(d.version_lag).map(([lag, n]) => h("tr", {}, h("td", {}, `${lag} behind`), h("td", { class: "num" }, n))))),
        h("h2", {}, `Learner: ${d.learner_steps} steps`), d.steps.length ? h("table", { id: "steps" },
          h("thead", {}, h("tr", {}, ["step", "loss", "mean reward", "version", "groups", "tokens", "masked", "staleness of samples"].map((c) => h("th", {}, c)))),
          h("tbody", {}, d.steps.slice(-15).reverse().map((s) => h("tr", {}, h("td", {}, s.step), h("td", { class: "num" }, fmt(s.loss, 4)), h("td", { class: "num" }, fmt(s.mean_reward)),
            h("td", { class: "num" }, s.version), h("td", { class: "num" }, s.n_groups), h("td", { class: "num" }, s.n_tokens), h("td", { class: "num" }, fmt(s.masked_fraction, 2)),
            h("td", {}, (s.staleness || []).join(" ")))))) : h("p", { class: "muted" }, `no learner.jsonl in ${d.report_dir}`),
        h("h2", {}, "Report"), d.report.length ? h("div", { class: "shots", id: "report" }, d.report.map((f) => {
          const url = apiUrl(run, "file", { root: f.root, path: f.path });
          return f.path.endsWith(".png") ? h("figure", {}, h("a", { href: url }, h("img", { src: url, alt: f.path })), h("figcaption", {}, f.path))
            : h("a", { href: url }, f.path);
        })) : h("p", { class: "muted" }, `no report yet in ${d.report_dir}`));
      return r.status;
    };
    const first = await draw();
    if (first === "running") { live.textContent = "live"; live.className = "on"; every(3000, draw); }
  }

  // ---- trajectories -----------------------------------------------------------------------
  const FILTERS = ["task", "status", "min_reward", "max_reward", "version", "text"];
  const STATUSES = ["", "ok", "truncated", "policy_error", "env_error", "infra_error", "aborted"];

  function trajRow(run, t) {
    return h("tr", { "data-rollout": t.rollout_id },
      h("td", { class: "id" }, h("a", { href: runUrl(run, "trajectory", { id: t.rollout_id }) }, t.rollout_id)),
      h("td", {}, t.task), h("td", { class: "id" }, t.instance_id), h("td", {}, status(t.status)),
      h("td", { class: "num" }, fmt(t.reward)), h("td", { class: "num" }, `${t.n_generated_tokens}/${t.n_tokens}`),
      h("td", { class: "num" }, t.policy_version_min === t.policy_version_max ? t.policy_version_max : `${t.policy_version_min}–${t.policy_version_max}`),
      h("td", {}, when(t.created_at)), h("td", { class: "muted" }, t.reason));
  }

  async function trajectoriesPage(run, params) {
    setCrumbs(run, "trajectories");
    const filters = Object.fromEntries(FILTERS.filter((k) => params.get(k)).map((k) => [k, params.get(k)]));
    const input = (name, type = "text") => h("label", {}, name.replace("_", " "), h("input", { name, type, value: filters[name] || "", step: type === "number" ? "any" : null }));
    const form = h("form", { class: "filters", id: "filters" }, input("task"),
      h("label", {}, "status", h("select", { name: "status" }, STATUSES.map((s) => h("option", { value: s, selected: filters.status === s ? "" : null }, s || "any")))),
      input("min_reward", "number"), input("max_reward", "number"), input("version", "number"), input("text", "search"),
      h("button", { type: "submit" }, "filter"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const q = new URLSearchParams([...new FormData(form)].filter(([, v]) => v !== ""));
      location.search = q.toString();
    });
    const body = h("tbody", { id: "rows" });
    const more = h("button", { class: "more" }, "older");
    const count = h("span", { class: "muted" });
    show(h("h1", {}, `Trajectories of ${run}`), form, count, h("table", {}, h("thead", {}, h("tr", {},
      ["rollout", "task", "instance", "status", "reward", "tokens (gen/all)", "policy version", "written", "reason"].map((c) => h("th", {}, c)))), body), more);
    let newest = null, next = null, shown = 0;
    const load = async () => {
      const page = await api(apiUrl(run, "trajectories", { ...filters, ...(next ? { before: next } : {}) }));
      if (newest === null) newest = page.rows.length ? page.rows[0].cursor : "";
      page.rows.forEach((t) => body.append(trajRow(run, t)));
      shown += page.rows.length; next = page.next; more.hidden = !next;
      count.textContent = `${shown} shown`;
    };
    more.addEventListener("click", () => load().catch(fail));
    await load();
    live.textContent = "following: new rollouts appear at the top"; live.className = "on";
    every(POLL_MS, async () => {
      const page = await api(apiUrl(run, "trajectories", { ...filters, ...(newest ? { after: newest } : {}), limit: 200 }));
      for (const t of page.rows) { body.prepend(trajRow(run, t)); body.firstChild.classList.add("fresh"); newest = t.cursor; shown++; }
      count.textContent = `${shown} shown`;
    });
  }

  // ---- groups -----------------------------------------------------------------------------
  const sampleName = (t) => `sample ${(t.sample_id || t.rollout_id).split("/").pop()}`;
  const adv = (a) => (a === null || a === undefined ? "–" : (a >= 0 ? "+" : "") + a.toFixed(2));

  function groupBlock(run, g) {
    return h("div", { class: "group" }, h("h2", {}, h("a", { href: runUrl(run, "group", { id: g.group_id }) }, g.instance_id),
      h("span", { class: "muted" }, `  ${g.task} · ${g.n_done}/${g.size} done${g.consumed ? " · trained" : ""}`)),
      h("table", {}, h("tbody", {},
        h("tr", {}, h("th", {}, "sample"), g.samples.map((s) => h("td", { class: "id" }, h("a", { href: runUrl(run, "trajectory", { id: s.trajectory.rollout_id }), title: s.trajectory.rollout_id }, sampleName(s.trajectory))))),
        h("tr", {}, h("th", {}, "reward"), g.samples.map((s) => h("td", { class: "num" }, fmt(s.trajectory.reward)))),
        h("tr", {}, h("th", {}, "advantage"), g.samples.map((s) => h("td", { class: "num adv" }, adv(s.advantage)))),
        h("tr", {}, h("th", {}, "status"), g.samples.map((s) => h("td", {}, status(s.trajectory.status)))),
        h("tr", {}, h("th", {}, "policy version"), g.samples.map((s) => h("td", { class: "num" }, s.trajectory.policy_version_max))))));
  }

  async function groupsPage(run, params) {
    setCrumbs(run, "groups");
    const task = params.get("task") || "";
    const list = h("div", { id: "groups" }), more = h("button", { class: "more" }, "older");
    show(h("h1", {}, `Groups of ${run}`), h("p", { class: "muted" },
      "advantage: (r − mean) / (std + 1e-6) over the samples that train, as the learner computes it"), list, more);
    let next = null;
    const load = async () => {
      const page = await api(apiUrl(run, "groups", { ...(task ? { task } : {}), ...(next ? { before: next } : {}) }));
      page.groups.forEach((g) => list.append(groupBlock(run, g)));
      next = page.next; more.hidden = !next;
    };
    more.addEventListener("click", () => load().catch(fail));
    await load();
  }

  function turns(messages) {
    return messages.map((m) => h("div", { class: "turn" }, h("div", { class: `role role-${m.role}` }, m.role), h("pre", { class: "text" }, m.content)));
  }

  async function groupPage(run, params) {
    setCrumbs(run, "group");
    const d = await api(apiUrl(run, "group", { id: params.get("id") || "" }));
    const g = d.group;
    show(h("h1", {}, g.instance_id), h("p", { class: "muted id" }, `${g.group_id} · ${g.task} · ${g.env_id}`),
      h("div", { class: "side", id: "samples" }, g.samples.map((s) => h("div", { class: "sample" },
        h("p", {}, h("a", { href: runUrl(run, "trajectory", { id: s.trajectory.rollout_id }), title: s.trajectory.rollout_id }, sampleName(s.trajectory))),
        h("p", {}, "reward ", h("b", {}, fmt(s.trajectory.reward)), " · advantage ", h("b", { class: "adv" }, adv(s.advantage)), " · ", status(s.trajectory.status)),
        turns(d.messages[s.trajectory.rollout_id] || [])))));
  }

  // ---- one trajectory ---------------------------------------------------------------------
  function tokens(d) {
    const box = h("div", { class: "tokens", id: "tokens" });
    let done = 0;
    const more = h("button", { class: "more" }, "more tokens");
    const chunk = () => {
      const end = Math.min(d.token_ids.length, done + TOKENS_PER_CHUNK);
      for (let i = done; i < end; i++) {
        const mask = d.loss_mask[i], v = d.versions[i], lp = d.logprobs[i];
        const text = d.pieces ? d.pieces[i] : `⟨${d.token_ids[i]}⟩`;
        const tip = `#${i} id ${d.token_ids[i]} · loss mask ${mask}` + (mask ? ` · policy v${v} · logprob ${lp.toFixed(3)} (p=${Math.exp(lp).toFixed(2)})` : " · not trained");
        box.append(h("span", { class: `tok m${mask}`, title: tip, "data-mask": mask, "data-version": v,
          vars: mask ? { "--h": (200 + v * 47) % 360, "border-bottom-color": `rgba(179,38,30,${(1 - Math.exp(lp)).toFixed(2)})` } : null }, text));
      }
      done = end; more.hidden = done >= d.token_ids.length;
    };
    more.addEventListener("click", chunk);
    chunk();
    return [h("p", { class: "legend" }, h("span", { class: "tok m0" }, "prompt / env: loss mask 0"), h("span", { class: "tok m1" }, "generated: mask 1, hue = policy version"),
      "red underline: low probability (1 − p); hover a token for its id, version, logprob", d.pieces_note ? h("span", { class: "muted" }, ` (${d.pieces_note})`) : null), box, more];
  }

  function artifactsBlock(run, a) {
    const shots = a.files.filter((f) => f.kind !== "text");
    const texts = a.files.filter((f) => f.kind === "text");
    const fileUrl = (f) => apiUrl(run, "file", { root: f.ref.root, path: f.ref.path });
    return [
      shots.length ? [h("h2", {}, "Screenshots and renders"), h("div", { class: "shots", id: "shots" }, shots.map((f) => f.ref
        ? h("figure", {}, h("img", { src: fileUrl(f), alt: f.label, class: f.kind }), h("figcaption", { class: f.later ? "error" : null },
          `${f.kind}: ${f.label}`, f.later ? " (written after this rollout was stored: a later rollout of the same instance replaced it)" : ""))
        : h("figure", {}, h("figcaption", {}, `${f.label}: outside the run's folders, not served (${f.path})`))))] : null,
      texts.map((f) => h("p", {}, f.ref ? h("a", { href: fileUrl(f) }, f.label) : `${f.label}: not served (${f.path})`)),
      a.patch !== null ? [h("h2", {}, "Patch"), h("pre", { class: "text", id: "patch" }, a.patch || "(empty)")] : null,
      Object.keys(a.grader).length ? [h("h2", {}, "Grader"), h("pre", { class: "text", id: "grader" }, JSON.stringify(a.grader, null, 2))] : null,
      Object.keys(a.infra).length ? [h("h2", {}, "Infrastructure"), h("pre", { class: "text" }, JSON.stringify(a.infra, null, 2))] : null];
  }

  async function trajectoryPage(run, params) {
    setCrumbs(run, "trajectory");
    const d = await api(apiUrl(run, "trajectory", { id: params.get("id") || "" }));
    const s = d.summary;
    const failed = !["ok", "truncated"].includes(s.status);
    show(h("h1", { class: "id" }, s.rollout_id),
      h("p", {}, h("a", { href: runUrl(run, "group", { id: s.group_id }) }, "its group"), h("span", { class: "muted" }, `  ${s.task} · ${s.env_id} · ${s.instance_id}`)),
      h("div", { class: "cards" }, card("status", status(s.status)), card("reward", fmt(s.reward)), card("tokens generated / all", `${s.n_generated_tokens}/${s.n_tokens}`),
        card("policy versions", `${s.policy_version_min}–${s.policy_version_max}`), card("turns", d.metrics.n_turns ?? "–"),
        card("total time", d.timings.total_s !== undefined ? secs(d.timings.total_s) : "–")),
      s.reason ? h("p", { class: failed ? "error" : "muted", id: "reason" }, `${failed ? s.status + ": " : ""}${s.reason}`) : null,
      h("h2", {}, "Turns"), h("div", { id: "turns" }, turns(d.messages)),
      h("h2", {}, "Tokens"), tokens(d),
      artifactsBlock(run, d.artifacts),
      h("h2", {}, "Metrics"), h("pre", { class: "text" }, JSON.stringify(d.metrics, null, 2)),
      h("h2", {}, "Timings (s)"), h("pre", { class: "text" }, JSON.stringify(d.timings, null, 2)));
  }

  // ---- routing ----------------------------------------------------------------------------
  const match = location.pathname.match(/^\/run\/([^/]+)(?:\/(trajectories|groups|group|trajectory))?\/?$/);
  const params = new URLSearchParams(location.search);
  const pages = { undefined: runPage, trajectories: trajectoriesPage, groups: groupsPage, group: groupPage, trajectory: trajectoryPage };
  const go = match ? pages[match[2]](decodeURIComponent(match[1]), params) : runsPage();
  go.then(() => document.body.setAttribute("data-ready", "1"), (e) => { fail(e); document.body.setAttribute("data-ready", "error"); });
})();

/**
 * The org's runs, newest first, kept current by polling `GET /v1/runs` (the
 * API has no org-wide live feed; a run's own page follows its WebSocket), and
 * a form to start a run with a play's input described by its JSON Schema.
 */
import type { PlayList, RunSummary } from "../client";
import { formatTime, h, replaceChildren } from "./dom";
import { readNewestRuns } from "./newest-runs";
import type { Page, Shell } from "./shell";

/** How often the list is read again while it is shown. */
const POLL_INTERVAL_MS = 2_000;
/** Runs shown at first, and how many more each "Show more" adds. */
const PAGE_SIZE = 50;

/** The runs page. */
export function runsPage(shell: Shell): Page {
  let shown = PAGE_SIZE;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let disposed = false;

  const liveDot = h("span", { class: "live-dot off", title: "updating" });
  const count = h("span", { class: "muted", "data-testid": "runs-count" });
  const tbody = h("tbody", { "data-testid": "runs-body" });
  const more = h(
    "button",
    {
      type: "button",
      hidden: true,
      onclick: () => {
        shown += PAGE_SIZE;
        void refresh();
      },
    },
    "Show more",
  );

  async function refresh(): Promise<void> {
    clearTimeout(timer);
    try {
      const page = await readNewestRuns((options) => shell.client.list(options), shown);
      if (disposed) return;
      renderRuns(page.runs);
      more.hidden = !page.more;
      liveDot.className = "live-dot";
    } catch (error) {
      if (disposed) return;
      liveDot.className = "live-dot off";
      shell.report(error);
    }
    if (!disposed) timer = setTimeout(() => void refresh(), POLL_INTERVAL_MS);
  }

  function renderRuns(runs: RunSummary[]): void {
    replaceChildren(count, `${runs.length} shown`);
    if (runs.length === 0) {
      replaceChildren(
        tbody,
        h(
          "tr",
          {},
          h("td", { colspan: 5, class: "muted" }, "No runs yet. Start one below, with the CLI (npx troupe run) or POST /v1/runs."),
        ),
      );
      return;
    }
    replaceChildren(
      tbody,
      runs.map((run) =>
        h(
          "tr",
          { "data-run-id": run.runId, "data-status": run.status },
          h("td", {}, h("span", { class: `badge ${run.status}` }, run.status)),
          h("td", {}, run.play),
          h("td", { class: "mono" }, h("a", { href: `#/runs/${run.runId}` }, run.runId)),
          h(
            "td",
            { class: "mono" },
            run.parentRunId ? h("a", { href: `#/runs/${run.parentRunId}` }, shortId(run.parentRunId)) : h("span", { class: "muted" }, "–"),
          ),
          h("td", {}, formatTime(run.createdAt)),
        ),
      ),
    );
  }

  const element = h(
    "div",
    {},
    h(
      "div",
      { class: "card" },
      h("div", { class: "row" }, h("h1", {}, "Runs"), h("span", { class: "spacer" }), liveDot, count),
      h(
        "div",
        { class: "table-scroll" },
        h(
          "table",
          { "data-testid": "runs-table" },
          h(
            "thead",
            {},
            h("tr", {}, h("th", {}, "Status"), h("th", {}, "Play"), h("th", {}, "Run"), h("th", {}, "Parent"), h("th", {}, "Started")),
          ),
          tbody,
        ),
      ),
      h("div", { class: "row", style: "margin-top: 10px" }, more),
    ),
    startRunCard(shell),
  );

  void refresh();
  return {
    element,
    dispose() {
      disposed = true;
      clearTimeout(timer);
    },
  };
}

function shortId(runId: string): string {
  return runId.length > 14 ? `${runId.slice(0, 12)}…` : runId;
}

/** A play as `GET /v1/plays` describes it. */
type ListedPlay = PlayList["plays"][number] & { input?: unknown; datasets?: string[] };

/** Starts a run: a play, its input as JSON (the play's JSON Schema shown beside it). */
function startRunCard(shell: Shell): HTMLElement {
  const select = h("select", { name: "play", "data-testid": "start-play" });
  const input = h("textarea", {
    name: "input",
    rows: 5,
    spellcheck: false,
    "data-testid": "start-input",
    placeholder: '{ "rows": [ { "id": "1", "name": "Ada Lovelace", "domain": "example.com" } ] }',
  });
  const schema = h("pre", { class: "json" });
  const about = h("p", { class: "muted" });
  const submit = h("button", { type: "submit", class: "primary", "data-testid": "start-submit" }, "Start run");
  let plays: ListedPlay[] = [];

  function describe(): void {
    const play = plays.find((p) => p.name === select.value);
    replaceChildren(about, play ? `${play.description}${play.datasets?.length ? ` Writes: ${play.datasets.join(", ")}.` : ""}` : "");
    replaceChildren(schema, play?.input === undefined ? "" : JSON.stringify(play.input, null, 2));
  }

  shell.client.plays().then(
    (answer) => {
      plays = answer.plays as ListedPlay[];
      replaceChildren(
        select,
        plays.map((p) => h("option", { value: p.name }, p.name)),
      );
      describe();
    },
    (error) => shell.report(error),
  );
  select.addEventListener("change", describe);

  const form = h(
    "form",
    {
      onsubmit: async (event: Event) => {
        event.preventDefault();
        let body: unknown;
        try {
          body = JSON.parse(input.value || "{}");
        } catch (error) {
          shell.report(new Error(`the input is not JSON: ${error instanceof Error ? error.message : String(error)}`));
          return;
        }
        submit.disabled = true;
        try {
          const started = await shell.client.submit({ play: select.value, input: body });
          shell.navigate(`#/runs/${started.runId}`);
        } catch (error) {
          shell.report(error);
        } finally {
          submit.disabled = false;
        }
      },
    },
    h("div", { class: "row" }, h("label", {}, "Play", select), h("span", { class: "spacer" })),
    about,
    h("label", {}, "Input (JSON)", input),
    h("details", {}, h("summary", { class: "muted" }, "Input schema (JSON Schema)"), schema),
    h("div", { class: "row", style: "margin-top: 10px" }, submit),
  );
  return h("div", { class: "card" }, h("h2", {}, "Start a run"), form);
}

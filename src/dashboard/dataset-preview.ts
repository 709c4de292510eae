/**
 * A paged preview of a run's datasets: one tab per dataset, a page of rows
 * at a time, read through the client's row iterator (so a page is fetched
 * only when it is first shown; pages already seen are kept for "Previous").
 */
import type { TroupeClient } from "../client";
import { cellText, h, replaceChildren } from "./dom";

type Row = Record<string, unknown>;

/** A dataset shown empty is read again at most this often while its run makes progress. */
const EMPTY_REREAD_MS = 5_000;

/** Columns every row has, shown after the row's own fields. */
const META_COLUMNS = ["_key", "_status", "_error"];

/** The rows of one dataset seen so far, and the iterator that reads more. */
class DatasetPages {
  readonly pages: Row[][] = [];
  #iterator: AsyncIterator<Row>;
  /** The first row of the next page, read ahead to know whether there is one. */
  #next: IteratorResult<Row> | null = null;

  constructor(
    rows: AsyncIterable<Row>,
    readonly pageSize: number,
  ) {
    this.#iterator = rows[Symbol.asyncIterator]();
  }

  /** Page `index` (0-based), reading it if it was not read yet; null past the end. */
  async page(index: number): Promise<Row[] | null> {
    while (this.pages.length <= index) {
      if (this.#next?.done) return null;
      const page: Row[] = [];
      let item = this.#next ?? (await this.#iterator.next());
      while (!item.done) {
        page.push(item.value);
        if (page.length === this.pageSize) break;
        item = await this.#iterator.next();
      }
      // One row ahead tells whether another page exists (and starts reading it).
      this.#next = item.done ? item : await this.#iterator.next();
      if (page.length === 0) return null;
      this.pages.push(page);
    }
    return this.pages[index]!;
  }

  /** Whether a page follows page `index`. */
  hasAfter(index: number): boolean {
    return index + 1 < this.pages.length || (this.#next !== null && !this.#next.done);
  }

  close(): void {
    // Ends the client's generator (after the read in progress, if one is).
    void this.#iterator.return?.();
  }
}

/** The preview element of one run; `setDatasets` as the run's datasets become known. */
export class DatasetPreview {
  readonly element: HTMLElement;
  readonly #client: TroupeClient;
  readonly #runId: string;
  readonly #pageSize: number;
  readonly #onError: (error: unknown) => void;
  #datasets: string[] = [];
  #selected: string | null = null;
  #pages: DatasetPages | null = null;
  #index = 0;
  /** The shown dataset had no rows when last read, and when that read was asked (see {@link refreshIfEmpty}). */
  #empty = false;
  #emptyReadAt = 0;
  #tabs = h("div", { class: "tabs", role: "tablist" });
  #body = h("div", { class: "table-scroll" });
  #position = h("span", { class: "muted", "data-testid": "dataset-position" });
  #prev = h("button", { type: "button", "data-testid": "dataset-prev", onclick: () => void this.#show(this.#index - 1) }, "← Previous");
  #nextButton = h("button", { type: "button", "data-testid": "dataset-next", onclick: () => void this.#show(this.#index + 1) }, "Next →");
  #reload = h("button", { type: "button", "data-testid": "dataset-reload", onclick: () => this.reload() }, "Reload");

  constructor(options: { client: TroupeClient; runId: string; pageSize?: number; onError(error: unknown): void }) {
    this.#client = options.client;
    this.#runId = options.runId;
    this.#pageSize = options.pageSize ?? 10;
    this.#onError = options.onError;
    this.element = h(
      "div",
      { class: "card", "data-testid": "dataset-preview" },
      h("div", { class: "row" }, h("h2", {}, "Datasets"), h("span", { class: "spacer" }), this.#reload),
      this.#tabs,
      this.#body,
      h("div", { class: "row", style: "margin-top: 10px" }, this.#prev, this.#nextButton, this.#position),
    );
    this.#renderEmpty("No dataset yet: the run has not started a map.");
  }

  /** The run's datasets (declared by its play, or started maps); the first is shown. */
  setDatasets(names: readonly string[]): void {
    if (names.length === this.#datasets.length && names.every((n, i) => n === this.#datasets[i])) return;
    this.#datasets = [...names];
    replaceChildren(
      this.#tabs,
      this.#datasets.map((name) =>
        h(
          "button",
          {
            type: "button",
            role: "tab",
            "data-dataset": name,
            "aria-selected": String(name === this.#selected),
            onclick: () => this.#select(name),
          },
          name,
        ),
      ),
    );
    if (this.#selected === null && this.#datasets.length) this.#select(this.#datasets[0]!);
  }

  /** Reads the shown dataset again from the server, staying on the same page. */
  reload(): void {
    this.#select(this.#selected, this.#index);
  }

  /**
   * Reads the shown dataset again if it had no rows, at most every few seconds: a run opened before its map started
   * shows the rows once there are some (a play that then waits for hours would show none until it ended).
   */
  refreshIfEmpty(now = Date.now()): void {
    if (!this.#empty || now - this.#emptyReadAt < EMPTY_REREAD_MS) return;
    this.reload();
  }

  dispose(): void {
    this.#pages?.close();
  }

  #select(name: string | null, index = 0): void {
    if (name === null) return;
    this.#pages?.close();
    this.#selected = name;
    for (const tab of this.#tabs.querySelectorAll("button")) tab.setAttribute("aria-selected", String(tab.dataset.dataset === name));
    this.#pages = new DatasetPages(this.#client.rows(this.#runId, name, { pageSize: this.#pageSize }), this.#pageSize);
    this.#emptyReadAt = Date.now();
    void this.#show(index);
  }

  async #show(index: number): Promise<void> {
    const pages = this.#pages;
    if (!pages || index < 0) return;
    this.#prev.disabled = this.#nextButton.disabled = true;
    try {
      const rows = await pages.page(index);
      if (pages !== this.#pages) return;
      if (rows === null) {
        if (index === 0) {
          this.#renderEmpty("No rows yet.");
          this.#empty = true;
        }
        this.#nextButton.disabled = true;
        this.#prev.disabled = this.#index === 0;
        return;
      }
      this.#index = index;
      this.#empty = false;
      this.#renderRows(rows);
      const first = index * pages.pageSize + 1;
      replaceChildren(this.#position, `rows ${first}–${first + rows.length - 1}`);
      this.#prev.disabled = index === 0;
      this.#nextButton.disabled = !pages.hasAfter(index);
    } catch (error) {
      if (pages !== this.#pages) return;
      this.#renderEmpty("The rows could not be read.");
      this.#onError(error);
    }
  }

  #renderEmpty(message: string): void {
    replaceChildren(this.#body, h("p", { class: "muted" }, message));
    replaceChildren(this.#position);
    this.#prev.disabled = this.#nextButton.disabled = true;
  }

  #renderRows(rows: Row[]): void {
    const columns: string[] = [];
    for (const row of rows)
      for (const key of Object.keys(row)) if (!META_COLUMNS.includes(key) && !columns.includes(key)) columns.push(key);
    columns.push(...META_COLUMNS);
    replaceChildren(
      this.#body,
      h(
        "table",
        { class: "data", "data-testid": "dataset-table" },
        h(
          "thead",
          {},
          h(
            "tr",
            {},
            columns.map((c) => h("th", {}, c)),
          ),
        ),
        h(
          "tbody",
          {},
          rows.map((row) =>
            h(
              "tr",
              { "data-key": cellText(row._key) },
              columns.map((c) =>
                h("td", { class: c === "_status" ? `status-${cellText(row[c])}` : null, title: cellText(row[c]) }, cellText(row[c])),
              ),
            ),
          ),
        ),
      ),
    );
  }
}

/**
 * One run: its header and controls (cancel, rerun, signal), progress per
 * map, throughput, spend, the event log and a preview of its datasets.
 *
 * It follows the run's live feed from the start of its ledger (`after: 0`),
 * so the log and the chart hold the whole history, and reads the run again
 * every few seconds while it has not ended, for what no event carries (a
 * status turning `waiting`, usage).
 */
import { TERMINAL_STATUSES, TroupeApiError, type LedgerEvent } from "../client";
import { cellText, formatTime, h, replaceChildren } from "./dom";
import { DatasetPreview } from "./dataset-preview";
import { eventItem, progressSection, spendSection, throughputSection } from "./run-sections";
import { applyEnd, applyMapProgress, mergeRead, mergeSnapshot, type RunInfo, signalKeyToShow } from "./run-state";
import type { Page, Shell } from "./shell";
import { ThroughputSeries } from "./throughput";

/** How often the run is read again while it is live (status and usage). */
const REFRESH_INTERVAL_MS = 3_000;
/** Event log lines kept on the page; older ones scroll away. */
const MAX_LOG_LINES = 1_000;
/** A live feed given up on (the server away longer than its reconnections) is started again this much later. */
const FEED_RETRY_MS = 5_000;

/** The page of run `runId`. */
export function runPage(shell: Shell, runId: string): Page {
  return new RunPage(shell, runId);
}

class RunPage implements Page {
  readonly element: HTMLElement;
  readonly #shell: Shell;
  readonly #runId: string;
  readonly #abort = new AbortController();
  readonly #series = new ThroughputSeries();
  readonly #preview: DatasetPreview;
  #run: RunInfo | null = null;
  #lastSeq = 0;
  #liveSpend: number | null = null;
  /** The event key of the latest wait for a signal that has not finished, to prefill the signal form. */
  #awaitedKey: string | null = null;
  /** The key the form was last prefilled with: replaced by the next wait's unless the user typed another. */
  #prefilledKey: string | null = null;
  /** Events not yet drawn in the log (at most its length): drawn once a frame, not each as it arrives. */
  #pendingLog: LedgerEvent[] = [];
  #feedRetry: ReturnType<typeof setTimeout> | undefined;
  #live: "connecting" | "live" | "ended" | "lost" = "connecting";
  #refreshTimer: ReturnType<typeof setTimeout> | undefined;
  #frame = 0;

  #header = h("div", { class: "card" });
  #title = h("div", { class: "row" });
  #meta = h("div", { class: "meta" });
  #errorBox = h("div");
  #progress = h("div");
  #chart = h("div");
  #spend = h("div");
  #result = h("div");
  #log = h("ol", { "data-testid": "event-log" });
  #logCount = h("span", { class: "muted", "data-testid": "event-count" });
  #logScroll = h("div", { class: "events" }, this.#log);
  #cancel = h(
    "button",
    { type: "button", class: "danger", disabled: true, "data-testid": "cancel", onclick: () => void this.#act(() => this.#doCancel()) },
    "Cancel run",
  );
  #rerun = h(
    "button",
    { type: "button", disabled: true, "data-testid": "rerun", onclick: () => void this.#act(() => this.#doRerun()) },
    "Rerun",
  );
  #signalKey = h("input", { name: "eventKey", placeholder: "event key", "data-testid": "signal-key", size: 14 });
  #signalData = h("input", {
    name: "data",
    placeholder: "data (JSON)",
    value: "true",
    "data-testid": "signal-data",
    size: 24,
    class: "mono",
  });
  #signalSend = h("button", { type: "submit", "data-testid": "signal-send" }, "Send signal");
  #signalForm = h(
    "form",
    {
      class: "row",
      onsubmit: (e: Event) => {
        e.preventDefault();
        void this.#act(() => this.#doSignal());
      },
    },
    this.#signalKey,
    this.#signalData,
    this.#signalSend,
  );

  constructor(shell: Shell, runId: string) {
    this.#shell = shell;
    this.#runId = runId;
    this.#preview = new DatasetPreview({ client: shell.client, runId, onError: (e) => shell.report(e) });
    this.element = h(
      "div",
      { "data-testid": "run-page", "data-run-id": runId },
      this.#header,
      this.#errorBox,
      h("div", { class: "grid" }, this.#progress, this.#chart),
      h("div", { class: "grid", style: "margin-top: 16px" }, this.#spend, this.#result),
      h(
        "div",
        { class: "card", style: "margin-top: 16px" },
        h("div", { class: "row" }, h("h2", {}, "Event log"), h("span", { class: "spacer" }), this.#logCount),
        this.#logScroll,
      ),
      this.#preview.element,
    );
    // Built once: the controls keep their focus and typed values while live updates redraw the rest.
    replaceChildren(
      this.#header,
      this.#title,
      this.#meta,
      h("div", { class: "row", style: "margin-top: 12px" }, this.#cancel, this.#rerun, h("span", { class: "spacer" }), this.#signalForm),
    );
    replaceChildren(this.#title, h("p", { class: "muted" }, `Loading ${runId}…`));
    void this.#follow();
    void this.#refresh();
  }

  dispose(): void {
    this.#abort.abort();
    clearTimeout(this.#refreshTimer);
    clearTimeout(this.#feedRetry);
    cancelAnimationFrame(this.#frame);
    this.#preview.dispose();
  }

  /**
   * The live feed: a snapshot, then every event from the first; it ends after the run's last. One the client gave up
   * on (the server away for longer than its reconnections) is started again, from the last event shown.
   */
  async #follow(): Promise<void> {
    const { signal } = this.#abort;
    try {
      for await (const message of this.#shell.client.events(this.#runId, { after: this.#lastSeq, signal })) {
        if (signal.aborted) return;
        this.#live = "live";
        if (message.type === "snapshot" && "run" in message) this.#show(mergeSnapshot(this.#run, message.run, message.seq));
        else this.#onEvent(message as LedgerEvent);
        this.#schedule();
      }
      if (signal.aborted) return;
      this.#live = "ended";
      await this.#refresh();
    } catch (error) {
      if (signal.aborted) return;
      this.#live = "lost";
      this.#schedule();
      this.#fail(error);
      if (!signal.aborted && !TERMINAL_STATUSES.has(this.#run?.status ?? "")) {
        this.#feedRetry = setTimeout(() => void this.#follow(), FEED_RETRY_MS);
      }
    }
  }

  /** Reads the run; again in a few seconds while it has not ended. */
  async #refresh(): Promise<void> {
    clearTimeout(this.#refreshTimer);
    try {
      const run: RunInfo = await this.#shell.client.get(this.#runId);
      if (this.#abort.signal.aborted) return;
      this.#setRun(run);
      this.#schedule();
    } catch (error) {
      if (this.#abort.signal.aborted) return;
      this.#fail(error);
    }
    if (!this.#abort.signal.aborted && !TERMINAL_STATUSES.has(this.#run?.status ?? "")) {
      this.#refreshTimer = setTimeout(() => void this.#refresh(), REFRESH_INTERVAL_MS);
    }
  }

  /** A run this org cannot see ends the page (no more reads); anything else is reported and retried. */
  #fail(error: unknown): void {
    if (error instanceof TroupeApiError && error.status === 404) {
      this.dispose();
      replaceChildren(
        this.element,
        h(
          "div",
          { class: "card" },
          h("h1", {}, "Run not found"),
          h(
            "p",
            { class: "muted", "data-testid": "run-not-found" },
            `No run ${this.#runId} in this org. `,
            h("a", { href: "#/" }, "Back to the runs"),
          ),
        ),
      );
      return;
    }
    this.#shell.report(error);
  }

  #setRun(read: RunInfo): void {
    this.#show(mergeRead(this.#run, read));
  }

  #show(run: RunInfo): void {
    // Rows read while the run was live may be pending since: read them again once it ended.
    const previous = this.#run;
    if (previous && !TERMINAL_STATUSES.has(previous.status) && TERMINAL_STATUSES.has(run.status)) this.#preview.reload();
    this.#run = run;
  }

  #onEvent(event: LedgerEvent): void {
    if (event.seq <= this.#lastSeq) return;
    this.#lastSeq = event.seq;
    this.#pendingLog.push(event);
    if (this.#pendingLog.length > 2 * MAX_LOG_LINES) this.#pendingLog.splice(0, this.#pendingLog.length - MAX_LOG_LINES);
    const run = this.#run;
    const e = event as Record<string, any>;
    if (event.type === "map.progress" && typeof e.map === "string") {
      this.#series.add({
        at: event.at,
        map: e.map,
        completed: e.completed,
        failed: e.failed,
        total: e.total,
        rowsPerSecond: e.rowsPerSecond,
      });
      if (typeof e.spend === "number") this.#liveSpend = e.spend;
      if (run) this.#run = applyMapProgress(run, event);
      this.#preview.refreshIfEmpty();
    } else if (event.type === "wait.started" && e.kind === "event" && typeof e.eventKey === "string") {
      this.#awaitedKey = e.eventKey;
    } else if (event.type === "wait.finished" && e.kind === "event") {
      this.#awaitedKey = null;
    } else if (event.type === "run.started" && run && run.status === "queued") {
      this.#run = { ...run, status: "running" };
    } else if (event.type === "run.completed" || event.type === "run.failed" || event.type === "run.cancelled") {
      if (run) this.#show(applyEnd(run, event));
    }
  }

  /**
   * Draws the events that arrived since the last frame: one layout read for them all (a run's whole history
   * replayed is thousands of events; a read after each append laid the log out again each time).
   */
  #drawLog(): void {
    if (!this.#pendingLog.length) return;
    const events = this.#pendingLog.slice(-MAX_LOG_LINES);
    this.#pendingLog = [];
    const nearBottom = this.#logScroll.scrollTop + this.#logScroll.clientHeight >= this.#logScroll.scrollHeight - 24;
    const items = document.createDocumentFragment();
    for (const event of events) items.append(eventItem(event));
    this.#log.append(items);
    while (this.#log.childElementCount > MAX_LOG_LINES) this.#log.firstElementChild!.remove();
    replaceChildren(this.#logCount, `${this.#lastSeq} events`);
    // Follow new lines unless the reader scrolled up to read older ones.
    if (nearBottom) this.#logScroll.scrollTop = this.#logScroll.scrollHeight;
  }

  /** Draws at most once a frame, however many events arrive. */
  #schedule(): void {
    if (this.#frame) return;
    this.#frame = requestAnimationFrame(() => {
      this.#frame = 0;
      this.#render();
    });
  }

  #render(): void {
    this.#drawLog();
    const run = this.#run;
    if (!run) return;
    const terminal = TERMINAL_STATUSES.has(run.status);
    const liveLabel = { connecting: "connecting…", live: "live", ended: "ended", lost: "live feed lost" }[this.#live];
    replaceChildren(
      this.#title,
      h("h1", {}, run.play),
      h("span", { class: `badge ${run.status}`, "data-testid": "run-status" }, run.status),
      h("span", { class: "spacer" }),
      h(
        "span",
        { class: "muted", "data-testid": "live-state" },
        h("span", { class: this.#live === "live" ? "live-dot" : "live-dot off" }),
        liveLabel,
      ),
    );
    replaceChildren(
      this.#meta,
      h("span", { class: "mono" }, run.runId),
      run.parentRunId ? h("span", {}, "child of ", h("a", { href: `#/runs/${run.parentRunId}`, class: "mono" }, run.parentRunId)) : null,
      h("span", {}, `started ${formatTime(run.createdAt)}`),
      h("span", {}, `updated ${formatTime(run.updatedAt)}`),
      run.runAttempt ? h("span", {}, `attempt ${run.runAttempt}`) : null,
    );
    this.#signalForm.hidden = terminal;
    this.#cancel.disabled = terminal || run.status === "cancelling";
    this.#rerun.disabled = !terminal;
    // The current wait's key, unless the user is typing or typed a key of their own.
    const key = signalKeyToShow(this.#signalKey.value, this.#prefilledKey, this.#awaitedKey);
    if (key !== this.#signalKey.value && document.activeElement !== this.#signalKey) this.#signalKey.value = this.#prefilledKey = key;

    replaceChildren(
      this.#errorBox,
      run.error
        ? h(
            "div",
            { class: "card error-box", "data-testid": "run-error" },
            h("h2", { class: "status-failed" }, `Failed: ${run.error.code ?? "error"}`),
            h("p", {}, cellText(run.error.message)),
          )
        : null,
    );
    const maps = run.progress?.maps ?? {};
    replaceChildren(this.#progress, progressSection(maps, { ended: terminal }));
    replaceChildren(this.#chart, throughputSection(this.#series.samples));
    replaceChildren(this.#spend, spendSection(run, this.#liveSpend));
    replaceChildren(
      this.#result,
      h(
        "div",
        { class: "card" },
        h("h2", {}, "Result"),
        run.status === "completed"
          ? h("pre", { class: "json", "data-testid": "run-result" }, JSON.stringify(run.result ?? null, null, 2))
          : h("p", { class: "muted" }, terminal ? "No result." : "Not finished yet."),
      ),
    );
    this.#preview.setDatasets([...new Set([...Object.keys(run.links?.datasets ?? {}), ...Object.keys(maps)])]);
  }

  /** Runs a control action with the buttons disabled, reporting its error. */
  async #act(action: () => Promise<void>): Promise<void> {
    const buttons = [this.#cancel, this.#rerun, this.#signalSend];
    const before = buttons.map((b) => b.disabled);
    for (const b of buttons) b.disabled = true;
    try {
      await action();
    } catch (error) {
      this.#shell.report(error);
    } finally {
      for (const [i, b] of buttons.entries()) b.disabled = before[i]!;
      this.#schedule();
    }
  }

  async #doCancel(): Promise<void> {
    const answer = await this.#shell.client.cancel(this.#runId);
    this.#shell.info(`Cancel asked for: the run is ${answer.status}.`);
    await this.#refresh();
  }

  async #doRerun(): Promise<void> {
    const answer = await this.#shell.client.rerun(this.#runId);
    this.#shell.info(`Rerun started: ${answer.runId}.`);
    this.#shell.navigate(`#/runs/${answer.runId}`);
  }

  async #doSignal(): Promise<void> {
    const key = this.#signalKey.value.trim();
    if (!key) throw new Error("give the signal's event key (the key the play waits for)");
    let data: unknown;
    try {
      data = this.#signalData.value.trim() === "" ? null : JSON.parse(this.#signalData.value);
    } catch (error) {
      throw new Error(`the signal's data is not JSON: ${error instanceof Error ? error.message : String(error)}`);
    }
    const answer = await this.#shell.client.signal(this.#runId, key, data);
    const fate = answer.duplicate
      ? "a duplicate, ignored"
      : answer.consumed
        ? "taken by the waiting play"
        : "kept for the play's next wait";
    this.#shell.info(`Signal ${JSON.stringify(key)} delivered (${fate}).`);
    await this.#refresh();
  }
}

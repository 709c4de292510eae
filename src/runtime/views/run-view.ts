/** The public shape of a run (API.md `GET /v1/runs/<id>`). */
import { isTerminal } from "../../core/statuses";
import type { RunRecord, RunStore } from "../../stores/run-store";
import type { SpendTotals } from "../../stores/spend-store";
import { runLinks, type RunLinks } from "./links";
import type { LiveRows } from "../map/live-rows";

export interface RunView {
  runId: string;
  play: string;
  org: string;
  /** The run's status; `cancelling` while a cancel has been asked for and the run has not ended yet. */
  status: RunRecord["status"] | "cancelling";
  runAttempt: number;
  parentRunId: string | null;
  progress: { maps: ReturnType<RunStore["allProgress"]> };
  /** The play's JSON result (typed loosely: RPC types cannot carry a recursive JSON type). */
  result: any;
  error: RunRecord["error"];
  /**
   * What the run used; `spend` in credits actually billed to it (reused receipts cost nothing);
   * `objectRpcsByKind` breaks `objectRpcs` down by `<object>.<method>` (`sheet.claimRows`, `receipt.write`, `pacing.acquire`).
   */
  usage: RunRecord["usage"] & { objectRpcsByKind: Record<string, number>; spend: SpendTotals };
  /** The run's spend cap in credits, or null. */
  maxSpend: number | null;
  /** Where its state, live feed, events and datasets are (the play's declared datasets, then the maps it started). */
  links: RunLinks;
  createdAt: string;
  updatedAt: string;
}

/** The run's status as the API shows it: `cancelling` while a cancel has been asked for and the run has not ended yet. */
export function shownStatus(run: RunRecord): RunView["status"] {
  return run.cancelRequested && !isTerminal(run.status) ? "cancelling" : run.status;
}

/** The run; `live` adds the rows of its running chunks that have settled since their chunk started. */
export function runView(store: RunStore, declaredDatasets: readonly string[] = [], live?: LiveRows): RunView | null {
  const run = store.run();
  if (!run) return null;
  const stored = store.allProgress();
  const maps = live ? live.applyAll(stored, (map) => store.runningCounts(map)) : stored;
  return {
    runId: run.runId,
    play: run.play,
    org: run.org,
    status: shownStatus(run),
    runAttempt: run.runAttempt,
    parentRunId: run.parentRunId,
    progress: { maps },
    result: run.result,
    error: run.error,
    usage: { ...run.usage, objectRpcsByKind: store.objectRpcsByKind(), spend: store.spend.totals() },
    maxSpend: run.maxSpend,
    links: runLinks(run.runId, new Set([...declaredDatasets, ...Object.keys(maps)])),
    createdAt: new Date(run.createdAt).toISOString(),
    updatedAt: new Date(run.updatedAt).toISOString(),
  };
}

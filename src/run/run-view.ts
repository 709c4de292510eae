/** The public shape of a run (API.md `GET /v1/runs/<id>`). */
import { TERMINAL, type RunRecord, type RunStore } from "./run-store";

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
  usage: RunRecord["usage"];
  createdAt: string;
  updatedAt: string;
}

export function runView(store: RunStore): RunView | null {
  const run = store.run();
  if (!run) return null;
  return {
    runId: run.runId,
    play: run.play,
    org: run.org,
    status: run.cancelRequested && !TERMINAL.has(run.status) ? "cancelling" : run.status,
    runAttempt: run.runAttempt,
    parentRunId: run.parentRunId,
    progress: { maps: store.allProgress() },
    result: run.result,
    error: run.error,
    usage: run.usage,
    createdAt: new Date(run.createdAt).toISOString(),
    updatedAt: new Date(run.updatedAt).toISOString(),
  };
}

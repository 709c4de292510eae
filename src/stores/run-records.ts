/** The run's records as its coordinator's store reads them: the run, its maps and chunks, and their rows. */
import type { RunStatus } from "../core/statuses";
import type { ChunkResume } from "../contracts/executors";
import type { SalvageRecord } from "./salvage-store";
import { toCredits } from "./spend-store";

/** An end the run decided: once recorded, a restart carries it out again rather than running the play. */
export type RunEnding = { kind: "completed"; result: unknown } | { kind: "failed"; error: RunError } | { kind: "cancelled" };

export interface RunError {
  code: string;
  message: string;
  failureSamples?: { map: string; key: string; error: string }[];
  /** Billed outputs that could not be stored in receipts (see `SalvageStore`). */
  salvage?: SalvageRecord;
  /** What the code carries as data (e.g. `spend_cap_reached`: `{ spent, maxSpend }`). */
  details?: Record<string, number | string | null>;
}

/** A chunk's settled rows. */
/**
 * What earlier attempts of a running chunk stored; `resumed`: the running attempt goes on from a wound-down one
 * (ChunkResume), so its own rows come on top of these.
 */
export type ChunkCounts = { chunk: number; completed: number; failed: number; resumed?: boolean };

export interface RunRecord {
  runId: string;
  org: string;
  play: string;
  parentRunId: string | null;
  /** How deeply this run is nested under parent plays: 0 for a run submitted over HTTP. */
  depth: number;
  status: RunStatus;
  force: boolean;
  forceToolRefresh: boolean;
  runAttempt: number;
  result: unknown;
  error: RunError | null;
  cancelRequested: boolean;
  infraFailures: number;
  /** Durable Object RPCs and provider requests made for this run, over all invocations. */
  /**
   * What the run spent: object RPCs; provider requests sent (a batch counts once, each retry once: what a
   * provider counts as calls); in-process retries and 429s among them; and recovery lookups (asking a provider
   * for the result of a taken-over call, which it neither bills nor counts as a call).
   */
  usage: {
    objectRpcs: number;
    providerRequests: number;
    providerRetries: number;
    rateLimited: number;
    providerLookups: number;
    outcomeUnknown: number;
  };
  /** The run's spend cap in credits (`maxSpend`), or null. */
  maxSpend: number | null;
  /** Requests whose outcome is unknown may be sent again (`retryUnknown`). */
  retryUnknown: boolean;
  deadlineAt: number;
  /** Test runner only: policy overrides for this run (see `TestPolicyOverrides` in src/core/policy.ts). */
  testPolicy: Record<string, number> | null;
  createdAt: number;
  updatedAt: number;
}

export interface MapRecord {
  name: string;
  shardCount: number;
  total: number;
  duplicatesDropped: number;
  chunkRows: number;
  chunkCount: number;
  done: boolean;
  /** Times finalize found rows not persisted and sent their chunks back (bounded by policy). */
  repairs: number;
}

export type ChunkState = "pending" | "running" | "done";

export interface ChunkRecord {
  idx: number;
  rows: number;
  state: ChunkState;
  attemptSeq: number;
  retries: number;
  /** Rows its last finished attempt reported completed (reused included) and failed. */
  completed: number;
  failed: number;
  /** Times an attempt of this chunk died (lost leases, threw) and the chunk was redispatched. */
  redispatches: number;
  /** What a wound-down attempt left of it: its next attempt runs only these rows (null: the whole chunk). */
  resume: ChunkResume | null;
}

export type RunRow = {
  run_id: string;
  org: string;
  play: string;
  parent_run_id: string | null;
  status: string;
  force: number;
  force_tool_refresh: number;
  run_attempt: number;
  result: string | null;
  error: string | null;
  cancel_requested: number;
  infra_failures: number;
  object_rpcs: number;
  provider_requests: number;
  provider_retries: number;
  rate_limited: number;
  provider_lookups: number;
  outcome_unknown: number;
  max_spend_micros: number | null;
  retry_unknown: number;
  deadline_at: number;
  created_at: number;
  updated_at: number;
  depth: number;
  test_policy: string | null;
};

export function rowToRun(r: RunRow): RunRecord {
  return {
    runId: r.run_id,
    org: r.org,
    play: r.play,
    parentRunId: r.parent_run_id,
    depth: r.depth,
    status: r.status as RunStatus,
    force: r.force === 1,
    forceToolRefresh: r.force_tool_refresh === 1,
    runAttempt: r.run_attempt,
    result: r.result === null ? null : JSON.parse(r.result),
    error: r.error === null ? null : (JSON.parse(r.error) as RunError),
    cancelRequested: r.cancel_requested === 1,
    infraFailures: r.infra_failures,
    usage: {
      objectRpcs: r.object_rpcs,
      providerRequests: r.provider_requests,
      providerRetries: r.provider_retries,
      rateLimited: r.rate_limited,
      providerLookups: r.provider_lookups,
      outcomeUnknown: r.outcome_unknown,
    },
    maxSpend: r.max_spend_micros === null ? null : toCredits(r.max_spend_micros),
    retryUnknown: r.retry_unknown === 1,
    deadlineAt: r.deadline_at,
    testPolicy: r.test_policy === null ? null : (JSON.parse(r.test_policy) as Record<string, number>),
    createdAt: r.created_at,
    updatedAt: r.updated_at,
  };
}

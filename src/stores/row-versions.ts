/**
 * A row's head with its latest version, as a sheet shard's claims and writes
 * see it (src/stores/sheet-store.ts), and the rules they judge it by: which
 * version serves a claim, which one an attempt goes on computing, and whose
 * lease bars it.
 */
import type { AttemptRef } from "../contracts/shards";

/** A row's head joined with its latest version (its data and error stay in storage: claims and writes never need them). */
export type RowRecord = {
  key: string;
  version: number;
  status: string;
  input_digest: string | null;
  created_by_run: string | null;
  written_by_attempt: string | null;
  written_by_run: string | null;
  lease_attempt_id: string | null;
  lease_run_id: string | null;
  lease_seq: number | null;
  lease_expires_at: number | null;
};

/**
 * A completed latest version serves this claim for the same input; under
 * `recompute` (force) only when this run wrote it. An attempt never reuses a
 * version it leases itself (it is computing it).
 */
export function reusable(record: RowRecord, digest: string, attempt: AttemptRef, recompute: boolean): boolean {
  if (record.lease_attempt_id === attempt.attemptId || record.status !== "completed" || record.input_digest !== digest) return false;
  return servesUnderRecompute(record.written_by_run, attempt, recompute);
}

/** Whether a completed version written by `writtenByRun` may serve the attempt: any, but under `recompute` only the run's own. */
export function servesUnderRecompute(writtenByRun: string | null, attempt: AttemptRef, recompute: boolean): boolean {
  return !recompute || writtenByRun === attempt.runId;
}

/** A pending latest version of this run, for the same input, is computed by this attempt instead of a new one. */
export function resumable(record: RowRecord, digest: string, attempt: AttemptRef): boolean {
  return record.status === "pending" && record.input_digest === digest && record.created_by_run === attempt.runId;
}

/**
 * The row's live lease when it bars this attempt. An expired lease, our own
 * lease, and a lease of an older attempt of our run (taken over) do not.
 */
export function blockingLease(
  record: RowRecord,
  attempt: AttemptRef,
  now: number,
): { owner: AttemptRef; leaseExpiresAt: number } | undefined {
  const { lease_attempt_id: attemptId, lease_run_id: runId, lease_seq: attemptSeq, lease_expires_at: leaseExpiresAt } = record;
  if (attemptId === null || runId === null || attemptSeq === null || leaseExpiresAt === null || leaseExpiresAt <= now) return undefined;
  if (attemptId === attempt.attemptId) return undefined;
  if (runId === attempt.runId && attemptSeq < attempt.attemptSeq) return undefined;
  return { owner: { attemptId, runId, attemptSeq }, leaseExpiresAt };
}

export function newRecord(key: string): RowRecord {
  return {
    key,
    version: 0,
    status: "pending",
    input_digest: null,
    created_by_run: null,
    written_by_attempt: null,
    written_by_run: null,
    lease_attempt_id: null,
    lease_run_id: null,
    lease_seq: null,
    lease_expires_at: null,
  };
}

/** How many of `sizes`, in order, fit in `maxChars` (at least one, whatever its size), and at most `limit`. */

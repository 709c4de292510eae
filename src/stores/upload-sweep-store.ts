/**
 * The uploads an org's directory will look at again (OrgDirectory's alarm):
 * every upload is watched from before its first byte until it is ready or
 * deleted, so that what a request that died left, or an upload left
 * unfinished, is deleted once it has been receiving for longer than an upload
 * can, whether or not anyone lists the org's uploads.
 */
import { z } from "zod";
import type { Sql } from "./sql";

export const uploadSweepMigration = `CREATE TABLE upload_sweeps (
    upload_id TEXT PRIMARY KEY, org TEXT NOT NULL, due_at INTEGER NOT NULL);
  CREATE INDEX upload_sweeps_due ON upload_sweeps (due_at);`;

/** An upload to look at once `dueAt` has passed. */
export const UploadWatch = z.object({
  uploadId: z.string().min(1).max(100),
  org: z.string().min(1).max(200),
  dueAt: z.number().int().min(0),
});
export type UploadWatch = z.infer<typeof UploadWatch>;

export class UploadSweepStore {
  #sql: Sql;

  constructor(options: { sql: Sql }) {
    this.#sql = options.sql;
  }

  /** Watches an upload (again: its due time is replaced). */
  watch(watch: UploadWatch): void {
    this.#sql.write`INSERT INTO upload_sweeps (upload_id, org, due_at) VALUES (${watch.uploadId}, ${watch.org}, ${watch.dueAt})
      ON CONFLICT (upload_id) DO UPDATE SET org = excluded.org, due_at = excluded.due_at`;
  }

  /** Up to `limit` of the uploads due by `now`, the longest due first. */
  due(now: number, limit: number): UploadWatch[] {
    return this.#sql<{ upload_id: string; org: string; due_at: number }>`SELECT upload_id, org, due_at FROM upload_sweeps
      WHERE due_at <= ${now} ORDER BY due_at LIMIT ${limit}`.map((row) => ({
      uploadId: row.upload_id,
      org: row.org,
      dueAt: row.due_at,
    }));
  }

  /** Stops watching an upload: it is ready, or nothing of it is left. */
  forget(uploadId: string): void {
    this.#sql.write`DELETE FROM upload_sweeps WHERE upload_id = ${uploadId}`;
  }

  /** When the next upload is due; null when none is watched. */
  nextDueAt(): number | null {
    return this.#sql<{ due_at: number | null }>`SELECT MIN(due_at) AS due_at FROM upload_sweeps`[0]?.due_at ?? null;
  }
}

/**
 * Cursors of a run's view of a dataset (`GET /v1/runs/<id>/datasets/<name>?cursor=`).
 * A cursor names the input index the next page starts at, and the run and
 * dataset it was given out for: opaque to clients (base64url of a small JSON
 * object), checked on the way back in. It grants nothing: the route has
 * already resolved the run for the caller's org.
 */
import { createHash } from "node:crypto";
import { z } from "zod";
import { TroupeError } from "../../core/errors";

/** Whose cursor: one run's view of one dataset. */
export interface CursorScope {
  runId: string;
  dataset: string;
}

const MAX_CURSOR_CHARS = 200;

const CursorBody = z
  .object({
    v: z.literal(1),
    /** A digest of the scope: a cursor of another run or dataset does not match. */
    s: z.string(),
    /** The input index the page starts at. */
    i: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  })
  .strict();

/** The cursor of the page of `scope` that starts at input index `index`. */
export function encodeDatasetCursor(scope: CursorScope, index: number): string {
  const text = JSON.stringify({ v: 1, s: scopeDigest(scope), i: index });
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/**
 * The input index a cursor of `scope` names. Throws `invalid_cursor` (HTTP 400)
 * for anything this API did not give out for this run and dataset, and for an
 * index at or past `total` (the last page has no next cursor).
 */
export function decodeDatasetCursor(cursor: string, scope: CursorScope, total: number): number {
  const body = parseCursor(cursor);
  if (!body) throw invalidCursor("cursor is not one this API gave out: request the first page without a cursor, then follow nextCursor");
  if (body.s !== scopeDigest(scope)) throw invalidCursor("cursor was given out for another run or dataset");
  if (body.i >= total) throw invalidCursor("cursor points past the end of the dataset");
  return body.i;
}

function parseCursor(cursor: string): z.infer<typeof CursorBody> | undefined {
  if (cursor.length === 0 || cursor.length > MAX_CURSOR_CHARS || !/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  let text: string;
  try {
    text = atob(cursor.replace(/-/g, "+").replace(/_/g, "/"));
  } catch {
    return undefined; // not base64: refused like any cursor we did not give out
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined; // not JSON: refused like any cursor we did not give out
  }
  const parsed = CursorBody.safeParse(json);
  return parsed.success ? parsed.data : undefined;
}

function scopeDigest(scope: CursorScope): string {
  return createHash("sha256").update(`${scope.runId}\n${scope.dataset}`).digest("hex").slice(0, 16);
}

function invalidCursor(message: string): TroupeError {
  return new TroupeError("invalid_cursor", message, { httpStatus: 400, details: [{ path: "cursor", message }] });
}

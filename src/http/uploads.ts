/**
 * Uploads: a CSV or NDJSON file in one request or in parts, checked, indexed
 * and kept in R2 for a run to read (API.md "Large inputs: uploads"). Bodies
 * stream through to `src/uploads`; they are never read whole here.
 */
import { Hono } from "hono";
import { z } from "zod";
import { faultProbeFor } from "../clients/faults";
import { OrgClient } from "../clients/orgs";
import { TroupeError } from "../core/errors";
import { MAX_REQUEST_UPLOAD_BYTES, type UploadFormat } from "../uploads/limits";
import { UploadTooLargeError, uploadNotFound } from "../uploads/errors";
import { UPLOAD_ID, Uploads } from "../uploads/uploads";
import type { AppEnv } from "./context";
import { validate } from "./errors";

/** The routes whose bodies stream into R2, past the app's request body limit: each limits its own. */
export const STREAMED_BODY_ROUTE = /^\/v1\/uploads(?:\/[^/]+\/parts\/[^/]+)?$/;

/** Media types and the formats they name; a `charset` parameter, if any, must be UTF-8. */
const FORMATS: Record<string, UploadFormat> = { "text/csv": "csv", "application/x-ndjson": "ndjson" };

const StartQuery = z.object({ multipart: z.enum(["0", "1"]).default("0") });

// Strict, as GET /v1/runs: a filter it does not have (`status`) is refused rather than ignored. The cursor is the last
// upload id of a page, so anything else is not one this API gave out.
const ListQuery = z
  .object({
    limit: z.coerce.number().int().min(1).max(100).default(50),
    cursor: z.string().regex(UPLOAD_ID, "not a cursor this API gave out (the last upload id of a page)").optional(),
  })
  .strict();

const PART_NUMBER = /^[1-9][0-9]{0,4}$/;

export const uploadRoutes = new Hono<AppEnv>();

/** The org's uploads; each one started is watched by the org's directory, which deletes what it left unless it is ready. */
const uploadsOf = (env: Env, org: string) =>
  new Uploads({
    bucket: env.UPLOADS,
    org,
    faults: faultProbeFor(env),
    watch: ({ uploadId, dueAt }) => new OrgClient({ env, org }).watchUpload({ uploadId, org, dueAt }),
  });

uploadRoutes.post("/uploads", async (c) => {
  const { multipart } = validate(StartQuery, c.req.query(), "the query");
  const format = formatOf(c.req.header("Content-Type"));
  const uploads = uploadsOf(c.env, c.get("org"));
  if (multipart === "1") return c.json(await uploads.startMultipart(format), 201);
  const body = c.req.raw.body ?? new Response("").body!;
  return c.json(await uploads.receive(body, { format, declaredBytes: declaredBytesOf(c.req.raw) }), 201);
});

uploadRoutes.get("/uploads", async (c) => {
  const { limit, cursor } = validate(ListQuery, c.req.query(), "the query");
  return c.json(await uploadsOf(c.env, c.get("org")).list({ limit, after: cursor ?? null }));
});

uploadRoutes.put("/uploads/:uploadId/parts/:part", async (c) => {
  const partParam = c.req.param("part");
  if (!PART_NUMBER.test(partParam)) {
    throw new TroupeError("invalid_part_number", `part numbers are whole numbers from 1 to 10000; got ${JSON.stringify(partParam)}`, {
      httpStatus: 400,
    });
  }
  const bytes = declaredBytesOf(c.req.raw);
  if (bytes === null) {
    throw new TroupeError(
      "length_required",
      "send each part with its Content-Length (a part's size is checked when the upload completes)",
      {
        httpStatus: 411,
      },
    );
  }
  if (bytes > MAX_REQUEST_UPLOAD_BYTES) {
    throw new UploadTooLargeError(`a part carries at most ${MAX_REQUEST_UPLOAD_BYTES} bytes; split the file into more parts`, {
      maxBytes: MAX_REQUEST_UPLOAD_BYTES,
    });
  }
  const body = c.req.raw.body ?? new Response("").body!;
  return c.json(await uploadsOf(c.env, c.get("org")).receivePart(c.req.param("uploadId"), Number(partParam), body, bytes));
});

uploadRoutes.post("/uploads/:uploadId/complete", async (c) => {
  return c.json(await uploadsOf(c.env, c.get("org")).complete(c.req.param("uploadId")), 201);
});

uploadRoutes.get("/uploads/:uploadId", async (c) => {
  const uploadId = c.req.param("uploadId");
  const upload = await uploadsOf(c.env, c.get("org")).describe(uploadId);
  if (!upload) throw uploadNotFound(uploadId);
  return c.json(upload);
});

uploadRoutes.delete("/uploads/:uploadId", async (c) => {
  const uploadId = c.req.param("uploadId");
  if (!(await uploadsOf(c.env, c.get("org")).remove(uploadId))) throw uploadNotFound(uploadId);
  return c.json({ uploadId, deleted: true });
});

/** The upload's format from its `Content-Type`, or a 400 naming the two accepted. */
function formatOf(contentType: string | undefined): UploadFormat {
  const [type = "", ...params] = (contentType ?? "").split(";").map((p) => p.trim().toLowerCase());
  const format = FORMATS[type];
  const charset = params
    .find((p) => p.startsWith("charset="))
    ?.slice("charset=".length)
    .replaceAll('"', "");
  if (format && (charset === undefined || charset === "utf-8" || charset === "utf8")) return format;
  throw new TroupeError(
    "unsupported_content_type",
    format
      ? `uploads are UTF-8; got charset ${charset}: save the file as UTF-8`
      : `send a CSV file as Content-Type: text/csv (a header line, then rows) or NDJSON as Content-Type: application/x-ndjson (one JSON object per line); got ${contentType ? JSON.stringify(contentType) : "no Content-Type"}`,
    { httpStatus: 400 },
  );
}

/** The body's declared length, or null when it is streamed without one. */
function declaredBytesOf(request: Request): number | null {
  const header = request.headers.get("Content-Length");
  if (header === null || !/^\d+$/.test(header)) return null;
  return Number(header);
}

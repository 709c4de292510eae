/**
 * One org's uploads in the R2 bucket. Every object of an upload lives under
 * `<org>/<uploadId>/`, so another org's id finds nothing:
 *
 * - `data`: the file, byte for byte as it was sent;
 * - `index`: its index (src/uploads/upload-index.ts), for range reads;
 * - `upload`: its record (format, rows, bytes, columns, when). Written last:
 *   an upload without it is not ready, whatever else exists;
 * - `multipart` and `parts/<n>`: a multipart upload while it receives parts
 *   (R2's multipart id; each part's etag and size, which R2's binding cannot
 *   list). Deleted once the upload is complete.
 * - `request`: a file arriving in one request, written before its first byte
 *   and deleted once it is ready, so that what a request that died on the way
 *   left is found (listed `receiving`) and can be deleted.
 */
import { z } from "zod";
import { TerminalError } from "../core/errors";
import type { ReceivedPart } from "./parts";
import { indexFromJson, indexToJson, type UploadIndex } from "./upload-index";

/** `upload`: a ready upload. */
const UploadRecord = z.object({
  uploadId: z.string(),
  format: z.enum(["csv", "ndjson"]),
  rows: z.number().int().min(0),
  bytes: z.number().int().min(0),
  columns: z.array(z.string()),
  /** The file's SHA-256 (absent from uploads stored before it was kept). */
  sha256: z.string().optional(),
  createdAt: z.number().int(),
});
export type UploadRecord = z.infer<typeof UploadRecord>;

/** `multipart`: a multipart upload receiving parts. */
const MultipartRecord = z.object({
  uploadId: z.string(),
  format: z.enum(["csv", "ndjson"]),
  r2UploadId: z.string(),
  createdAt: z.number().int(),
});
export type MultipartRecord = z.infer<typeof MultipartRecord>;

/** `request`: a file still arriving in one request. */
const RequestRecord = z.object({
  uploadId: z.string(),
  format: z.enum(["csv", "ndjson"]),
  /** R2's multipart id, for a body sent without a `Content-Length` (stored in parts as it arrives): to abort it. */
  r2UploadId: z.string().optional(),
  createdAt: z.number().int(),
});
export type RequestRecord = z.infer<typeof RequestRecord>;

const PartMarker = z.object({ etag: z.string().min(1), bytes: z.coerce.number().int().min(0) });

/** The most keys one R2 `delete` takes. */
const DELETE_BATCH = 1000;

export class UploadStore {
  readonly bucket: R2Bucket;
  #prefix: string;

  constructor(options: { bucket: R2Bucket; org: string }) {
    this.bucket = options.bucket;
    this.#prefix = `${encodeURIComponent(options.org)}/`;
  }

  /** The key of the file's bytes. */
  dataKey(uploadId: string): string {
    return this.#key(uploadId, "data");
  }

  async readRecord(uploadId: string): Promise<UploadRecord | null> {
    const text = await this.#text(this.#key(uploadId, "upload"));
    return text === null ? null : UploadRecord.parse(JSON.parse(text));
  }

  async readMultipart(uploadId: string): Promise<MultipartRecord | null> {
    const text = await this.#text(this.#key(uploadId, "multipart"));
    return text === null ? null : MultipartRecord.parse(JSON.parse(text));
  }

  async readRequest(uploadId: string): Promise<RequestRecord | null> {
    const text = await this.#text(this.#key(uploadId, "request"));
    return text === null ? null : RequestRecord.parse(JSON.parse(text));
  }

  async readIndex(uploadId: string): Promise<UploadIndex | null> {
    const text = await this.#text(this.#key(uploadId, "index"));
    return text === null ? null : indexFromJson(text);
  }

  async writeMultipart(record: MultipartRecord): Promise<void> {
    await this.#putJson(this.#key(record.uploadId, "multipart"), JSON.stringify(record));
  }

  async writeRequest(record: RequestRecord): Promise<void> {
    await this.#putJson(this.#key(record.uploadId, "request"), JSON.stringify(record));
  }

  /** Makes the upload ready: its index first, then the record that says it is ready. */
  async commit(record: UploadRecord, index: UploadIndex): Promise<void> {
    await this.#putJson(this.#key(record.uploadId, "index"), indexToJson(index));
    await this.#putJson(this.#key(record.uploadId, "upload"), JSON.stringify(record));
  }

  async markPart(uploadId: string, part: ReceivedPart): Promise<void> {
    await this.bucket.put(this.#key(uploadId, `parts/${part.part}`), "", {
      customMetadata: { etag: part.etag, bytes: String(part.bytes) },
    });
  }

  /** The parts received so far, by part number. */
  async listParts(uploadId: string): Promise<ReceivedPart[]> {
    const prefix = this.#key(uploadId, "parts/");
    const parts: ReceivedPart[] = [];
    let cursor: string | undefined;
    do {
      const page = await this.bucket.list({ prefix, cursor, include: ["customMetadata"] });
      for (const object of page.objects) {
        const marker = PartMarker.parse(object.customMetadata ?? {});
        parts.push({ part: Number(object.key.slice(prefix.length)), ...marker });
      }
      cursor = page.truncated ? page.cursor : undefined;
    } while (cursor !== undefined);
    return parts.sort((a, b) => a.part - b.part);
  }

  /**
   * One R2 list page of the names the org's keys are under, one per upload (its id), in key order: from the first,
   * past every key of the upload `after`, or from `cursor`, R2's own of the page before. `cursor` is null once R2 has
   * no more of them. R2 may answer fewer names than `limit` (none even) and still have more.
   */
  async listIds(options: { limit: number; after?: string | null; cursor?: string }): Promise<{ ids: string[]; cursor: string | null }> {
    const page = await this.bucket.list({
      prefix: this.#prefix,
      delimiter: "/",
      limit: options.limit,
      // "0" is the character after "/": `<id>0` sorts after every key under `<id>/`, whatever its name, and before the
      // keys of any later id (ids are all as long).
      ...(options.cursor !== undefined
        ? { cursor: options.cursor }
        : options.after
          ? { startAfter: `${this.#prefix}${options.after}0` }
          : {}),
    });
    // Each is `<org>/<id>/`: the id is what lies between.
    const ids = page.delimitedPrefixes.map((prefix) => prefix.slice(this.#prefix.length, -1));
    return { ids, cursor: page.truncated ? page.cursor : null };
  }

  /** Deletes the multipart record and the part markers of a completed upload (its data stays). */
  async forgetParts(uploadId: string): Promise<void> {
    await this.#deleteUnder(this.#key(uploadId, "parts/"));
    await this.bucket.delete(this.#key(uploadId, "multipart"));
  }

  /** Deletes the request record of an upload made ready (its request is done). */
  async forgetRequest(uploadId: string): Promise<void> {
    await this.bucket.delete(this.#key(uploadId, "request"));
  }

  /** Deletes every object of the upload: nothing of it remains, ready or not. */
  async discard(uploadId: string): Promise<void> {
    await this.#deleteUnder(this.#key(uploadId, ""));
  }

  /** The file's bytes `[offset, offset + length)`, streamed. */
  async readData(uploadId: string, range: { offset: number; length: number }): Promise<ReadableStream<Uint8Array>> {
    if (range.length === 0) return new Response(new Uint8Array(0)).body!;
    const object = await this.bucket.get(this.dataKey(uploadId), { range });
    // Its data gone after its index was read: the upload was deleted meanwhile (a run reading it cannot go on).
    if (!object) throw new TerminalError("upload_not_found", `upload ${uploadId} was deleted while a run read it`);
    return object.body;
  }

  #key(uploadId: string, name: string): string {
    return `${this.#prefix}${uploadId}/${name}`;
  }

  async #text(key: string): Promise<string | null> {
    const object = await this.bucket.get(key);
    return object === null ? null : object.text();
  }

  async #putJson(key: string, json: string): Promise<void> {
    await this.bucket.put(key, json, { httpMetadata: { contentType: "application/json" } });
  }

  /**
   * Deletes until a list finds nothing under `prefix`: an object written there meanwhile (a complete's records, as a
   * DELETE of its upload runs) is deleted too, unless written after that last list (`Uploads.complete` then finds
   * the file gone).
   */
  async #deleteUnder(prefix: string): Promise<void> {
    // Listed again from the start after each delete: what was deleted is gone, so no cursor is needed.
    for (;;) {
      const page = await this.bucket.list({ prefix, limit: DELETE_BATCH });
      if (page.objects.length === 0) return;
      await this.bucket.delete(page.objects.map((o) => o.key));
    }
  }
}

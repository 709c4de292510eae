/**
 * One org's uploads (docs/api.md "Large inputs: uploads"): receive a file in
 * one request or in parts, check and index it, describe it, open it for
 * range reads. An upload is ready only once its record is written, after
 * its bytes and its index; a file that fails its check is deleted, so no
 * half-stored upload is ever visible.
 */
import type { MultipartUploadStarted, ReadyUpload, UploadList, UploadPartReceived, UploadView } from "../api/contract";
import { forEachLimited } from "../core/collections";
import { messageOf, NotFoundError, TroupeError } from "../core/errors";
import { ingest } from "./ingest";
import { MAX_PARTS, MAX_REQUEST_UPLOAD_BYTES, type UploadFormat } from "./limits";
import { checkParts } from "./parts";
import type { ByteSource } from "./range-reader";
import type { UploadIndex } from "./upload-index";
import { UploadScan } from "./upload-scan";
import { type MultipartRecord, type UploadRecord, UploadStore } from "./upload-store";

/** An upload's id, as {@link newUploadId} makes them: also the cursor of `GET /v1/uploads`. */
export const UPLOAD_ID = /^up_[0-9a-f]{32}$/;
/**
 * Records a listing reads at once: production allows an invocation six connections open at once, R2's included (a
 * seventh waits for one of them).
 */
const RECORD_READS_IN_FLIGHT = 6;
/** How R2's Workers API ends the message of an error about a multipart upload it does not have (NoSuchUpload). */
const R2_NO_SUCH_UPLOAD = "(10024)";

/** A ready upload's index and bytes: what `readRows` reads from. */
export interface OpenUpload {
  index: UploadIndex;
  source: ByteSource;
}

/** Injected faults (the test runner's; src/clients/faults.ts): `upload.commit`, a checked file's records about to be written. */
export interface UploadFaults {
  check(point: "upload.commit"): Promise<void>;
}

export class Uploads {
  #store: UploadStore;
  #now: () => number;
  #faults: UploadFaults | null;

  constructor(options: { bucket: R2Bucket; org: string; now?: () => number; faults?: UploadFaults }) {
    this.#store = new UploadStore(options);
    this.#now = options.now ?? Date.now;
    this.#faults = options.faults ?? null;
  }

  /**
   * A whole file in one request body, streamed into R2 as it is checked.
   * `declaredBytes` is the request's `Content-Length`, or null when it was
   * sent without one (then it is stored in parts as it arrives).
   */
  async receive(body: ReadableStream<Uint8Array>, options: { format: UploadFormat; declaredBytes: number | null }): Promise<ReadyUpload> {
    const uploadId = newUploadId();
    const createdAt = this.#now();
    return this.#landing(
      uploadId,
      () => true,
      async () => {
        const index = await ingest({
          bucket: this.#store.bucket,
          key: this.#store.dataKey(uploadId),
          body,
          declaredBytes: options.declaredBytes,
          maxBytes: MAX_REQUEST_UPLOAD_BYTES,
          scan: new UploadScan({ format: options.format }),
        });
        return { createdAt, index };
      },
    );
  }

  /** Starts a multipart upload of a file in `format`: its parts come next, then `complete`. */
  async startMultipart(format: UploadFormat): Promise<MultipartUploadStarted> {
    const uploadId = newUploadId();
    const upload = await this.#store.bucket.createMultipartUpload(this.#store.dataKey(uploadId));
    await this.#store.writeMultipart({ uploadId, format, r2UploadId: upload.uploadId, createdAt: this.#now() });
    return { uploadId };
  }

  /**
   * Part `part` of a multipart upload, `bytes` long (a part is sent with its
   * length). Sending a part again replaces it. Sizes are checked at `complete`,
   * when it is known which part is the last.
   */
  async receivePart(uploadId: string, part: number, body: ReadableStream<Uint8Array>, bytes: number): Promise<UploadPartReceived> {
    if (!Number.isInteger(part) || part < 1 || part > MAX_PARTS) {
      throw new TroupeError("invalid_part_number", `part numbers run from 1 to ${MAX_PARTS}; got ${part}`, { httpStatus: 400 });
    }
    if (bytes === 0)
      throw new TroupeError("upload_part_empty", `part ${part} is empty; every part holds at least one byte`, { httpStatus: 400 });
    const multipart = await this.#receiving(uploadId);
    const dataKey = this.#store.dataKey(uploadId);
    const upload = this.#store.bucket.resumeMultipartUpload(dataKey, multipart.r2UploadId);
    let etag: string;
    try {
      ({ etag } = await upload.uploadPart(part, body));
    } catch (error) {
      // A complete has joined the parts (it is checking the file): R2 takes no more of them.
      if (await this.#store.bucket.head(dataKey)) throw completeAlready(uploadId);
      throw await this.#abortedByR2(uploadId, error);
    }
    await this.#store.markPart(uploadId, { part, etag, bytes });
    return { part, bytes };
  }

  /**
   * Joins the parts (1 to n, every one but the last the same size and at
   * least 5 MiB, the last no larger: `checkParts`), then checks and indexes the file. A
   * malformed file is deleted with its parts; the upload is then gone. Any
   * other failure keeps it, to complete again: a complete that died once R2
   * had joined the parts (past its CPU limit while it checked, say) finds the
   * file joined and checks it. Once complete, completing again answers the same.
   */
  async complete(uploadId: string): Promise<ReadyUpload> {
    const ready = await this.#readyRecord(uploadId);
    if (ready) return viewOf(ready);
    const multipart = await this.#receiving(uploadId);
    const parts = await this.#store.listParts(uploadId);
    checkParts(parts);
    const dataKey = this.#store.dataKey(uploadId);
    if (!(await this.#store.bucket.head(dataKey))) {
      const upload = this.#store.bucket.resumeMultipartUpload(dataKey, multipart.r2UploadId);
      // Another complete of this upload may have joined them first: then its file is the one to check.
      await upload.complete(parts.map(({ part, etag }) => ({ partNumber: part, etag }))).catch(async (error: unknown) => {
        if (!(await this.#store.bucket.head(dataKey))) throw await this.#abortedByR2(uploadId, error);
      });
    }
    const fileAtFault = (error: unknown) => error instanceof TroupeError && error.httpStatus < 500;
    const view = await this.#landing(uploadId, fileAtFault, async () => {
      const object = await this.#store.bucket.get(dataKey);
      if (!object) throw new Error(`the completed upload ${uploadId} has no data object`);
      const scan = new UploadScan({ format: multipart.format });
      for await (const chunk of object.body) await scan.write(chunk);
      const index = await scan.finish();
      // Deleted while it was checked (DELETE found it receiving parts): recording it now would bring back a ready upload
      // whose file is gone. (Completed by another complete meanwhile, it is still there: this one records the same.)
      if (!(await this.#store.readMultipart(uploadId)) && !(await this.#readyRecord(uploadId))) throw uploadNotFound(uploadId);
      return { createdAt: multipart.createdAt, index };
    });
    // Deleted between that look and the commit: the file is gone, and the records just written make a ready upload of
    // nothing. A DELETE deletes until it finds nothing left, so records written before its last look went with the
    // file, and records written after it find the file gone here.
    if (!(await this.#store.bucket.head(dataKey))) {
      await this.#store.discard(uploadId);
      throw uploadNotFound(uploadId);
    }
    await this.#store.forgetParts(uploadId);
    return view;
  }

  /**
   * What R2 said of a multipart upload it no longer has (it aborts one left
   * unfinished for seven days): the upload is gone, its records with it, and
   * `upload_not_found` says to start again. Any other error as it was.
   */
  async #abortedByR2(uploadId: string, error: unknown): Promise<unknown> {
    if (!messageOf(error).includes(R2_NO_SUCH_UPLOAD)) return error;
    await this.#store.discard(uploadId);
    return new NotFoundError(
      "upload_not_found",
      `upload ${uploadId} is gone: R2 discarded its parts (it aborts a multipart upload left unfinished for seven days); start again`,
    );
  }

  /** `GET /v1/uploads/<id>`: a ready upload, one receiving parts, or null (no such upload in this org). */
  async describe(uploadId: string): Promise<UploadView | null> {
    const ready = await this.#readyRecord(uploadId);
    if (ready) return viewOf(ready);
    const multipart = UPLOAD_ID.test(uploadId) ? await this.#store.readMultipart(uploadId) : null;
    if (!multipart) return null;
    return { uploadId, status: "receiving", format: multipart.format, createdAt: new Date(multipart.createdAt).toISOString() };
  }

  /**
   * `GET /v1/uploads`: up to `limit` of the org's uploads, ready or receiving parts, in id order, after the upload
   * `after` (the `nextCursor` of a page before; null: from the first). A page may hold fewer than `limit` (none
   * even) and still have a `nextCursor`: it is null only once R2 has nothing more under the org.
   */
  async list(options: { limit: number; after: string | null }): Promise<UploadList> {
    let page = await this.#store.listIds({ limit: options.limit, after: options.after });
    let ids = page.ids.filter((id) => UPLOAD_ID.test(id));
    // A page of no upload id leaves no id to resume after: go on with R2's own cursor until one comes, or nothing is left.
    while (ids.length === 0 && page.cursor !== null) {
      page = await this.#store.listIds({ limit: options.limit, cursor: page.cursor });
      ids = page.ids.filter((id) => UPLOAD_ID.test(id));
    }
    const views: (UploadView | null)[] = ids.map(() => null);
    await forEachLimited(ids, RECORD_READS_IN_FLIGHT, async (id, i) => {
      views[i] = await this.describe(id);
    });
    // An id with neither record (an upload being deleted, what a failed one left) is left out of the page, but the
    // cursor is the last id R2 gave, listed or not: the next page starts past it, and the listing never ends early.
    return { uploads: views.filter((view) => view !== null), nextCursor: page.cursor === null ? null : ids.at(-1)! };
  }

  /**
   * `DELETE /v1/uploads/<id>`: removes the upload, ready or receiving parts
   * (an unfinished multipart upload is aborted in R2 first). False when this
   * org has no such upload.
   */
  async remove(uploadId: string): Promise<boolean> {
    if (!UPLOAD_ID.test(uploadId)) return false;
    const ready = await this.#readyRecord(uploadId);
    const multipart = ready ? null : await this.#store.readMultipart(uploadId);
    if (!ready && !multipart) return false;
    if (multipart) {
      await this.#store.bucket
        .resumeMultipartUpload(this.#store.dataKey(uploadId), multipart.r2UploadId)
        .abort()
        .catch((error: unknown) => {
          // Already completed or aborted by R2 (it aborts unfinished uploads after a week): nothing is left to abort.
          console.warn(`upload ${uploadId}: could not abort its multipart upload`, error);
        });
    }
    await this.#store.discard(uploadId);
    return true;
  }

  /** A ready upload's index and bytes, for `readRows`; null when there is no such ready upload in this org. */
  async open(uploadId: string): Promise<OpenUpload | null> {
    if (!(await this.#readyRecord(uploadId))) return null;
    const index = await this.#store.readIndex(uploadId);
    if (!index) throw new Error(`upload ${uploadId} is ready but has no index`);
    return { index, source: { read: (range) => this.#store.readData(uploadId, range) } };
  }

  /** Stores a checked file's index and record; on a failure on the way that `discards`, deletes all of the upload. */
  async #landing(
    uploadId: string,
    discards: (error: unknown) => boolean,
    land: () => Promise<{ createdAt: number; index: UploadIndex }>,
  ): Promise<ReadyUpload> {
    try {
      const { createdAt, index } = await land();
      const record: UploadRecord = {
        uploadId,
        format: index.format,
        rows: index.rows,
        bytes: index.bytes,
        columns: index.columns,
        ...(index.sha256 ? { sha256: index.sha256 } : {}),
        createdAt,
      };
      await this.#faults?.check("upload.commit");
      await this.#store.commit(record, index);
      return viewOf(record);
    } catch (error) {
      if (discards(error)) await this.#store.discard(uploadId);
      throw error;
    }
  }

  async #readyRecord(uploadId: string): Promise<UploadRecord | null> {
    return UPLOAD_ID.test(uploadId) ? this.#store.readRecord(uploadId) : null;
  }

  /** The multipart record of an upload still receiving parts, or the reason it is not one. */
  async #receiving(uploadId: string): Promise<MultipartRecord> {
    const multipart = UPLOAD_ID.test(uploadId) ? await this.#store.readMultipart(uploadId) : null;
    if (multipart) return multipart;
    if (await this.#readyRecord(uploadId)) throw completeAlready(uploadId);
    throw uploadNotFound(uploadId);
  }
}

function completeAlready(uploadId: string): TroupeError {
  return new TroupeError("upload_complete", `upload ${uploadId} is complete and takes no more parts; start a new upload`, {
    httpStatus: 409,
  });
}

export function uploadNotFound(uploadId: string): NotFoundError {
  return new NotFoundError("upload_not_found", `no upload ${JSON.stringify(uploadId)} in this org`);
}

/** An id no one can guess: 128 random bits. */
function newUploadId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `up_${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

function viewOf(record: UploadRecord): ReadyUpload {
  const { uploadId, rows, bytes, columns, format, sha256, createdAt } = record;
  return {
    uploadId,
    rows,
    bytes,
    columns,
    format,
    ...(sha256 ? { sha256 } : {}),
    status: "ready",
    createdAt: new Date(createdAt).toISOString(),
  };
}

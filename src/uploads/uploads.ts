/**
 * One org's uploads (docs/api.md "Large inputs: uploads"): receive a file in
 * one request or in parts, check and index it, describe it, open it for
 * range reads. An upload is ready only once its record is written, after
 * its bytes and its index. Until then it is `receiving`: its request's or
 * multipart upload's record is written before its first byte, so that an
 * upload whose request died on the way is listed and can be deleted; and its
 * watcher (the org's directory) is told of it before that, to look at it
 * again once it can no longer be receiving and delete what it left ({@link
 * Uploads.sweep}). A file that fails its check is deleted, so no half-stored
 * upload is ever ready.
 */
import type { MultipartUploadStarted, ReadyUpload, UploadList, UploadPartReceived, UploadView } from "../api/contract";
import { forEachLimited } from "../core/collections";
import { messageOf, TroupeError } from "../core/errors";
import { completeAlready, deletedBeforeReady, discardedByR2, uploadNotFound } from "./errors";
import { type IngestOptions, ingest, tooLarge } from "./ingest";
import { MAX_PARTS, MAX_REQUEST_UPLOAD_BYTES, type UploadFormat } from "./limits";
import { checkParts } from "./parts";
import type { ByteSource } from "./range-reader";
import type { UploadIndex } from "./upload-index";
import { UploadScan } from "./upload-scan";
import { type MultipartRecord, type RequestRecord, type UploadRecord, UploadStore } from "./upload-store";

/** An upload's id, as {@link newUploadId} makes them: also the cursor of `GET /v1/uploads`. */
export const UPLOAD_ID = /^up_[0-9a-f]{32}$/;
/**
 * How long an upload may be receiving: R2 aborts a multipart upload left unfinished for seven days, and no request
 * lasts that long. One receiving for longer is gone; what it left is deleted when it is found.
 */
const MAX_RECEIVING_MS = 7 * 24 * 60 * 60 * 1000;
/** An upload is looked at again this long after it began ({@link Uploads.sweep}): a minute after it can be receiving. */
const SWEEP_AFTER_MS = MAX_RECEIVING_MS + 60_000;
/** The newest time an id can hold (2^48 - 1 ms, in the year 10889): ids count down from it, so they sort newest first. */
const LAST_ID_TIME_MS = 0xffff_ffff_ffff;
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

/**
 * Who looks at an upload again at `dueAt` and calls {@link Uploads.sweep} (the org's directory, by its alarm): told
 * before the upload's first byte is stored, so that nothing of an upload is stored unwatched.
 */
export type UploadWatcher = (watch: { uploadId: string; dueAt: number }) => Promise<void>;

export class Uploads {
  #store: UploadStore;
  #now: () => number;
  #faults: UploadFaults | null;
  #watch: UploadWatcher | null;

  /** `watch`: whoever starts uploads in production passes one (HTTP); readers need none, nor do tests of one upload. */
  constructor(options: { bucket: R2Bucket; org: string; now?: () => number; faults?: UploadFaults; watch?: UploadWatcher }) {
    this.#store = new UploadStore(options);
    this.#now = options.now ?? Date.now;
    this.#faults = options.faults ?? null;
    this.#watch = options.watch ?? null;
  }

  /**
   * A whole file in one request body, streamed into R2 as it is checked.
   * `declaredBytes` is the request's `Content-Length`, or null when it was
   * sent without one (then it is stored in parts as it arrives). Its record
   * is written before its first byte, so that a request that dies on the way
   * leaves an upload listed `receiving`, which a DELETE removes, rather than
   * bytes no one sees. A DELETE while it arrives wins: this then answers
   * `upload_not_found` and keeps nothing.
   */
  async receive(body: ReadableStream<Uint8Array>, options: { format: UploadFormat; declaredBytes: number | null }): Promise<ReadyUpload> {
    // Refused before anything is stored (ingest counts what arrives against the limit).
    if (options.declaredBytes !== null && options.declaredBytes > MAX_REQUEST_UPLOAD_BYTES) throw tooLarge(MAX_REQUEST_UPLOAD_BYTES);
    const { uploadId, createdAt } = await this.#begin();
    const key = this.#store.dataKey(uploadId);
    // A body of unknown length goes into a multipart upload, started here so that the record names it (to abort it).
    const into: IngestOptions["into"] =
      options.declaredBytes === null
        ? { multipart: await this.#store.bucket.createMultipartUpload(key) }
        : { bytes: options.declaredBytes };
    await this.#store.writeRequest({
      uploadId,
      format: options.format,
      createdAt,
      ...("multipart" in into ? { r2UploadId: into.multipart.uploadId } : {}),
    });
    const view = await this.#landing(uploadId, {
      discards: () => true,
      kept: async () => (await this.#store.readRequest(uploadId)) !== null,
      land: async () => {
        const scan = new UploadScan({ format: options.format });
        const index = await ingest({ bucket: this.#store.bucket, key, body, into, maxBytes: MAX_REQUEST_UPLOAD_BYTES, scan }).catch(
          async (error: unknown) => {
            // A DELETE aborts the multipart upload the body streams into: what failed is then the upload's deletion.
            throw (await this.#store.readRequest(uploadId)) ? error : deletedBeforeReady(uploadId);
          },
        );
        return { createdAt, index };
      },
    });
    // The upload is ready whatever happens to this: a record left over is read after the ready one, and goes with it.
    await this.#store.forgetRequest(uploadId).catch((error: unknown) => {
      console.warn(`upload ${uploadId}: ready, but its request's record stays`, error);
    });
    return view;
  }

  /** Starts a multipart upload of a file in `format`: its parts come next, then `complete`. */
  async startMultipart(format: UploadFormat): Promise<MultipartUploadStarted> {
    const { uploadId, createdAt } = await this.#begin();
    const upload = await this.#store.bucket.createMultipartUpload(this.#store.dataKey(uploadId));
    await this.#store.writeMultipart({ uploadId, format, r2UploadId: upload.uploadId, createdAt });
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
    const view = await this.#landing(uploadId, {
      discards: (error) => error instanceof TroupeError && error.httpStatus < 500,
      // Completed by another complete meanwhile, it is still there: this one records the same.
      kept: async () => (await this.#store.readMultipart(uploadId)) !== null || (await this.#readyRecord(uploadId)) !== null,
      land: async () => {
        const object = await this.#store.bucket.get(dataKey);
        if (!object) throw new Error(`the completed upload ${uploadId} has no data object`);
        const scan = new UploadScan({ format: multipart.format });
        for await (const chunk of object.body) await scan.write(chunk);
        return { createdAt: multipart.createdAt, index: await scan.finish() };
      },
    });
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
    return discardedByR2(uploadId);
  }

  /**
   * `GET /v1/uploads/<id>`: a ready upload, one receiving its bytes (in parts or in one request), or null (no such
   * upload in this org, or one receiving for longer than it can: see {@link MAX_RECEIVING_MS}).
   */
  async describe(uploadId: string): Promise<UploadView | null> {
    const ready = await this.#readyRecord(uploadId);
    if (ready) return viewOf(ready);
    const receiving = await this.#stillReceiving(uploadId);
    if (!receiving) return null;
    return { uploadId, status: "receiving", format: receiving.format, createdAt: new Date(receiving.createdAt).toISOString() };
  }

  /**
   * `GET /v1/uploads`: up to `limit` of the org's uploads, ready or receiving, in id order (newest first: see
   * {@link newUploadId}), after the upload `after` (the `nextCursor` of a page before; null: from the first). A page
   * may hold fewer than `limit` (none even) and still have a `nextCursor`: it is null only once R2 has nothing more
   * under the org.
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
    // An id with no record (an upload being deleted, what a failed one left), or gone (receiving too long), is left
    // out of the page, but the cursor is the last id R2 gave, listed or not: the next page starts past it, and the
    // listing never ends early.
    return { uploads: views.filter((view) => view !== null), nextCursor: page.cursor === null ? null : ids.at(-1)! };
  }

  /**
   * `DELETE /v1/uploads/<id>`: removes the upload, ready or receiving (an
   * unfinished multipart upload is aborted in R2 first). A request still
   * sending it then answers `upload_not_found`. False when this org has no
   * such upload.
   */
  async remove(uploadId: string): Promise<boolean> {
    if (await this.#readyRecord(uploadId)) {
      await this.#store.discard(uploadId);
      return true;
    }
    const receiving = await this.#stillReceiving(uploadId);
    if (!receiving) return false;
    await this.#drop(uploadId, receiving);
    return true;
  }

  /** A ready upload's index and bytes, for `readRows`; null when there is no such ready upload in this org. */
  async open(uploadId: string): Promise<OpenUpload | null> {
    if (!(await this.#readyRecord(uploadId))) return null;
    const index = await this.#store.readIndex(uploadId);
    if (!index) throw new Error(`upload ${uploadId} is ready but has no index`);
    return { index, source: { read: (range) => this.#store.readData(uploadId, range) } };
  }

  /**
   * Looks at an upload again, as its watcher does once it is due: deletes what
   * is left of it unless it is ready or still receiving (an upload receiving
   * for too long is gone, and deleted: see {@link MAX_RECEIVING_MS}); what a
   * request that died before it wrote any record left goes too. Answers when
   * to look again: null once there is nothing more to look at.
   */
  async sweep(uploadId: string): Promise<number | null> {
    if (await this.#readyRecord(uploadId)) return null;
    const receiving = await this.#stillReceiving(uploadId);
    if (receiving) return receiving.createdAt + SWEEP_AFTER_MS;
    if (UPLOAD_ID.test(uploadId)) await this.#store.discard(uploadId);
    return null;
  }

  /** A new upload's id and time, once its watcher knows of it: nothing of it is stored yet. */
  async #begin(): Promise<{ uploadId: string; createdAt: number }> {
    const createdAt = this.#now();
    const uploadId = newUploadId(createdAt);
    await this.#watch?.({ uploadId, dueAt: createdAt + SWEEP_AFTER_MS });
    return { uploadId, createdAt };
  }

  /**
   * Stores the index and record of the file `land` received and checked, unless the upload was deleted meanwhile
   * (`kept` says whether it still is): then, as on a failure on the way that `discards`, deletes all of the upload.
   */
  async #landing(
    uploadId: string,
    steps: {
      land: () => Promise<{ createdAt: number; index: UploadIndex }>;
      kept: () => Promise<boolean>;
      discards: (error: unknown) => boolean;
    },
  ): Promise<ReadyUpload> {
    let record: UploadRecord;
    try {
      const { createdAt, index } = await steps.land();
      // Deleted while it was received or checked (a DELETE found it receiving): recording it now would bring back a
      // ready upload whose file is gone.
      if (!(await steps.kept())) throw deletedBeforeReady(uploadId);
      record = {
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
    } catch (error) {
      if (steps.discards(error)) await this.#store.discard(uploadId);
      throw error;
    }
    // Deleted between that look and the commit: the file is gone, and the records just written make a ready upload of
    // nothing. A DELETE deletes until it finds nothing left, so records written before its last look went with the
    // file, and records written after it find the file gone here.
    if (!(await this.#store.bucket.head(this.#store.dataKey(uploadId)))) {
      await this.#store.discard(uploadId);
      throw deletedBeforeReady(uploadId);
    }
    return viewOf(record);
  }

  async #readyRecord(uploadId: string): Promise<UploadRecord | null> {
    return UPLOAD_ID.test(uploadId) ? this.#store.readRecord(uploadId) : null;
  }

  /** The multipart record of an upload still receiving parts, or the reason it is not one. */
  async #receiving(uploadId: string): Promise<MultipartRecord> {
    const multipart = UPLOAD_ID.test(uploadId) ? await this.#store.readMultipart(uploadId) : null;
    if (multipart && this.#expired(multipart)) {
      await this.#drop(uploadId, multipart);
      throw discardedByR2(uploadId);
    }
    if (multipart) return multipart;
    if (await this.#readyRecord(uploadId)) throw completeAlready(uploadId);
    if (await this.#stillReceiving(uploadId)) {
      throw new TroupeError("upload_not_multipart", `upload ${uploadId} arrives in one request: it takes no parts and no complete`, {
        httpStatus: 409,
      });
    }
    throw uploadNotFound(uploadId);
  }

  /** The record of an upload receiving its bytes, in parts or in one request; null when there is none, or it expired. */
  async #stillReceiving(uploadId: string): Promise<MultipartRecord | RequestRecord | null> {
    if (!UPLOAD_ID.test(uploadId)) return null;
    const record = (await this.#store.readMultipart(uploadId)) ?? (await this.#store.readRequest(uploadId));
    if (!record || !this.#expired(record)) return record;
    await this.#drop(uploadId, record);
    return null;
  }

  /** Receiving for longer than an upload can (see {@link MAX_RECEIVING_MS}): it is gone. */
  #expired(record: { createdAt: number }): boolean {
    return this.#now() - record.createdAt > MAX_RECEIVING_MS;
  }

  /** Deletes an upload receiving its bytes: the multipart upload they go into, if any, is aborted in R2 first. */
  async #drop(uploadId: string, record: { r2UploadId?: string }): Promise<void> {
    if (record.r2UploadId !== undefined) {
      await this.#store.bucket
        .resumeMultipartUpload(this.#store.dataKey(uploadId), record.r2UploadId)
        .abort()
        .catch((error: unknown) => {
          // Already completed or aborted by R2 (it aborts unfinished uploads after a week): nothing is left to abort.
          console.warn(`upload ${uploadId}: could not abort its multipart upload`, error);
        });
    }
    await this.#store.discard(uploadId);
  }
}

/**
 * An id no one can guess that sorts newest first (R2 lists keys in order, and so `GET /v1/uploads`): 12 hex digits
 * of {@link LAST_ID_TIME_MS} minus the time it was made, then 80 random bits. Ids made before they held a time are
 * 128 random bits, and sort anywhere.
 */
function newUploadId(createdAt: number): string {
  const countdown = (LAST_ID_TIME_MS - createdAt).toString(16).padStart(12, "0");
  const random = Array.from(crypto.getRandomValues(new Uint8Array(10)), (b) => b.toString(16).padStart(2, "0")).join("");
  return `up_${countdown}${random}`;
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

/**
 * Streams a file into R2 while its scan reads the same bytes: each chunk is
 * checked by the scan, then written, so memory holds a chunk (a part, for a
 * stream of unknown length) and never the file. A malformed file, or one
 * over the byte limit, errors the stream before its end reaches R2, so R2
 * never makes the object; the caller still discards the key on any failure.
 */
import { asTroupeError } from "../core/errors";
import { UploadTooLargeError } from "./errors";
import { MIN_PART_BYTES } from "./limits";
import type { UploadScan } from "./upload-scan";
import type { UploadIndex } from "./upload-index";

/**
 * The part size of a stream of unknown length, written as a multipart upload
 * (R2 needs a stream's length up front): R2's smallest part, so that is all
 * memory holds of it.
 */
export const STREAM_PART_BYTES = MIN_PART_BYTES;

export interface IngestOptions {
  bucket: R2Bucket;
  key: string;
  body: ReadableStream<Uint8Array>;
  /**
   * Where the bytes go: one `put` of the length the request declared (`Content-Length`), or, for a body sent
   * without one, the parts of a multipart upload of `key` that the caller started (and recorded, so that it can be
   * aborted even if this request dies on the way). That upload is aborted here when anything fails.
   */
  into: { bytes: number } | { multipart: R2MultipartUpload };
  /** What may arrive: past it the stream errors. A declared length past it is the caller's to refuse, before it stores anything. */
  maxBytes: number;
  scan: UploadScan;
}

/** Writes `body` to `key`, scanned on the way; the file's index once both the write and the scan succeeded. */
export async function ingest(options: IngestOptions): Promise<UploadIndex> {
  const { bucket, key, into, maxBytes, scan } = options;
  let index: UploadIndex | null = null;
  let received = 0;
  // Pulled by R2's side a chunk at a time: the body is read no faster than R2 takes it.
  const reader = options.body.getReader();
  const scanned = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) {
          // The file's last row is checked before R2 sees the end of its bytes.
          index = await scan.finish();
          controller.close();
          return;
        }
        received += value.byteLength;
        if (received > maxBytes) throw tooLarge(maxBytes);
        await scan.write(value);
        controller.enqueue(value);
      } catch (error) {
        // The rest of the body is not wanted: stop reading it while the request is still open.
        // The failure to report is `error`; one of the cancel itself would only hide it.
        await reader.cancel(error).catch(() => undefined);
        throw error;
      }
    },
    cancel: (reason) => reader.cancel(reason),
  });
  if ("bytes" in into) await putWhole(bucket, key, scanned, into.bytes);
  else await putInParts(into.multipart, scanned);
  if (index === null) throw new Error("the upload's stream ended without its scan finishing");
  return index;
}

/** One `put` of a stream of known length. */
async function putWhole(bucket: R2Bucket, key: string, scanned: ReadableStream<Uint8Array>, bytes: number): Promise<void> {
  const sized = new FixedLengthStream(bytes);
  const [piped, put] = await Promise.allSettled([scanned.pipeTo(sized.writable), bucket.put(key, sized.readable)]);
  if (piped.status === "rejected" && (asTroupeError(piped.reason) || put.status === "fulfilled")) throw piped.reason;
  if (put.status === "rejected") throw put.reason;
}

/** `STREAM_PART_BYTES` parts of `upload`, aborted when anything fails. */
async function putInParts(upload: R2MultipartUpload, scanned: ReadableStream<Uint8Array>): Promise<void> {
  try {
    const parts: R2UploadedPart[] = [];
    let buffer = new Uint8Array(STREAM_PART_BYTES);
    let filled = 0;
    for await (const chunk of scanned) {
      let at = 0;
      while (at < chunk.length) {
        const take = Math.min(chunk.length - at, buffer.length - filled);
        buffer.set(chunk.subarray(at, at + take), filled);
        filled += take;
        at += take;
        if (filled === buffer.length) {
          parts.push(await upload.uploadPart(parts.length + 1, buffer));
          buffer = new Uint8Array(STREAM_PART_BYTES);
          filled = 0;
        }
      }
    }
    if (filled > 0 || parts.length === 0) parts.push(await upload.uploadPart(parts.length + 1, buffer.subarray(0, filled)));
    await upload.complete(parts);
  } catch (error) {
    await upload.abort().catch((abortError: unknown) => {
      // The first failure is the one to report; R2 aborts an abandoned multipart upload by itself after 7 days.
      console.warn(`could not abort the multipart upload of ${upload.key}`, abortError);
    });
    throw error;
  }
}

export function tooLarge(maxBytes: number): UploadTooLargeError {
  return new UploadTooLargeError(
    `one request carries at most ${maxBytes} bytes; send a larger file as a multipart upload (POST /v1/uploads?multipart=1)`,
    { maxBytes },
  );
}

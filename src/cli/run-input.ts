/**
 * A run's `input` from the command line: `--csv FILE`, `--ndjson FILE` or
 * `--input JSON`. The one place that decides how a file reaches the server:
 * a file is uploaded (`POST /v1/uploads`, docs/api.md "Large inputs"), in
 * one request up to 95 MB and in parts beyond, and the run takes
 * `{ upload: uploadId }`; the server checks the file as it arrives and
 * refuses a malformed one naming its line. A ready upload never expires (it
 * is only listed, `troupe uploads`): one that no run will read (an
 * estimate's, a refused run's) is deleted with {@link discardUpload}.
 */
import { constants, openAsBlob } from "node:fs";
import { access, stat } from "node:fs/promises";
import type { TroupeClient } from "../client/index.ts";
import { repeatedKeyAt } from "../api/json-keys.ts";
import { describeError, EXIT, UsageError } from "./exit-codes.ts";
import { RETRY_DELAYS_MS, retrying } from "./retry.ts";

/** How a file is sent: in one request up to `maxRequestBytes`, else in parts of `partBytes`, each asked again after `retryDelaysMs`. */
export interface UploadLimits {
  maxRequestBytes: number;
  partBytes: number;
  retryDelaysMs: readonly number[];
}

const UPLOAD_LIMITS: UploadLimits = {
  // The most bytes one upload request carries (src/uploads/limits.ts `MAX_REQUEST_UPLOAD_BYTES`).
  maxRequestBytes: 95_000_000,
  // Parts of a larger file: all this size but the last (R2 wants at least 5 MiB, all equal).
  partBytes: 64 * 1024 * 1024,
  retryDelaysMs: RETRY_DELAYS_MS,
};

/** Where the run's input comes from: exactly one of these. */
export interface InputOptions {
  csv?: string;
  ndjson?: string;
  input?: string;
}

/** Exactly one input source, or a usage error naming the choices. */
export function inputSource(options: InputOptions): { kind: "csv" | "ndjson"; file: string } | { kind: "json"; text: string } {
  const given = (["csv", "ndjson", "input"] as const).filter((k) => options[k] !== undefined);
  if (given.length !== 1) {
    throw new UsageError(
      given.length
        ? `give one input, not ${given.map((k) => `--${k}`).join(" and ")}`
        : "give the run's input: --csv FILE, --ndjson FILE or --input JSON",
    );
  }
  if (options.csv !== undefined) return { kind: "csv", file: options.csv };
  if (options.ndjson !== undefined) return { kind: "ndjson", file: options.ndjson };
  return { kind: "json", text: options.input! };
}

/** A run's input as the request body carries it, and the upload it names. */
export interface RunInput {
  /** The `input` of the request body: the JSON given, or `{ upload: uploadId }`. */
  input: unknown;
  /** The uploaded file's id; null for `--input JSON`. */
  uploadId: string | null;
}

/**
 * The run's input: the JSON given, or the file, uploaded. A part or the
 * complete that fails as a restart would (unreachable, 429, 5xx) is sent
 * again (docs/api.md: a part sent again replaces it; a complete may be
 * asked again); the single request is not, as its retry would store the
 * file twice.
 */
export async function runInput(options: InputOptions, client: TroupeClient, limits: UploadLimits = UPLOAD_LIMITS): Promise<RunInput> {
  const source = inputSource(options);
  if (source.kind === "json") return { input: parseJson(source.text, "--input"), uploadId: null };
  const size = await sizeOf(source.file);
  const blob = await openAsBlob(source.file);
  const format = source.kind;
  if (size <= limits.maxRequestBytes) {
    const { uploadId } = await client.upload(blob, { format });
    return { input: { upload: uploadId }, uploadId };
  }
  const { uploadId } = await client.startMultipartUpload({ format });
  // Interrupted while the parts go (Ctrl-C, minutes into a large file): the upload is deleted before the CLI exits,
  // and nothing more is sent (a part to the deleted upload, a run over it, a second delete).
  let exiting: Promise<never> | null = null;
  const interrupt = () => {
    exiting = discardUpload(client, uploadId).then(() => process.exit(EXIT.interrupted));
  };
  process.once("SIGINT", interrupt);
  try {
    for (let part = 1, at = 0; at < size; part++, at += limits.partBytes) {
      if (exiting) return await exiting;
      const bytes = blob.slice(at, Math.min(size, at + limits.partBytes));
      await retrying(`part ${part} of ${source.file}`, () => client.uploadPart(uploadId, part, bytes), limits.retryDelaysMs);
    }
    if (exiting) return await exiting;
    await retrying(`the upload of ${source.file}`, () => client.completeUpload(uploadId), limits.retryDelaysMs);
    if (exiting) return await exiting;
  } catch (error) {
    if (exiting) return await exiting;
    // One left half sent would stay on the server, listed `receiving`, for a week (until its org's directory sweeps it).
    await discardUpload(client, uploadId);
    throw error;
  } finally {
    process.off("SIGINT", interrupt);
  }
  return { input: { upload: uploadId }, uploadId };
}

/**
 * Deletes an upload that no run will read. The command's answer stands
 * whatever the delete does: a failure is a warning on stderr, naming the
 * upload left behind.
 */
export async function discardUpload(client: TroupeClient, uploadId: string | null): Promise<void> {
  if (uploadId === null) return;
  try {
    await client.deleteUpload(uploadId);
  } catch (error) {
    process.stderr.write(
      `troupe: warning: could not delete upload ${uploadId} (${describeError(error)}); it stays on the server: DELETE /v1/uploads/${uploadId}\n`,
    );
  }
}

/**
 * Parses JSON given on the command line, or a usage error saying where it is wrong. A key given twice in one object
 * is refused, as the server refuses it: parsed here, it would reach the server with one of its values dropped.
 */
export function parseJson(text: string, what: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${what} is not valid JSON: ${(error as Error).message}`);
  }
  const repeated = repeatedKeyAt(text);
  if (repeated)
    throw new UsageError(
      `${what} gives the key ${JSON.stringify([...repeated.path, repeated.key].join("."))} twice in one object: give each key once`,
    );
  return value;
}

/**
 * The file's size, or a usage error saying why it cannot be read. A file is read as it is sent: one that is not a
 * regular file (a directory; a pipe, whose size says nothing) would fail mid-request, looking like the server's fault.
 */
async function sizeOf(file: string): Promise<number> {
  let stats: Awaited<ReturnType<typeof stat>>;
  try {
    stats = await stat(file);
    await access(file, constants.R_OK);
  } catch (error) {
    throw new UsageError(
      `cannot read ${file}: ${(error as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (error as Error).message}`,
    );
  }
  if (!stats.isFile()) throw new UsageError(`cannot read ${file}: not a regular file (a directory or a pipe); give a file`);
  return stats.size;
}

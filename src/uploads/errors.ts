/** The errors of an upload: a malformed file names its line; a file over a limit says which; one gone says why. */
import { NotFoundError, TroupeError } from "../core/errors";

/**
 * The file is not what its format says (a ragged CSV row, a line that is not a
 * JSON object, no header): HTTP 400 `malformed_upload`, naming the 1-based line
 * of the file where the offending row starts.
 */
export class MalformedUploadError extends TroupeError {
  readonly line: number;
  constructor(line: number, reason: string) {
    super("malformed_upload", `line ${line}: ${reason}`, { httpStatus: 400, details: { line, reason } });
    this.line = line;
  }
}

/** The upload is over a size limit: HTTP 413 `upload_too_large`. */
export class UploadTooLargeError extends TroupeError {
  constructor(message: string, details: Record<string, number>) {
    super("upload_too_large", message, { httpStatus: 413, details });
  }
}

/** A part or a `complete` sent to an upload already complete: HTTP 409 `upload_complete`. */
export function completeAlready(uploadId: string): TroupeError {
  return new TroupeError("upload_complete", `upload ${uploadId} is complete and takes no more parts; start a new upload`, {
    httpStatus: 409,
  });
}

/** No such upload in the org (another org's, deleted, or an id never given out): HTTP 404 `upload_not_found`. */
export function uploadNotFound(uploadId: string): NotFoundError {
  return new NotFoundError("upload_not_found", `no upload ${JSON.stringify(uploadId)} in this org`);
}

/** A DELETE landed while the upload was received or checked: it wins, and nothing is kept. */
export function deletedBeforeReady(uploadId: string): NotFoundError {
  return new NotFoundError("upload_not_found", `upload ${uploadId} was deleted before it was ready; nothing of it is kept`);
}

/** R2 no longer has the upload's multipart upload (it aborts one left unfinished for seven days). */
export function discardedByR2(uploadId: string): NotFoundError {
  return new NotFoundError(
    "upload_not_found",
    `upload ${uploadId} is gone: R2 discarded its parts (it aborts a multipart upload left unfinished for seven days); start again`,
  );
}

/** The errors of an upload: a malformed file names its line; a file over a limit says which. */
import { TroupeError } from "../core/errors";

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

/**
 * R2's rules for joining a multipart upload's parts, checked before asking R2
 * so that a refusal says which part to send again: parts 1 to n, none
 * missing; every part but the last the same size, at least 5 MiB; the last no
 * larger than the others.
 */
import { TroupeError } from "../core/errors";
import { MIN_PART_BYTES } from "./limits";

/** A part received: its number, its size and R2's etag for it. */
export interface ReceivedPart {
  part: number;
  etag: string;
  bytes: number;
}

/** Throws a 400 naming the first part that breaks a rule; `parts` are sorted by number. */
export function checkParts(parts: readonly ReceivedPart[]): void {
  if (parts.length === 0) throw refusal("upload_parts_missing", "no part was uploaded; PUT parts 1 to n, then complete", {});
  const missing = parts.findIndex((p, i) => p.part !== i + 1);
  if (missing !== -1) {
    throw refusal(
      "upload_parts_missing",
      `part ${missing + 1} is missing (parts received: ${runsOf(parts)}); parts run from 1 with none missing`,
      {
        missing: missing + 1,
      },
    );
  }
  const size = parts[0]!.bytes;
  for (const { part, bytes } of parts.slice(0, -1)) {
    if (bytes < MIN_PART_BYTES) {
      throw refusal(
        "upload_part_too_small",
        `part ${part} is ${bytes} bytes; every part but the last must be at least ${MIN_PART_BYTES} bytes (5 MiB): send it again larger`,
        { part, bytes, minBytes: MIN_PART_BYTES },
      );
    }
    if (bytes !== size) {
      throw refusal(
        "upload_parts_uneven",
        `part ${part} is ${bytes} bytes and part 1 is ${size}; every part but the last must be the same size`,
        {
          part,
          bytes,
          partBytes: size,
        },
      );
    }
  }
  const last = parts.at(-1)!;
  if (parts.length > 1 && last.bytes > size) {
    throw refusal(
      "upload_parts_uneven",
      `the last part (${last.part}) is ${last.bytes} bytes, larger than the others (${size}); it may be smaller, not larger`,
      {
        part: last.part,
        bytes: last.bytes,
        partBytes: size,
      },
    );
  }
}

function refusal(code: string, message: string, details: Record<string, number>): TroupeError {
  return new TroupeError(code, message, { httpStatus: 400, details });
}

/** `1-3, 5`: part numbers as runs. */
function runsOf(parts: readonly ReceivedPart[]): string {
  const runs: string[] = [];
  for (let i = 0; i < parts.length; ) {
    let j = i;
    while (j + 1 < parts.length && parts[j + 1]!.part === parts[j]!.part + 1) j++;
    runs.push(i === j ? `${parts[i]!.part}` : `${parts[i]!.part}-${parts[j]!.part}`);
    i = j + 1;
  }
  return runs.join(", ");
}

/**
 * A run's `input` from the command line: `--csv FILE`, `--ndjson FILE` or
 * `--input JSON`. The one place that decides how a file reaches the server.
 *
 * Runs do not take uploads (`POST /v1/uploads`, docs/api.md "Large inputs")
 * as their input yet, so a file travels inside the run's JSON body: CSV as
 * `{ csv }`, NDJSON as `{ rows }`, within the server's 16 MiB request limit.
 * Once they do, {@link runInput} sends the file with `client.upload` and
 * returns `{ upload: uploadId }` instead; nothing else changes.
 */
import { readFile, stat } from "node:fs/promises";
import type { TroupeClient } from "../client/index.ts";
import { UsageError } from "./exit-codes.ts";

/** The largest request body the server accepts (src/http/app.ts `MAX_REQUEST_BYTES`). */
export const MAX_REQUEST_BYTES = 16 * 1024 * 1024;

/** Room left in the body for the play's name and the flags. */
const MAX_INLINE_INPUT_BYTES = MAX_REQUEST_BYTES - 4 * 1024;

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

/** The run's `input` for the request body. `client` is what will upload the file once runs take uploads. */
export async function runInput(options: InputOptions, _client: TroupeClient): Promise<unknown> {
  const source = inputSource(options);
  if (source.kind === "json") return parseJson(source.text, "--input");
  const text = await readInputFile(source.file);
  const input = source.kind === "csv" ? { csv: text } : { rows: parseNdjson(text, source.file) };
  // JSON escaping grows the file (every newline and quote): measure what will be sent.
  const bytes = Buffer.byteLength(JSON.stringify(input));
  if (bytes > MAX_INLINE_INPUT_BYTES) throw tooLarge(source.file, bytes);
  return input;
}

function tooLarge(file: string, bytes: number): UsageError {
  const mib = (bytes / 1024 / 1024).toFixed(1);
  return new UsageError(
    `${file} makes a ${mib} MiB request; until runs take uploads, a run's file travels in its request, limited to 16 MiB: split the file into several runs`,
  );
}

/** Parses JSON given on the command line, or a usage error saying where it is wrong. */
export function parseJson(text: string, what: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${what} is not valid JSON: ${(error as Error).message}`);
  }
}

/** One JSON object per non-empty line; a usage error names the first bad line. */
export function parseNdjson(text: string, file: string): unknown[] {
  const rows: unknown[] = [];
  const lines = text.split(/\r?\n/);
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!.trim();
    if (!line) continue;
    let row: unknown;
    try {
      row = JSON.parse(line);
    } catch (error) {
      throw new UsageError(`${file}:${i + 1}: not valid JSON (${(error as Error).message})`);
    }
    if (!row || typeof row !== "object" || Array.isArray(row)) throw new UsageError(`${file}:${i + 1}: each line must be a JSON object`);
    rows.push(row);
  }
  return rows;
}

async function readInputFile(file: string): Promise<string> {
  let size: number;
  try {
    size = (await stat(file)).size;
  } catch (error) {
    throw new UsageError(
      `cannot read ${file}: ${(error as NodeJS.ErrnoException).code === "ENOENT" ? "no such file" : (error as Error).message}`,
    );
  }
  if (size > MAX_INLINE_INPUT_BYTES) throw tooLarge(file, size);
  return readFile(file, "utf8");
}

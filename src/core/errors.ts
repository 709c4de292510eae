import type { z } from "zod";
import { cutBefore } from "./utf8";

/**
 * A small error hierarchy with stable codes. Errors that cross an RPC
 * boundary lose their class but keep their own properties, so receivers
 * classify them by the `code` they carry as data ({@link codeOf}).
 */

export class TroupeError extends Error {
  readonly code: string;
  /** The HTTP status the API answers when this error reaches a caller. */
  readonly httpStatus: number;
  readonly details: unknown;
  /** Marks a coded error after an RPC hop, where `instanceof` no longer holds. */
  readonly troupe = true;
  constructor(code: string, message: string, options: { httpStatus?: number; details?: unknown; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.httpStatus = options.httpStatus ?? 500;
    this.details = options.details;
  }
}

/** The caller asked for something malformed: HTTP 400 `invalid_request`. */
export class ValidationError extends TroupeError {
  constructor(message: string, details?: unknown) {
    super("invalid_request", message, { httpStatus: 400, details });
  }
}

/** Something the caller named does not exist (or belongs to another org). */
export class NotFoundError extends TroupeError {
  constructor(code: string, message: string) {
    super(code, message, { httpStatus: 404 });
  }
}

/** A failure that must not be retried: it will fail the same way again. */
export class TerminalError extends TroupeError {}

/** One zod issue as the API reports it: the offending field's path and what is wrong with it. */
export interface Issue {
  path: string;
  message: string;
}

/** zod issues as {@link Issue}s; `prefix` is prepended to each path, `root` names a value with no path. */
export function issuesOf(
  error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] },
  options: { prefix?: (string | number)[]; root?: string } = {},
): Issue[] {
  const root = options.root ?? "(root)";
  const issues = error.issues.slice(0, MAX_ISSUES).map((issue) => ({
    path: cut([...(options.prefix ?? []), ...issue.path].map(String).join(".") || root),
    message: cut(issue.message),
  }));
  const more = error.issues.length - issues.length;
  if (more > 0) issues.push({ path: root, message: `and ${more} more issues` });
  return issues;
}

/** The most issues an error lists (an answer naming each of 200,000 was 35 MB). */
export const MAX_ISSUES = 100;

/** The longest path or message of an issue (zod names every unknown key of an object in one message). */
export const MAX_ISSUE_CHARS = 500;

function cut(text: string): string {
  return cutText(text, MAX_ISSUE_CHARS);
}

/** `text` cut to `max` characters, saying how many more it had; never between the two halves of a character. */
export function cutText(text: string, max: number): string {
  if (text.length <= max) return text;
  const end = cutBefore(text, 0, max);
  return `${text.slice(0, end)}… (${text.length - end} characters more)`;
}

/** zod issues on one line: `path: message; ...`. */
export function describeIssues(error: z.ZodError, options: { prefix?: (string | number)[]; root?: string } = {}): string {
  return issuesOf(error, options)
    .map((issue) => `${issue.path}: ${issue.message}`)
    .join("; ");
}

/**
 * Parses an RPC input at an actor's trust boundary, or throws a
 * `ValidationError` (`invalid_request`) whose message names each offending field.
 */
export function parseRpcInput<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  throw new ValidationError(describeIssues(result.error), result.error.issues);
}

/**
 * A `TroupeError` again, from one thrown here or one that crossed an RPC hop
 * (which keeps own properties, not the class); anything else is `undefined`.
 */
export function asTroupeError(error: unknown): TroupeError | undefined {
  if (error instanceof TroupeError) return error;
  if (typeof error !== "object" || error === null) return undefined;
  const { troupe, code, httpStatus, details, message } = error as Record<string, unknown>;
  if (troupe !== true || typeof code !== "string") return undefined;
  return new TroupeError(code, typeof message === "string" ? message : code, {
    httpStatus: typeof httpStatus === "number" ? httpStatus : 500,
    details,
    cause: error,
  });
}

/** The code of a `TroupeError`, here or after an RPC hop. */
export function codeOf(error: unknown): string | undefined {
  return asTroupeError(error)?.code;
}

/** The `details` a `TroupeError` carries, when they are a plain record of numbers, strings and nulls. */
export function detailsOf(error: unknown): Record<string, number | string | null> | undefined {
  if (!(error instanceof TroupeError) || typeof error.details !== "object" || error.details === null || Array.isArray(error.details))
    return undefined;
  const entries = Object.entries(error.details);
  return entries.every(([, v]) => v === null || typeof v === "number" || typeof v === "string") ? Object.fromEntries(entries) : undefined;
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

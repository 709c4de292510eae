import type { z } from "zod";

/**
 * A small error hierarchy with stable codes. Errors that cross an RPC
 * boundary lose their class, so receivers classify them by `code` (carried in
 * results, or as a `[code]` prefix in the message).
 */

export class TroupeError extends Error {
  readonly code: string;
  readonly status: number;
  readonly details: unknown;
  constructor(code: string, message: string, options: { status?: number; details?: unknown; cause?: unknown } = {}) {
    super(message, { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.status = options.status ?? 500;
    this.details = options.details;
  }
}

/** The caller asked for something malformed: HTTP 400 `invalid_request`. */
export class ValidationError extends TroupeError {
  constructor(message: string, details?: unknown) {
    super("invalid_request", message, { status: 400, details });
  }
}

/** Something the caller named does not exist (or belongs to another org). */
export class NotFoundError extends TroupeError {
  constructor(code: string, message: string) {
    super(code, message, { status: 404 });
  }
}

/** A failure that must not be retried: it will fail the same way again. */
export class TerminalError extends TroupeError {}

/**
 * Parses an RPC input at an actor's trust boundary, or throws a
 * `ValidationError` whose message starts with `[invalid_request]` and names
 * each offending field (the code survives the RPC hop in the message).
 */
export function parseRpcInput<S extends z.ZodType>(schema: S, input: unknown): z.output<S> {
  const result = schema.safeParse(input);
  if (result.success) return result.data;
  const issues = result.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
  throw new ValidationError(`[invalid_request] ${issues}`, result.error.issues);
}

/** Reads a `[code]` prefix back out of an error message that crossed RPC. */
export function codeOf(error: unknown): string | undefined {
  if (error instanceof TroupeError) return error.code;
  const message = error instanceof Error ? error.message : String(error);
  return /^\[([a-z_]+)\]/.exec(message)?.[1];
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

/** Maps errors to API.md's error shape, in one place. */
import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import type { z } from "zod";
import { asTroupeError, issuesOf, MAX_ISSUES, ValidationError } from "../core/errors";
import { issuesInParts } from "./bounded-issues";

export interface ErrorBody {
  error: { code: string; message: string; details?: unknown };
}

export function errorResponse(c: Context, status: ContentfulStatusCode, code: string, message: string, details?: unknown): Response {
  const body: ErrorBody = { error: { code, message, ...(details === undefined ? {} : { details }) } };
  return c.json(body, status);
}

/**
 * Parses `value` with `schema`, or throws a 400 naming every offending field (the first {@link MAX_ISSUES}). A large
 * value is checked in parts first (src/http/bounded-issues.ts), so that finding its issues stays within memory.
 */
export function validate<S extends z.ZodType>(schema: S, value: unknown, what: string, prefix: (string | number)[] = []): z.infer<S> {
  const parts = issuesInParts(schema, value);
  if (parts && parts.length > 0) {
    const details = issuesOf({ issues: parts.slice(0, MAX_ISSUES) }, { prefix, root: "(body)" });
    if (parts.length > MAX_ISSUES) details.push({ path: prefix.join(".") || "(body)", message: "and more issues, not looked for" });
    throw invalid(what, details);
  }
  const result = safeParse(schema, value, what, prefix);
  if (result.success) return result.data;
  throw invalid(what, issuesOf(result.error, { prefix, root: "(body)" }));
}

function invalid(what: string, details: { path: string; message: string }[]): ValidationError {
  return new ValidationError(`${what} is invalid: ${details.map((d) => `${d.path}: ${d.message}`).join("; ")}`, details);
}

/**
 * `schema.safeParse`, with a value that has too many issues to gather refused
 * as a 400: zod spreads a field's issues into its parent's as arguments, and
 * past about a hundred thousand of them (an array of a million wrong items)
 * that overflows the stack.
 */
function safeParse<S extends z.ZodType>(schema: S, value: unknown, what: string, prefix: (string | number)[]) {
  try {
    return schema.safeParse(value);
  } catch (error) {
    if (!(error instanceof RangeError && /call stack/i.test(error.message))) throw error;
    const path = prefix.join(".") || "(body)";
    throw new ValidationError(`${what} is invalid in too many places to list; check its shape (GET /v1/plays gives each play's input)`, [
      { path, message: "too many issues to list" },
    ]);
  }
}

export function onError(error: unknown, c: Context): Response {
  const coded = asTroupeError(error);
  if (coded && coded.httpStatus < 500) {
    return errorResponse(c, coded.httpStatus as ContentfulStatusCode, coded.code, coded.message, coded.details);
  }
  console.error("unhandled error", error);
  const code = coded?.code ?? "internal_error";
  return errorResponse(c, 500, code, "the server failed to answer; the request may be retried");
}

/** The client's one error class: what the server answered, or why it could not be reached. */

/**
 * An API call that did not succeed. `status` is the HTTP status (0 when the
 * server could not be reached), `code` the API's snake_case error code
 * (`invalid_request`, `run_not_found`, `unreachable`, ...), `details` what the
 * server attached (for `invalid_request`, the offending fields).
 *
 * @example
 * try { await client.get(runId) } catch (e) { if (e instanceof TroupeApiError && e.status === 404) ... }
 */
export class TroupeApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly details?: unknown;

  constructor(options: { status: number; code: string; message: string; details?: unknown; cause?: unknown }) {
    super(options.message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "TroupeApiError";
    this.status = options.status;
    this.code = options.code;
    if (options.details !== undefined) this.details = options.details;
  }
}

/**
 * Whether asking again may succeed: the server could not be reached, was
 * busy (429) or failed (5xx), as during a restart; never a refusal of the
 * request itself.
 */
export function isTransient(error: unknown): boolean {
  return (
    error instanceof TroupeApiError && ((error.status === 0 && error.code === "unreachable") || error.status === 429 || error.status >= 500)
  );
}

/** The error for a non-2xx answer: the API's `{ error: { code, message, details } }` when it sent one. */
export async function errorOf(response: Response, what: string): Promise<TroupeApiError> {
  const text = await response.text().catch(() => "");
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    // Not the API's JSON (a proxy's page, an empty body): described below from the status and text.
    body = undefined;
  }
  const error = (body as { error?: { code?: unknown; message?: unknown; details?: unknown } } | undefined)?.error;
  if (error && typeof error.code === "string" && typeof error.message === "string") {
    return new TroupeApiError({ status: response.status, code: error.code, message: error.message, details: error.details });
  }
  const excerpt = text.trim().slice(0, 200);
  return new TroupeApiError({
    status: response.status,
    code: `http_${response.status}`,
    message: `${what} answered ${response.status} ${response.statusText}${excerpt ? `: ${excerpt}` : ""}`.trim(),
  });
}

/**
 * The error a tool throws to say how its call failed, and the codes the
 * engine gives meaning to.
 */
import { TroupeError } from "../core/errors";

/**
 * The code a tool (or provider) answers when the credentials a call ran with
 * are no longer the ones in force: the engine re-resolves the tool's auth
 * scope once and re-claims the call under the new scope.
 */
export const AUTH_SCOPE_CHANGED = "auth_scope_changed";

/**
 * The engine's provider timeout cut a request off: it may have reached the provider, and nothing says how it
 * ended. (Test fault plans throw it too, with this code: a request answered whose answer was lost.)
 */
export const PROVIDER_TIMEOUT = "provider_timeout";

/** What a tool says about a failed call; see {@link ToolCallError}. */
export interface ToolCallErrorOptions {
  code: string;
  message: string;
  /** Rate limits and 5xx are retryable: retried in process, and by a later run. */
  retryable: boolean;
  /** The wait the provider asked for; without it, a `Retry-After` in `headers` is used. */
  retryAfterMs?: number | null;
  /** The provider's HTTP status, when there was an answer (what an `isRateLimit` hook may look at). */
  status?: number | null;
  /**
   * The provider's answer headers: the org's pacing reads their rate-limit
   * signals (`Retry-After`, `X-RateLimit-*`, `RateLimit-Policy` and
   * `RateLimit`), from failures as from successes.
   */
  headers?: HeadersInit | null;
}

/**
 * Thrown by a tool's `execute` (or a batch's `send`) to classify a failure.
 * `retryable` failures are retried in process and may be reclaimed by a later
 * run; permanent ones fail the row and are remembered in the receipt. A
 * failure is a rate limit when its `code` is `rate_limited` or its `status` is
 * 429 (whatever `retryable` says), when a retryable one carries a wait
 * (`retryAfterMs` or a `Retry-After` header), or when the tool's `isRateLimit`
 * hook says so: it is then retried after the wait, and every caller of the
 * provider slows down.
 *
 * @example
 * if (!res.ok) throw new ToolCallError({ code: `http_${res.status}`, message: await res.text(), retryable: res.status === 429 || res.status >= 500, status: res.status, headers: res.headers });
 */
export class ToolCallError extends TroupeError {
  readonly retryable: boolean;
  /** The wait the provider asked for, when the tool read one. */
  readonly retryAfterMs: number | null;
  /** The provider's HTTP status, when the tool gave it. */
  readonly status: number | null;
  /** The provider's answer headers, when the tool gave them. */
  readonly headers: Headers | null;
  constructor(options: ToolCallErrorOptions) {
    // A provider's failure that reaches the API is the upstream's, not the caller's: 502.
    super(options.code, options.message, { httpStatus: 502 });
    this.retryable = options.retryable;
    this.retryAfterMs = options.retryAfterMs ?? null;
    this.status = options.status ?? null;
    this.headers = headersOf(options.headers ?? null);
  }
}

function headersOf(init: HeadersInit | null): Headers | null {
  if (init === null || init instanceof Headers) return init;
  try {
    return new Headers(init);
  } catch {
    // Malformed headers must not turn the tool's failure into another one: they only carried pacing hints.
    return null;
  }
}

/** A request cut off by the engine's provider timeout ({@link PROVIDER_TIMEOUT}): retryable, its outcome unknown. */
export class ProviderTimeout extends ToolCallError {
  constructor(message: string) {
    super({ code: PROVIDER_TIMEOUT, message, retryable: true });
  }
}

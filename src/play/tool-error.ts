/**
 * The error a tool throws to say how its call failed. `retryable` failures
 * (rate limits, 5xx) are retried in process and may be reclaimed by a later
 * run; permanent ones fail the row and are remembered in the receipt.
 */
/**
 * The code a tool (or provider) answers when the credentials a call ran with
 * are no longer the ones in force: the engine re-resolves the tool's auth
 * scope once and re-claims the call under the new scope.
 */
export const AUTH_SCOPE_CHANGED = "auth_scope_changed";

export class ToolCallError extends Error {
  readonly code: string;
  readonly retryable: boolean;
  /** The provider's `Retry-After`, when it gave one. */
  readonly retryAfterMs: number | null;
  constructor(options: { code: string; message: string; retryable: boolean; retryAfterMs?: number | null }) {
    super(options.message);
    this.name = "ToolCallError";
    this.code = options.code;
    this.retryable = options.retryable;
    this.retryAfterMs = options.retryAfterMs ?? null;
  }
}

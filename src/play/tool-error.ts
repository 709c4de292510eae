/**
 * The error a tool throws to say how its call failed. `retryable` failures
 * (rate limits, 5xx) are retried in process and may be reclaimed by a later
 * run; permanent ones fail the row and are remembered in the receipt.
 */
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

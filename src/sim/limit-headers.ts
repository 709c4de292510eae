/**
 * The headers with which the simulator states its rate limit, in the style
 * its config names (`rateLimitHeaders`; see `RateLimitHeaders` in
 * `protocol.ts`). Resets and waits in whole seconds are rounded up: a
 * provider never announces quota before it is there.
 */
import type { RateLimitHeaders } from "./protocol";

/** The limiter's state after one request, as its answer states it. */
export interface LimitState {
  /** Requests per second. */
  limit: number;
  /** Requests the window admits now. */
  remaining: number;
  /** Until more is made available (the window's oldest admission leaves). */
  resetMs: number;
  /** Set when the request was refused: how long until it would be admitted. */
  retryAfterMs: number | null;
}

/**
 * The headers of one answer of a rate-limited simulator.
 *
 * @example
 * limitHeaders("ietf", { limit: 50, remaining: 7, resetMs: 20, retryAfterMs: null })
 * // { "RateLimit-Policy": '"default";q=50;w=1', RateLimit: '"default";r=7;t=1' }
 */
export function limitHeaders(style: RateLimitHeaders, state: LimitState): Record<string, string> {
  const headers: Record<string, string> = {};
  if (style === "none") return headers;
  if (state.retryAfterMs !== null) {
    headers["Retry-After"] = String(Math.max(1, Math.ceil(state.retryAfterMs / 1000)));
    headers["Retry-After-Ms"] = String(Math.ceil(state.retryAfterMs));
  }
  const resetSeconds = Math.ceil(state.resetMs / 1000);
  if (style === "ietf") {
    headers["RateLimit-Policy"] = `"default";q=${state.limit};w=1`;
    headers["RateLimit"] = `"default";r=${state.remaining};t=${resetSeconds}`;
  } else if (style === "x-ratelimit") {
    headers["X-RateLimit-Limit"] = String(state.limit);
    headers["X-RateLimit-Remaining"] = String(state.remaining);
    headers["X-RateLimit-Reset"] = String(resetSeconds);
  }
  return headers;
}

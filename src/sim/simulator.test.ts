import { describe, expect, it } from "vitest";
import { limitHeaders } from "./limit-headers";
import { SlidingWindowLimiter } from "./rate-limiter";
import { evaluate, findEmail } from "./simulator";

describe("simulator rules", () => {
  it("derives the email and decides failures from the name", () => {
    expect(findEmail(" Ada\n\nLovelace", "EXAMPLE.com")).toBe(".ada.lovelace@example.com");
    expect(evaluate("sim_find_email", { name: "!fail x", domain: "d" })).toMatchObject({
      kind: "failed",
      failure: { status: 422, code: "person_not_found" },
    });
    expect(evaluate("sim_find_email", { name: "!flaky x", domain: "d" })).toMatchObject({ kind: "flaky", failure: { status: 503 } });
    expect(evaluate("sim_verify_email", { email: 1 })).toMatchObject({ kind: "failed", failure: { status: 400 } });
    expect(evaluate("sim_verify_email", { email: "!unavailable.x@d" })).toMatchObject({ kind: "flaky", failure: { status: 503 } });
  });
});

describe("SlidingWindowLimiter", () => {
  it("admits `limit` per sliding second and says when the next fits", () => {
    const limiter = new SlidingWindowLimiter();
    expect(limiter.admit(0, 2)).toEqual({ admitted: true });
    expect(limiter.admit(400, 2)).toEqual({ admitted: true });
    expect(limiter.admit(500, 2)).toEqual({ admitted: false, retryAfterMs: 500 });
    expect(limiter.admit(1000, 2)).toEqual({ admitted: true });
    expect(limiter.admit(1200, 2)).toEqual({ admitted: false, retryAfterMs: 200 });
    expect(limiter.admit(1200, null)).toEqual({ admitted: true });
  });
});

describe("the limit's state, as headers", () => {
  it("says what is left and when more is available, in each style", () => {
    const limiter = new SlidingWindowLimiter();
    limiter.admit(0, 3);
    limiter.admit(400, 3);
    expect(limiter.state(600, 3)).toEqual({ remaining: 1, resetMs: 400 });
    expect(limiter.state(1500, 3)).toEqual({ remaining: 3, resetMs: 0 });
    const state = { limit: 3, remaining: 0, resetMs: 400, retryAfterMs: 400 };
    expect(limitHeaders("ietf", state)).toEqual({
      "Retry-After": "1",
      "Retry-After-Ms": "400",
      "RateLimit-Policy": '"default";q=3;w=1',
      RateLimit: '"default";r=0;t=1',
    });
    expect(limitHeaders("x-ratelimit", { ...state, retryAfterMs: null })).toEqual({
      "X-RateLimit-Limit": "3",
      "X-RateLimit-Remaining": "0",
      "X-RateLimit-Reset": "1",
    });
    expect(limitHeaders("retry-after", state)).toEqual({ "Retry-After": "1", "Retry-After-Ms": "400" });
    expect(limitHeaders("retry-after", { ...state, retryAfterMs: null })).toEqual({});
    expect(limitHeaders("none", state)).toEqual({});
  });
});

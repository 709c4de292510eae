import { describe, expect, it } from "vitest";
import { SlidingWindowLimiter } from "./rate-limiter";
import { evaluate, findEmail } from "./simulator";

describe("simulator rules", () => {
  it("derives the email and decides failures from the name", () => {
    expect(findEmail(" Ada\n\nLovelace", "EXAMPLE.com")).toBe(".ada.lovelace@example.com");
    expect(evaluate("sim_find_email", { name: "!fail x", domain: "d" })).toMatchObject({ kind: "failed", failure: { status: 422, code: "person_not_found" } });
    expect(evaluate("sim_find_email", { name: "!flaky x", domain: "d" })).toMatchObject({ kind: "flaky", failure: { status: 503 } });
    expect(evaluate("sim_verify_email", { email: 1 })).toMatchObject({ kind: "failed", failure: { status: 400 } });
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

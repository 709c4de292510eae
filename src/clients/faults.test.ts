import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { app } from "../http/app";
import { decideFault, FaultPlan, faultProbeFor, NO_FAULTS } from "./faults";

const plan = (rules: unknown[]) => FaultPlan.parse({ rules });
const NONE = { tool: null, play: null };

describe("decideFault", () => {
  it("fails the matching calls from the Nth on, for ever or `times` of them", () => {
    const forever = plan([{ point: "receipt.complete", fromCall: 3 }]);
    const counts: number[] = [];
    expect([1, 2, 3, 4, 5].map(() => decideFault(forever, counts, "receipt.complete", NONE).fail)).toEqual([
      false,
      false,
      true,
      true,
      true,
    ]);
    const twice = plan([{ point: "receipt.claim", fromCall: 2, times: 2 }]);
    const c2: number[] = [];
    expect([1, 2, 3, 4].map(() => decideFault(twice, c2, "receipt.claim", NONE).fail)).toEqual([false, true, true, false]);
  });

  it("counts only its own operation and tool", () => {
    const p = plan([{ point: "provider.before", tool: "a", fromCall: 1 }]);
    const counts: number[] = [];
    expect(decideFault(p, counts, "provider.after", { tool: "a", play: null }).fail).toBe(false);
    expect(decideFault(p, counts, "provider.before", { tool: "b", play: null }).fail).toBe(false);
    expect(counts).toEqual([]);
    expect(decideFault(p, counts, "provider.before", { tool: "a", play: null })).toMatchObject({
      fail: true,
      call: 1,
      error: { code: "injected_fault", retryable: false },
    });
  });

  it("counts only the calls of runs of its play when it names one, and marks hold rules", () => {
    const p = plan([{ point: "run.alarm", play: "p1", hold: true }]);
    const counts: number[] = [];
    expect(decideFault(p, counts, "run.alarm", { tool: null, play: "p2" }).fail).toBe(false);
    expect(decideFault(p, counts, "run.alarm", NONE).fail).toBe(false);
    expect(counts).toEqual([]);
    expect(decideFault(p, counts, "run.alarm", { tool: null, play: "p1" })).toMatchObject({ fail: true, call: 1, hold: true });
  });

  it("carries the rule's error and credential rotation", () => {
    const p = plan([
      {
        point: "provider.before",
        error: { code: "auth_scope_changed", retryable: true },
        rotateCredential: { provider: "sim", value: "k2" },
      },
    ]);
    expect(decideFault(p, [], "provider.before", { tool: "t", play: null })).toMatchObject({
      fail: true,
      error: { code: "auth_scope_changed", retryable: true },
      rotateCredential: { provider: "sim", value: "k2" },
    });
  });

  it("rejects unknown operations and fields", () => {
    expect(FaultPlan.safeParse({ rules: [{ point: "disk.write" }] }).success).toBe(false);
    expect(FaultPlan.safeParse({ rules: [{ point: "sheet.persist", when: "now" }] }).success).toBe(false);
  });
});

describe("outside test mode", () => {
  it("checks nothing and answers 404 on /v1/test/faults", async () => {
    const production = { ...env, TROUPE_TEST_MODE: undefined } as Env;
    expect(faultProbeFor(production)).toBe(NO_FAULTS);
    expect(faultProbeFor({ ...env, FAULTS: undefined } as Env)).toBe(NO_FAULTS);
    const res = await app.request("/v1/test/faults", { headers: { Authorization: "Bearer dev-token" } }, production);
    expect(res.status).toBe(404);
  });
});

import { describe, expect, it } from "vitest";
import { SubrequestMeter } from "./meter";
import { MAX_SUBREQUESTS_PER_INVOCATION, subrequestCapFor } from "./platform-limits";

describe("SubrequestMeter", () => {
  it("under emulation, throws on the subrequest past the platform's cap, as the platform does", () => {
    const meter = new SubrequestMeter({ cap: subrequestCapFor({ PLATFORM_LIMITS: "emulate" }) });
    for (let i = 0; i < MAX_SUBREQUESTS_PER_INVOCATION - 3; i++) meter.rpc++;
    meter.provider++;
    meter.lookups++;
    meter.fetches++;
    expect(meter.total).toBe(10_000);
    expect(() => meter.rpc++).toThrow("Too many subrequests.");
    expect(() => meter.provider++).toThrow(expect.objectContaining({ code: "too_many_subrequests" }));
    expect(() => meter.lookups++).toThrow("Too many subrequests.");
    expect(() => meter.fetches++).toThrow("Too many subrequests.");
    expect({ rpc: meter.rpc, provider: meter.provider, lookups: meter.lookups, fetches: meter.fetches, total: meter.total }).toEqual({
      rpc: 9_997,
      provider: 1,
      lookups: 1,
      fetches: 1,
      total: 10_000,
    });
    // What is not a subrequest is still counted.
    meter.retries++;
    meter.rateLimited++;
    expect(meter.retries + meter.rateLimited).toBe(2);
  });

  it("keeps counting toward the cap when counts are set back to 0 (a run's end records its usage mid-invocation)", () => {
    const meter = new SubrequestMeter({ cap: subrequestCapFor({ PLATFORM_LIMITS: "emulate" }) });
    for (let i = 0; i < 8_000; i++) meter.rpc++;
    meter.rpc = 0;
    expect(meter.total).toBe(8_000);
    for (let i = 0; i < 2_000; i++) meter.rpc++;
    // The platform counts the invocation's 10,001st subrequest, whatever the runtime recorded in between.
    expect(() => meter.rpc++).toThrow("Too many subrequests.");
    expect([meter.rpc, meter.total]).toEqual([2_000, 10_000]);
  });

  it("without PLATFORM_LIMITS (production, where the platform enforces it) counts past the cap", () => {
    const meter = new SubrequestMeter({ cap: subrequestCapFor({}) });
    for (let i = 0; i <= MAX_SUBREQUESTS_PER_INVOCATION; i++) meter.rpc++;
    expect(meter.total).toBe(10_001);
    expect(new SubrequestMeter().cap).toBeNull();
  });

  it("breaks stub calls down by kind; calls counted without one are other, and a reset to 0 clears the breakdown", () => {
    const meter = new SubrequestMeter();
    meter.countRpc("sheet.claimRows");
    meter.countRpc("sheet.claimRows");
    meter.countRpc("pacing");
    meter.rpc++;
    expect(meter.rpc).toBe(4);
    expect(meter.rpcByKind).toEqual({ "sheet.claimRows": 2, pacing: 1, other: 1 });
    meter.rpc = 0;
    expect(meter.rpcByKind).toEqual({});
  });

  it("counts a call by kind against the cap like any other", () => {
    const meter = new SubrequestMeter({ cap: 1 });
    meter.countRpc("receipt.claim");
    expect(() => meter.countRpc("receipt.claim")).toThrow("Too many subrequests.");
    expect(meter.rpcByKind).toEqual({ "receipt.claim": 1 });
  });
});

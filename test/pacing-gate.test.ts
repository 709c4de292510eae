/**
 * The PacingGate object across its own evictions: what a provider asked of every caller, and the limit its 429s
 * taught, outlive the gate's memory.
 */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { EMPTY_SIGNAL } from "../src/runtime/pacing/gate";
import { PACE_UTILIZATION } from "../src/runtime/pacing/policy";
import { pacingGate } from "../src/clients/pacing-gates";
import { crash } from "./chaos-helpers";

describe("a pacing gate evicted during a provider's Retry-After", () => {
  it("keeps every new caller waiting until the pause ends, rather than sending them into it", async () => {
    const provider = "sim";
    const gate = () => pacingGate(env, "evicted-gate-org", provider);
    // The provider answered 429 asking for a minute.
    const { pausedForMs } = await gate().report({ provider, signal: { ...EMPTY_SIGNAL, limited: 1, retryAfterMs: 60_000 } });
    expect(pausedForMs).toBeGreaterThan(59_000);

    // Evicted: a stub taken before is broken, so each step takes a new one.
    await crash(gate());

    // A caller of a new invocation, which never heard the 429, asks the restarted gate for slots.
    const grant = await gate().acquire({ provider, caller: "after-eviction", slots: 3, inFlight: 0, units: 3 });
    expect(grant.startInMs).toEqual([]);
    expect(grant.retryInMs).toBeGreaterThan(50_000);
    const { state } = await gate().state(provider);
    expect(state.pausedUntil - Date.now()).toBeGreaterThan(50_000);
  });
});

describe("a pacing gate evicted after it learned a provider's limit", () => {
  it("paces new callers at that limit at once: no probe, no unpaced requests into the provider's 429s", async () => {
    const provider = "sim";
    const org = `learned-gate-${crypto.randomUUID().slice(0, 8)}`;
    const gate = () => pacingGate(env, org, provider);
    // A provider that announces nothing refused some of the 50 requests sent unpaced in the last second.
    await gate().report({ provider, signal: { ...EMPTY_SIGNAL, limited: 10, unpacedStarts: 50 } });
    const learned = (await gate().state(provider)).state.learnedRequestsPerSecond;
    expect(learned).not.toBeNull();

    await crash(gate());

    const { state } = await gate().state(provider);
    expect({ learned: state.learnedRequestsPerSecond, heard: state.heard }).toEqual({ learned, heard: true });
    expect(state.effectiveRequestsPerSecond).toBeCloseTo(learned! * PACE_UTILIZATION, 6);
    // Paced at once: a new caller's request is neither the probe a gate sends to a provider it has not heard from
    // (holding every other caller until its answer) nor one of a second of unpaced requests.
    const grant = await gate().acquire({ provider, caller: "after-eviction", slots: 5, inFlight: 0, units: 5 });
    expect({ probe: grant.probe, unpacedForMs: grant.unpacedForMs }).toEqual({ probe: false, unpacedForMs: 0 });

    // An org's reset of the policy forgets it, for good.
    await gate().configure(provider, null);
    await crash(gate());
    expect((await gate().state(provider)).state.learnedRequestsPerSecond).toBeNull();
  });
});

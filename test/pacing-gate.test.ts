/** The PacingGate object across its own evictions: what a provider asked of every caller outlives the gate's memory. */
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { EMPTY_SIGNAL } from "../src/runtime/pacing/gate";
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

import { describe, expect, it } from "vitest";
import { GateLedger } from "./gate";
import { Pacer, type GateClient } from "./pacer";
import { pacingPolicyFor, type PacingPolicy } from "./policy";

/** A gate in memory, counting the calls a pacer makes to it. */
function fakeGate(policy: PacingPolicy) {
  const ledger = new GateLedger();
  const calls = { acquire: 0, report: 0, release: 0 };
  const gate: GateClient = {
    acquire: async (r) => {
      calls.acquire++;
      return ledger.acquire(policy, { ...r, now: Date.now() });
    },
    report: async (r) => {
      calls.report++;
      ledger.report(policy, { ...r, now: Date.now() });
    },
    release: async (r) => {
      calls.release++;
      ledger.release(r.caller);
    },
  };
  return { gate, calls, ledger };
}

const pacer = (gate: GateClient, policy: PacingPolicy) => new Pacer({ gate, caller: "c", policy, now: Date.now, log: () => {} });

describe("Pacer", () => {
  it("leases many slots in one gate call", async () => {
    const policy = pacingPolicyFor("sim");
    const { gate, calls } = fakeGate(policy);
    const p = pacer(gate, policy);
    const signal = new AbortController().signal;
    const slots = await Promise.all(Array.from({ length: 30 }, () => p.slot(signal)));
    expect(slots).toHaveLength(30);
    expect(calls.acquire).toBe(1);
    for (const slot of slots) slot.release();
    await p.close();
    expect(calls.release).toBe(1);
  });

  it("asks the gate about once a second while nothing paces the provider", async () => {
    const policy = pacingPolicyFor("sim");
    const { gate, calls } = fakeGate(policy);
    const p = pacer(gate, policy);
    const signal = new AbortController().signal;
    for (let i = 0; i < 100; i++) (await p.slot(signal)).release();
    expect(calls.acquire).toBe(1);
  });

  it("keeps its requests in flight within the units it holds", async () => {
    const policy: PacingPolicy = { requestsPerSecond: null, concurrency: 3, batchParallelism: 1 };
    const { gate } = fakeGate(policy);
    const p = pacer(gate, policy);
    const signal = new AbortController().signal;
    let inFlight = 0;
    let most = 0;
    await Promise.all(
      Array.from({ length: 12 }, async () => {
        const slot = await p.slot(signal);
        most = Math.max(most, ++inFlight);
        await new Promise((r) => setTimeout(r, 2));
        inFlight--;
        slot.release();
      }),
    );
    expect(most).toBeLessThanOrEqual(3);
    await p.close();
  });

  it("reports a 429 to the gate and drops the slots leased before it", async () => {
    const policy: PacingPolicy = { requestsPerSecond: 1000, concurrency: null, batchParallelism: 1 };
    const { gate, calls } = fakeGate(policy);
    const p = pacer(gate, policy);
    const signal = new AbortController().signal;
    (await p.slot(signal)).release();
    await p.backpressure(30);
    expect(calls.report).toBe(1);
    const before = Date.now();
    (await p.slot(signal)).release();
    expect(Date.now() - before).toBeGreaterThanOrEqual(25);
  });

  it("rejects a waiter whose signal aborts, and fails waiters retryably when the gate is unreachable", async () => {
    const policy = pacingPolicyFor("sim");
    const never: GateClient = { acquire: () => new Promise(() => {}), report: async () => {}, release: async () => {} };
    const controller = new AbortController();
    const waiting = pacer(never, policy).slot(controller.signal);
    controller.abort(new Error("stop"));
    await expect(waiting).rejects.toThrow("stop");

    const broken: GateClient = { acquire: async () => Promise.reject(new Error("down")), report: async () => {}, release: async () => {} };
    await expect(pacer(broken, policy).slot(new AbortController().signal)).rejects.toMatchObject({ code: "pacing_unavailable", retryable: true });
  });
});

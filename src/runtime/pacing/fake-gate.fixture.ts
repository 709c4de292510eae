/** The pacer tests' gate: the real GateLedger in memory, behind the client interface a pacer calls. */
import { EMPTY_SIGNAL, GateLedger, type GateSignal } from "./gate";
import type { GateClient } from "./pacer";
import type { PacingPolicy } from "./policy";

/** A gate in memory, counting the calls a pacer makes to it and keeping what they carried. */
export function fakeGate(policy: PacingPolicy, options: { heard?: boolean } = {}) {
  const ledger = new GateLedger();
  // Past the probe unless a test is about it.
  if (options.heard !== false) ledger.report(policy, { signal: { ...EMPTY_SIGNAL, probe: true }, now: Date.now() });
  const calls = { acquire: 0, report: 0, release: 0 };
  const told: GateSignal[] = [];
  const gate: GateClient = {
    acquire: async (r) => {
      calls.acquire++;
      told.push(r.signal);
      return ledger.acquire(policy, { ...r, now: Date.now() });
    },
    report: async (r) => {
      calls.report++;
      told.push(r.signal);
      return ledger.report(policy, { ...r, now: Date.now() });
    },
    release: async (r) => {
      calls.release++;
      ledger.release(r.caller);
    },
  };
  return { gate, calls, ledger, told };
}

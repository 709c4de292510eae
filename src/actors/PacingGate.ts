import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { GateLedger, type GateSignal, type GateSnapshot, type Grant } from "../runtime/pacing/gate";
import { PacingOverride, pacingPolicyFor, type PacingPolicy } from "../runtime/pacing/policy";
import { parseRpcInput } from "../core/errors";
import { createSql, migrate, type Sql } from "../stores/sql";

const GATE_MIGRATIONS = [
  `CREATE TABLE pacing_override (provider TEXT PRIMARY KEY, policy TEXT NOT NULL);`,
  `CREATE TABLE pacing_pause (id INTEGER PRIMARY KEY CHECK (id = 1), paused_until INTEGER NOT NULL);`,
];

const Provider = z.string().min(1).max(64);
/** Waits and resets past an hour are taken as an hour: a pause that long is an outage, not pacing. */
const Ms = z
  .number()
  .min(0)
  .transform((ms) => Math.min(ms, 3_600_000));
/** What a caller heard from the provider since its last call (see `GateSignal`). */
export const GateSignalInput = z.object({
  limited: z.number().int().min(0).max(100_000),
  unpacedStarts: z.number().int().min(0).max(100_000),
  unpacedSinceMs: z.number().min(0).max(3_600_000).optional(),
  unpacedLastMs: z.number().min(0).max(3_600_000).optional(),
  retryAfterMs: Ms.nullable(),
  quota: z.object({ requests: z.number().int().min(1).max(1e12), windowMs: z.number().positive().max(1e12).nullable() }).nullable(),
  remaining: z
    .object({ requests: z.number().int().min(0).max(1e12), resetMs: Ms.nullable(), ageMs: z.number().min(0).max(3_600_000) })
    .nullable(),
  probe: z.boolean(),
}) satisfies z.ZodType<GateSignal, unknown>;
/** `acquire` input: a caller's request for slots and units, with what it heard. */
export const GateAcquire = z.object({
  provider: Provider,
  caller: z.string().min(1).max(200),
  slots: z.number().int().min(0).max(10_000),
  rateOnly: z.number().int().min(0).max(10_000).optional(),
  inFlight: z.number().int().min(0).max(100_000),
  units: z.number().int().min(0).max(100_000).optional(),
  signal: GateSignalInput.optional(),
});
export type GateAcquire = z.input<typeof GateAcquire>;
/** `report` input: what a caller heard that could not wait for its next acquire (a 429, nothing left, a new quota, the probe's answer). */
export const GateReport = z.object({ provider: Provider, signal: GateSignalInput });
export type GateReport = z.input<typeof GateReport>;
/** `release` input: the caller giving its units back. */
export const GateRelease = z.object({ provider: Provider, caller: z.string().min(1).max(200) });
export type GateRelease = z.infer<typeof GateRelease>;

/** The gate's view of its provider: the policy in force and the pacing state. */
export interface GateState {
  provider: string;
  policy: PacingPolicy;
  override: PacingOverride | null;
  state: GateSnapshot;
}

/**
 * One per (org, provider), named `<org>/<provider>`: every run of the org
 * paces that provider's requests through it. A thin adapter over
 * `GateLedger` (in memory: what it learned need not survive a restart, the
 * provider's 429s teach it again); stored are the org's policy override and
 * the pause the provider asked for, so that an eviction during a long
 * Retry-After does not send new callers into it.
 */
export class PacingGate extends DurableObject<Env> {
  readonly #sql: Sql;
  #ledger = new GateLedger();
  /** The pause stored: written only when the ledger's grows past it. */
  #storedPause = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = createSql(ctx.storage);
    void ctx.blockConcurrencyWhile(async () => {
      migrate(ctx.storage, GATE_MIGRATIONS);
      this.#storedPause = this.#sql<{ paused_until: number }>`SELECT paused_until FROM pacing_pause WHERE id = 1`[0]?.paused_until ?? 0;
      if (this.#storedPause > Date.now()) this.#ledger.restorePause(this.#storedPause);
    });
  }

  /** Leases slots (start times) and concurrency units to one caller. */
  async acquire(input: GateAcquire): Promise<Grant> {
    const request = parseRpcInput(GateAcquire, input);
    const grant = this.#ledger.acquire(this.#policy(request.provider), { ...request, now: Date.now() });
    this.#storePause();
    return grant;
  }

  /** What a provider's answer said that could not wait: a 429 slows every caller, a quota paces them. */
  async report(input: GateReport): Promise<{ pausedForMs: number }> {
    const request = parseRpcInput(GateReport, input);
    const answer = this.#ledger.report(this.#policy(request.provider), { signal: request.signal, now: Date.now() });
    this.#storePause();
    return answer;
  }

  /** The caller is done: its concurrency units return. */
  async release(input: GateRelease): Promise<void> {
    this.#ledger.release(parseRpcInput(GateRelease, input).caller);
  }

  /**
   * Sets the org's override of the provider's policy; null removes it and
   * forgets what the gate learned or was told (back to the defaults, and the
   * next request probes the provider again).
   */
  async configure(provider: string, override: PacingOverride | null): Promise<GateState> {
    const name = parseRpcInput(Provider, provider);
    if (override === null) {
      this.#sql.write`DELETE FROM pacing_override WHERE provider = ${name}`;
      this.#ledger.forgetLearned();
    } else {
      const value = JSON.stringify(parseRpcInput(PacingOverride, override));
      this.#sql.write`INSERT INTO pacing_override (provider, policy) VALUES (${name}, ${value})
        ON CONFLICT (provider) DO UPDATE SET policy = excluded.policy`;
    }
    return this.state(name);
  }

  async state(provider: string): Promise<GateState> {
    const name = parseRpcInput(Provider, provider);
    return {
      provider: name,
      policy: this.#policy(name),
      override: this.#override(name),
      state: this.#ledger.snapshot(this.#policy(name), Date.now()),
    };
  }

  /** Stores a pause that grew (a new Retry-After, nothing left until a reset): one write per pause, not per call. */
  #storePause(): void {
    const until = this.#ledger.pausedUntil;
    if (until <= this.#storedPause) return;
    this.#sql.write`INSERT INTO pacing_pause (id, paused_until) VALUES (1, ${Math.ceil(until)})
      ON CONFLICT (id) DO UPDATE SET paused_until = excluded.paused_until`;
    this.#storedPause = until;
  }

  #override(provider: string): PacingOverride | null {
    const row = this.#sql<{ policy: string }>`SELECT policy FROM pacing_override WHERE provider = ${provider}`[0];
    return row ? (JSON.parse(row.policy) as PacingOverride) : null;
  }

  #policy(provider: string): PacingPolicy {
    return pacingPolicyFor(provider, this.#override(provider));
  }
}

import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { GateLedger, type GateSignal, type GateSnapshot, type Grant } from "../runtime/pacing/gate";
import { PacingOverride, pacingPolicyFor, type PacingPolicy } from "../runtime/pacing/policy";
import { parseRpcInput } from "../core/errors";
import { createSql, migrate, type Sql } from "../stores/sql";

const GATE_MIGRATIONS = [
  `CREATE TABLE pacing_override (provider TEXT PRIMARY KEY, policy TEXT NOT NULL);`,
  `CREATE TABLE pacing_pause (id INTEGER PRIMARY KEY CHECK (id = 1), paused_until INTEGER NOT NULL);`,
  `CREATE TABLE pacing_learned (id INTEGER PRIMARY KEY CHECK (id = 1), requests_per_second REAL NOT NULL, learned_at INTEGER NOT NULL);`,
];

/** A learned limit stored this long ago is not restored: the provider may have changed it (its 429s teach it again). */
const LEARNED_MEMORY_MS = 24 * 60 * 60 * 1000;
/** A learned limit is stored again once it has moved by this share of the stored one (it creeps while callers send). */
const LEARNED_STORE_STEP = 0.05;

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
 * `GateLedger` (in memory); stored are the org's policy override, the pause
 * the provider asked for, so that an eviction during a long Retry-After does
 * not send new callers into it, and the limit learned from its 429s, so that a
 * run after the gate was evicted (idle a minute or two, in production) is
 * paced at it from its first request rather than learning it again from 429s.
 */
export class PacingGate extends DurableObject<Env> {
  readonly #sql: Sql;
  #ledger = new GateLedger();
  /** The pause stored: written only when the ledger's grows past it. */
  #storedPause = 0;
  /** The learned limit stored (null: none). */
  #storedLearned: number | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = createSql(ctx.storage);
    void ctx.blockConcurrencyWhile(async () => {
      migrate(ctx.storage, GATE_MIGRATIONS);
      this.#storedPause = this.#sql<{ paused_until: number }>`SELECT paused_until FROM pacing_pause WHERE id = 1`[0]?.paused_until ?? 0;
      if (this.#storedPause > Date.now()) this.#ledger.restorePause(this.#storedPause);
      const learned = this.#sql<{ requests_per_second: number; learned_at: number }>`SELECT requests_per_second, learned_at
        FROM pacing_learned WHERE id = 1`[0];
      if (learned && Date.now() - learned.learned_at < LEARNED_MEMORY_MS) {
        this.#storedLearned = learned.requests_per_second;
        this.#ledger.restoreLearned(learned.requests_per_second, Date.now());
      }
    });
  }

  /** Leases slots (start times) and concurrency units to one caller. */
  async acquire(input: GateAcquire): Promise<Grant> {
    const request = parseRpcInput(GateAcquire, input);
    const grant = this.#ledger.acquire(this.#policy(request.provider), { ...request, now: Date.now() });
    this.#storePause();
    this.#storeLearned();
    return grant;
  }

  /** What a provider's answer said that could not wait: a 429 slows every caller, a quota paces them. */
  async report(input: GateReport): Promise<{ pausedForMs: number }> {
    const request = parseRpcInput(GateReport, input);
    const answer = this.#ledger.report(this.#policy(request.provider), { signal: request.signal, now: Date.now() });
    this.#storePause();
    this.#storeLearned();
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
      this.#storeLearned();
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

  /** Stores the learned limit when it came, went, or moved by {@link LEARNED_STORE_STEP}: a write per step, not per call. */
  #storeLearned(): void {
    const learned = this.#ledger.learned;
    const stored = this.#storedLearned;
    if (learned === stored) return;
    if (learned !== null && stored !== null && Math.abs(learned - stored) < stored * LEARNED_STORE_STEP) return;
    if (learned === null) this.#sql.write`DELETE FROM pacing_learned WHERE id = 1`;
    else
      this.#sql.write`INSERT INTO pacing_learned (id, requests_per_second, learned_at) VALUES (1, ${learned}, ${Date.now()})
        ON CONFLICT (id) DO UPDATE SET requests_per_second = excluded.requests_per_second, learned_at = excluded.learned_at`;
    this.#storedLearned = learned;
  }

  #override(provider: string): PacingOverride | null {
    const row = this.#sql<{ policy: string }>`SELECT policy FROM pacing_override WHERE provider = ${provider}`[0];
    return row ? (JSON.parse(row.policy) as PacingOverride) : null;
  }

  #policy(provider: string): PacingPolicy {
    return pacingPolicyFor(provider, this.#override(provider));
  }
}

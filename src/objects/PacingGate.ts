import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { GateLedger, type GateSnapshot, type Grant } from "../pacing/gate";
import { PacingOverride, pacingPolicyFor, type PacingPolicy } from "../pacing/policy";
import { parseRpcInput } from "../shared/errors";
import { createSql, migrate, type Sql } from "../storage/sql";

const GATE_MIGRATIONS = [`CREATE TABLE pacing_override (provider TEXT PRIMARY KEY, policy TEXT NOT NULL);`];

const Provider = z.string().min(1).max(64);
/** `acquire` input: a caller's request for slots and units. */
export const GateAcquire = z.object({
  provider: Provider,
  caller: z.string().min(1).max(200),
  slots: z.number().int().min(0).max(10_000),
  inFlight: z.number().int().min(0).max(100_000),
  units: z.number().int().min(0).max(100_000).optional(),
});
export type GateAcquire = z.infer<typeof GateAcquire>;
/** `report` input: a 429's Retry-After. */
export const GateReport = z.object({ provider: Provider, retryAfterMs: z.number().min(0).max(3_600_000) });
export type GateReport = z.infer<typeof GateReport>;
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
 * `GateLedger` (in memory: pacing need not survive a restart); only the
 * org's policy override is stored.
 */
export class PacingGate extends DurableObject<Env> {
  readonly #sql: Sql;
  readonly #ledger = new GateLedger();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = createSql(ctx.storage);
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, GATE_MIGRATIONS));
  }

  /** Leases slots (start times) and concurrency units to one caller. */
  async acquire(input: GateAcquire): Promise<Grant> {
    const request = parseRpcInput(GateAcquire, input);
    return this.#ledger.acquire(this.#policy(request.provider), { ...request, now: Date.now() });
  }

  /** A provider answered 429: slow every caller. */
  async report(input: GateReport): Promise<void> {
    const request = parseRpcInput(GateReport, input);
    this.#ledger.report(this.#policy(request.provider), { retryAfterMs: request.retryAfterMs, now: Date.now() });
  }

  /** The caller is done: its concurrency units return. */
  async release(input: GateRelease): Promise<void> {
    this.#ledger.release(parseRpcInput(GateRelease, input).caller);
  }

  /** Sets (or with null, removes) the org's override of the provider's policy. */
  async configure(provider: string, override: PacingOverride | null): Promise<GateState> {
    const name = parseRpcInput(Provider, provider);
    if (override === null) this.#sql.write`DELETE FROM pacing_override WHERE provider = ${name}`;
    else {
      const value = JSON.stringify(parseRpcInput(PacingOverride, override));
      this.#sql.write`INSERT INTO pacing_override (provider, policy) VALUES (${name}, ${value})
        ON CONFLICT (provider) DO UPDATE SET policy = excluded.policy`;
    }
    return this.state(name);
  }

  async state(provider: string): Promise<GateState> {
    const name = parseRpcInput(Provider, provider);
    return { provider: name, policy: this.#policy(name), override: this.#override(name), state: this.#ledger.snapshot(this.#policy(name), Date.now()) };
  }

  #override(provider: string): PacingOverride | null {
    const row = this.#sql<{ policy: string }>`SELECT policy FROM pacing_override WHERE provider = ${provider}`[0];
    return row ? (JSON.parse(row.policy) as PacingOverride) : null;
  }

  #policy(provider: string): PacingPolicy {
    return pacingPolicyFor(provider, this.#override(provider));
  }
}


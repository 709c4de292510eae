import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { ValidationError } from "../core/errors";
import { createSql, migrate, type Sql } from "../stores/sql";
import { decideFault, FaultPlan, FaultPoint, type FaultDecision } from "../clients/faults";

const FAULT_MIGRATIONS = [
  `CREATE TABLE fault_state (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     plan TEXT NOT NULL, counts TEXT NOT NULL, hits TEXT NOT NULL, credentials TEXT NOT NULL
   );
   INSERT INTO fault_state (id, plan, counts, hits, credentials) VALUES (1, '{"rules":[]}', '[]', '{}', '{}');`,
];

const Hit = z.object({ point: FaultPoint, tool: z.string().max(64).nullable(), play: z.string().max(64).nullable().default(null) });

interface FaultState {
  plan: FaultPlan;
  /** Calls matched so far, per rule. */
  counts: number[];
  /** Calls checked so far, per operation (whether they failed or not). */
  hits: Record<string, number>;
  credentials: Record<string, string>;
}

/**
 * Test only (bound as `FAULTS` in the development config, never in
 * production): one global instance holding the fault plan, its counters and
 * the test credentials of providers. Every decision is one synchronous
 * read-modify-write, so concurrent callers count exactly.
 */
export class FaultInjector extends DurableObject<Env> {
  readonly #sql: Sql;
  /** Calls held by `hold` rules, per rule: each waits for `release`. In memory: a held call lives no longer than this object. */
  readonly #held = new Map<number, Array<() => void>>();
  /** Tests waiting for a rule to hold a call. */
  readonly #holdWatchers = new Map<number, Array<() => void>>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#sql = createSql(ctx.storage);
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, FAULT_MIGRATIONS));
  }

  /** Replaces the plan and zeroes its counters. */
  async setPlan(input: unknown): Promise<FaultState> {
    const parsed = FaultPlan.safeParse(input);
    if (!parsed.success) throw new ValidationError(`invalid fault plan: ${z.prettifyError(parsed.error)}`, parsed.error.issues);
    return this.#save({ ...this.#load(), plan: parsed.data, counts: [], hits: {} });
  }

  /** Removes every rule and credential and zeroes the counters. */
  async clear(): Promise<FaultState> {
    return this.#save({ plan: { rules: [] }, counts: [], hits: {}, credentials: {} });
  }

  async state(): Promise<FaultState> {
    return this.#load();
  }

  /** Whether any rule is set (callers skip per-call checks otherwise). */
  async armed(): Promise<boolean> {
    return this.#load().plan.rules.length > 0;
  }

  /** Counts one call of an operation and says whether it fails. */
  async hit(input: unknown): Promise<FaultDecision> {
    const { point, tool, play } = Hit.parse(input);
    const state = this.#load();
    const decision = decideFault(state.plan, state.counts, point, { tool, play });
    state.hits[point] = (state.hits[point] ?? 0) + 1;
    if (decision.fail && decision.rotateCredential) state.credentials[decision.rotateCredential.provider] = decision.rotateCredential.value;
    this.#save(state);
    return decision;
  }

  /** A call that a `hold` rule matched: resolves once the test releases the rule. */
  async hold(rule: number): Promise<void> {
    const released = new Promise<void>((resolve) => this.#held.set(rule, [...(this.#held.get(rule) ?? []), resolve]));
    for (const watcher of this.#holdWatchers.get(rule) ?? []) watcher();
    this.#holdWatchers.delete(rule);
    return released;
  }

  /** Resolves once rule `rule` holds a call (at once if it already does). */
  async held(rule: number): Promise<void> {
    if (this.#held.get(rule)?.length) return;
    return new Promise<void>((resolve) => this.#holdWatchers.set(rule, [...(this.#holdWatchers.get(rule) ?? []), resolve]));
  }

  /** Lets every call held by rule `rule` go on; returns how many there were. */
  async release(rule: number): Promise<number> {
    const waiting = this.#held.get(rule) ?? [];
    this.#held.delete(rule);
    for (const resolve of waiting) resolve();
    return waiting.length;
  }

  async credential(provider: string): Promise<string | null> {
    return this.#load().credentials[provider] ?? null;
  }

  async setCredential(provider: string, value: string | null): Promise<void> {
    const state = this.#load();
    if (value === null) delete state.credentials[provider];
    else state.credentials[provider] = value;
    this.#save(state);
  }

  #load(): FaultState {
    const row = this.#sql<{
      plan: string;
      counts: string;
      hits: string;
      credentials: string;
    }>`SELECT plan, counts, hits, credentials FROM fault_state WHERE id = 1`[0]!;
    return {
      plan: JSON.parse(row.plan) as FaultPlan,
      counts: JSON.parse(row.counts) as number[],
      hits: JSON.parse(row.hits) as Record<string, number>,
      credentials: JSON.parse(row.credentials) as Record<string, string>,
    };
  }

  #save(state: FaultState): FaultState {
    this.#sql.write`UPDATE fault_state SET plan = ${JSON.stringify(state.plan)}, counts = ${JSON.stringify(state.counts)},
      hits = ${JSON.stringify(state.hits)}, credentials = ${JSON.stringify(state.credentials)} WHERE id = 1`;
    return state;
  }
}

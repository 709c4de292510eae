import { DurableObject } from "cloudflare:workers";
import { z } from "zod";
import { policyFor, type RuntimePolicy } from "../engine/policy";
import { SubrequestMeter, type DatasetLocation } from "../engine/shard-clients";
import { playRegistry } from "../plays";
import { driveRun } from "../run/run-driver";
import { RunStore, TERMINAL, type LedgerEvent } from "../run/run-store";
import { runMigrations } from "../run/schema";
import { runView, type RunView } from "../run/run-view";
import { createSql, migrate } from "../storage/sql";
import { toolRegistry } from "../tools";

export const StartRun = z.object({
  runId: z.string().min(1).max(100),
  org: z.string().min(1).max(100),
  play: z.string().min(1).max(64),
  input: z.unknown(),
  force: z.boolean(),
  forceToolRefresh: z.boolean(),
  parentRunId: z.string().max(100).nullable(),
});
export type StartRun = z.infer<typeof StartRun>;

/** The longest a run may take before it fails with `deadline_exceeded`. */
const RUN_DEADLINE_MS = 24 * 3600 * 1000;

/**
 * One per run (named by the run id): the run record, chunk plan, attempt
 * epoch and ledger. Its alarm drives the run, so an evicted or restarted
 * coordinator resumes by itself. Every read checks the caller's org: another
 * org's run answers `null`, exactly like a missing one.
 */
export class RunCoordinator extends DurableObject<Env> {
  #store: RunStore;
  #policy: RuntimePolicy;
  #driving: AbortController | null = null;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new RunStore({ sql: createSql(ctx.storage), now: Date.now });
    this.#policy = policyFor(env);
    ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, runMigrations));
  }

  /** Records the run and arms the alarm; idempotent for the same run id. */
  async start(request: StartRun): Promise<RunView> {
    const init = StartRun.parse(request);
    const now = Date.now();
    if (this.#store.create({ ...init, deadlineAt: now + RUN_DEADLINE_MS }, init.input)) {
      await this.#syncDirectory();
      await this.ctx.storage.setAlarm(now);
    }
    return runView(this.#store)!;
  }

  /** The run as its org sees it; reading a non-terminal run also makes sure its alarm is armed. */
  async getRun(org: string): Promise<RunView | null> {
    const run = this.#store.run();
    if (!run || run.org !== org) return null;
    if (!TERMINAL.has(run.status) && !this.#driving && (await this.ctx.storage.getAlarm()) === null) {
      await this.ctx.storage.setAlarm(Date.now());
    }
    return runView(this.#store);
  }

  /** Stops new provider calls at once and ends the run `cancelled` (by the alarm, which releases leases). */
  async cancel(org: string): Promise<RunView | null> {
    const run = this.#store.run();
    if (!run || run.org !== org) return null;
    if (!TERMINAL.has(run.status)) {
      this.#store.requestCancel();
      this.#driving?.abort(new Error("[cancelled] the run was cancelled"));
      if (!this.#driving) await this.ctx.storage.setAlarm(Date.now());
    }
    return runView(this.#store);
  }

  async events(org: string, after: number, limit: number): Promise<{ events: LedgerEvent[]; nextCursor: number } | null> {
    const run = this.#store.run();
    if (!run || run.org !== org) return null;
    const events = this.#store.events(after, limit);
    return { events, nextCursor: events.length ? events[events.length - 1]!.seq : after };
  }

  /** Where a dataset of this run lives, for paged reads straight from its shards. */
  async dataset(org: string, name: string): Promise<{ location: DatasetLocation; total: number } | null> {
    const run = this.#store.run();
    if (!run || run.org !== org) return null;
    const map = this.#store.map(name);
    if (!map) return null;
    return { location: { org: run.org, play: run.play, dataset: name, shardCount: map.shardCount }, total: map.total };
  }

  override async alarm(): Promise<void> {
    if (this.#driving) return;
    const controller = new AbortController();
    this.#driving = controller;
    const meter = new SubrequestMeter();
    let next: number | null = null;
    try {
      next = await driveRun({
        env: this.env,
        store: this.#store,
        policy: this.#policy,
        plays: playRegistry(this.env),
        tools: toolRegistry(this.env),
        signal: controller.signal,
        now: Date.now,
        emit: (type, data) => void this.#store.append(type, data),
        onStatus: () => this.#syncDirectory(),
        meter,
      });
    } finally {
      this.#driving = null;
      this.#store.addUsage(meter);
    }
    if (next !== null) await this.ctx.storage.setAlarm(next);
  }

  async #syncDirectory(): Promise<void> {
    const run = this.#store.run()!;
    await this.env.ORG_DIRECTORY.getByName(run.org).record({
      runId: run.runId,
      play: run.play,
      status: run.status,
      parentRunId: run.parentRunId,
      createdAt: run.createdAt,
      updatedAt: run.updatedAt,
    });
  }
}

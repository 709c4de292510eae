import { DurableObject } from "cloudflare:workers";
import {
  DirectoryStore,
  directoryMigrations,
  ExecutorLeaseRequest,
  IdempotentSubmit,
  KeyRelease,
  RunEntry,
  type IdempotentRun,
  type ListRunsRequest,
} from "../stores/directory-store";
import {
  OrgSpendStore,
  PlayStatsMessage,
  SpendLimits,
  SpendReportMessage,
  utcDay,
  type DailyBudget,
  pastDailyLimit,
  type PlayStats,
  type SpendDay,
} from "../stores/org-spend-store";
import { createSql, migrate } from "../stores/sql";
import { UploadSweepStore, UploadWatch } from "../stores/upload-sweep-store";
import { forEachLimited } from "../core/collections";
import { messageOf } from "../core/errors";
import { Uploads } from "../uploads/uploads";

/** Uploads one alarm looks at, at most (each is a few R2 calls: the invocation's subrequests stay far from the cap). */
const SWEEPS_PER_ALARM = 100;
/** Looked at together: production allows an invocation six connections open at once, R2's included. */
const SWEEPS_IN_FLIGHT = 6;
/** An upload that could not be looked at (R2 failed) is looked at again this much later. */
const SWEEP_RETRY_MS = 60 * 60 * 1000;

/**
 * One per org: the index of the org's runs, newest first (`GET /v1/runs`), its idempotency keys, its spend, and the
 * uploads it will look at again (its alarm deletes what an upload that never became ready left).
 */
export class OrgDirectory extends DurableObject<Env> {
  #store: DirectoryStore;
  #spend: OrgSpendStore;
  #sweeps: UploadSweepStore;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new DirectoryStore({ sql: createSql(ctx.storage) });
    this.#spend = new OrgSpendStore({ sql: createSql(ctx.storage) });
    this.#sweeps = new UploadSweepStore({ sql: createSql(ctx.storage) });
    ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, directoryMigrations));
  }

  async record(entry: RunEntry): Promise<void> {
    this.#store.record(RunEntry.parse(entry));
  }

  /**
   * The run an `Idempotency-Key` of this org stands for, recording `runId` if the key is new, unless the org is past
   * its daily limit: a submit refused so leaves the key free (the limit read in the same transaction).
   */
  async claimIdempotencyKey(submit: IdempotentSubmit): Promise<IdempotentRun | { overDailyLimit: DailyBudget }> {
    const parsed = IdempotentSubmit.parse(submit);
    return this.ctx.storage.transactionSync(() => {
      const budget = this.#budget(parsed.now);
      return this.#store.claimKey(parsed, !pastDailyLimit(budget)) ?? { overDailyLimit: budget };
    });
  }

  /** Frees a key its submit could not start a run under, if it still stands for that run (DirectoryStore.releaseKey). */
  async releaseIdempotencyKey(release: KeyRelease): Promise<boolean> {
    return this.#store.releaseKey(KeyRelease.parse(release));
  }

  async list(request: ListRunsRequest) {
    return this.#store.list(request);
  }

  /** A run's bills past its last report, counted once; answers the place its bills are counted up to (OrgSpendStore.record). */
  async recordSpend(report: SpendReportMessage): Promise<number> {
    return this.ctx.storage.transactionSync(() => this.#spend.record(SpendReportMessage.parse(report)));
  }

  /** The org's credits per day and provider, from `from` to `to` (YYYY-MM-DD). */
  async spendDays(from: string, to: string): Promise<SpendDay[]> {
    return this.#spend.days(from, to);
  }

  /** The daily limit and what today (UTC) has billed so far: what a new run may still spend. */
  async spendBudget(now: number): Promise<DailyBudget> {
    return this.#budget(now);
  }

  #budget(now: number): DailyBudget {
    return { ...this.#spend.limits(), spentToday: this.#spend.dayTotal(utcDay(now)) };
  }

  /** More of today's limit for the run (OrgSpendStore.holdDaily): what was granted. */
  async holdDailySpend(runId: string, wantedMicros: number, needMicros: number): Promise<number> {
    const micros = (n: number) => Math.max(0, Math.floor(Number(n)) || 0);
    return this.ctx.storage.transactionSync(() =>
      this.#spend.holdDaily(String(runId), Date.now(), micros(wantedMicros), micros(needMicros)),
    );
  }

  /**
   * The run's spend is reported: its hold of today's limit becomes what it still has reserved (OrgSpendStore.resetDaily).
   * Answers the limit and today's billed, as spendBudget.
   */
  async resetDailySpend(runId: string, keepMicros: number): Promise<DailyBudget> {
    const now = Date.now();
    this.#spend.resetDaily(String(runId), now, Math.max(0, Math.floor(Number(keepMicros)) || 0));
    return this.spendBudget(now);
  }

  /** A completed run's rows computed and billed requests, added to its play's history once. */
  async recordPlayStats(stats: PlayStatsMessage): Promise<void> {
    this.ctx.storage.transactionSync(() => this.#spend.recordPlay(PlayStatsMessage.parse(stats)));
  }

  /** What the play's completed runs computed and billed (estimates learn from it). */
  async playStats(play: string): Promise<PlayStats> {
    return this.#spend.playStats(play);
  }

  /** Executors for a run's map under the org's bound (renew by asking again before the lease ends). */
  async leaseExecutors(request: ExecutorLeaseRequest): Promise<number> {
    const parsed = ExecutorLeaseRequest.parse(request);
    return this.ctx.storage.transactionSync(() => this.#store.leaseExecutors(parsed, Date.now()));
  }

  async setSpendLimits(limits: SpendLimits): Promise<SpendLimits> {
    return this.#spend.setLimits(SpendLimits.parse(limits));
  }

  /** Watches an upload from before its first byte (Uploads' watcher): the alarm looks at it again once it is due. */
  async watchUpload(watch: UploadWatch): Promise<void> {
    this.#sweeps.watch(UploadWatch.parse(watch));
    await this.#armNextAlarm();
  }

  /** Looks at the uploads due (Uploads.sweep), the longest due first; those still receiving, or that failed, later. */
  override async alarm(): Promise<void> {
    try {
      const due = this.#sweeps.due(Date.now(), SWEEPS_PER_ALARM);
      await forEachLimited(due, SWEEPS_IN_FLIGHT, async (watch) => {
        try {
          const again = await new Uploads({ bucket: this.env.UPLOADS, org: watch.org }).sweep(watch.uploadId);
          if (again === null) this.#sweeps.forget(watch.uploadId);
          else this.#sweeps.watch({ ...watch, dueAt: again });
        } catch (error) {
          console.warn(`upload ${watch.uploadId} could not be looked at (${messageOf(error)}); again in an hour`);
          this.#sweeps.watch({ ...watch, dueAt: Date.now() + SWEEP_RETRY_MS });
        }
      });
    } finally {
      // More due than one alarm looks at: the next goes on at once.
      await this.#armNextAlarm();
    }
  }

  /** The alarm at the earliest upload due, or none. */
  async #armNextAlarm(): Promise<void> {
    const next = this.#sweeps.nextDueAt();
    if (next === null) await this.ctx.storage.deleteAlarm();
    else await this.ctx.storage.setAlarm(next);
  }
}

/**
 * Callers' side of an org's directory: the runs it lists and the spend it
 * totals. Runs report their status and spend here; HTTP reads from here.
 */
type DirectoryStub = ReturnType<Env["ORG_DIRECTORY"]["getByName"]>;
/** A run's entry in its org's list. */
export type RunEntryMessage = Parameters<DirectoryStub["record"]>[0];
export type SpendReportMessage = Parameters<DirectoryStub["recordSpend"]>[0];
export type PlayStatsMessage = Parameters<DirectoryStub["recordPlayStats"]>[0];
export type ExecutorLeaseMessage = Parameters<DirectoryStub["leaseExecutors"]>[0];
export type UploadWatchMessage = Parameters<DirectoryStub["watchUpload"]>[0];

export class OrgClient {
  #env: Pick<Env, "ORG_DIRECTORY">;
  #org: string;

  constructor(options: { env: Pick<Env, "ORG_DIRECTORY">; org: string }) {
    this.#env = options.env;
    this.#org = options.org;
  }

  /** A stub per call: one whose call threw (the directory restarted) fails every later call. */
  get #stub(): DirectoryStub {
    return this.#env.ORG_DIRECTORY.getByName(this.#org);
  }

  /** Records (or updates) a run's entry: its status as the org's list shows it. */
  record(entry: RunEntryMessage): Promise<void> {
    return this.#stub.record(entry);
  }

  /** The org's daily limit and what it has billed today (UTC). */
  spendBudget(now: number): Promise<{ dailyCredits: number | null; spentToday: number }> {
    return this.#stub.spendBudget(now);
  }

  /** More of the org's daily limit held for `runId` (`wantedMicros`, at most half the day's rest past `needMicros`): what was granted. */
  holdDailySpend(runId: string, wantedMicros: number, needMicros: number): Promise<number> {
    return this.#stub.holdDailySpend(runId, wantedMicros, needMicros);
  }

  /** The run's spend is reported: its hold becomes `keepMicros` (still reserved). The org's daily limit and today's billed. */
  resetDailySpend(runId: string, keepMicros: number): Promise<{ dailyCredits: number | null; spentToday: number }> {
    return this.#stub.resetDailySpend(runId, keepMicros);
  }

  recordSpend(report: SpendReportMessage): Promise<number> {
    return this.#stub.recordSpend(report);
  }

  recordPlayStats(stats: PlayStatsMessage): Promise<void> {
    return this.#stub.recordPlayStats(stats);
  }

  /** Executors the org's bound leaves a run's map now (at least one), leased for `ttlMs`. */
  leaseExecutors(request: ExecutorLeaseMessage): Promise<number> {
    return this.#stub.leaseExecutors(request);
  }

  /** Watches an upload until it is ready or gone: the directory deletes what one that never became ready left. */
  watchUpload(watch: UploadWatchMessage): Promise<void> {
    return this.#stub.watchUpload(watch);
  }
}

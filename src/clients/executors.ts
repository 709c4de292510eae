/**
 * A run's coordinator and its executors, each calling the other: the
 * coordinator assigns and stops chunk attempts (`ExecutorClient`); an
 * executor asks its run's coordinator for what it needs and reports to it
 * (`CoordinatorLink`). Every call is counted by the caller's meter.
 */
import type {
  AttemptReport,
  ChunkAssignment,
  ChunkSweepAssignment,
  ChunkSweepResult,
  ReportAnswer,
  SpendGrant,
  TracedEffect,
  TracedMap,
} from "../contracts/executors";
import type { FaultProbe } from "./faults";
import type { SubrequestMeter } from "../core/meter";
import type { RuntimePolicy } from "../core/policy";
import type { RunRecord } from "../stores/run-store";

/**
 * What an executor needs to run the play up to a map (runtime/executor/capture.ts):
 * the run, its input, the policy of the invocation that assigned the attempt,
 * and the play-level effects that invocation had made.
 */
export interface CaptureSource {
  /** The coordinator's invocation this describes (its attempt epoch). */
  runAttempt: number;
  run: RunRecord;
  inputJson: string;
  policy: RuntimePolicy;
  effects: TracedEffect[];
  maps: TracedMap[];
  /** Whether the run's spend is capped: an executor then asks before it bills more than it was granted. */
  spendCapped: boolean;
  /**
   * Which invocation of the coordinator this is (ChunkAssignment.invocation): the trace holds what its play-level
   * fetches answered, which the next invocation of the same epoch fetches again.
   */
  invocation?: string;
}

/** The coordinator's RPC surface as its executors use it (the stub's own type is too deep for the checker). */
interface CoordinatorRpc {
  captureSource(attemptSeq: number, known?: string): Promise<CaptureSource | "unchanged" | null>;
  attemptReport(report: AttemptReport): Promise<ReportAnswer>;
  grantSpend(attemptId: string, wantedMicros: number): Promise<SpendGrant>;
}

/** An executor's RPC surface as the coordinator uses it. */
interface ExecutorRpc {
  assign(assignment: ChunkAssignment): Promise<boolean>;
  stop(attemptId: string, reason: string): Promise<void>;
  windDown(attemptId: string, reason: string): Promise<void>;
  sweep(sweep: ChunkSweepAssignment): Promise<ChunkSweepResult>;
}

/** The name of a run's executor in `slot`. */
export function executorName(runId: string, slot: number): string {
  return `${runId}#${slot}`;
}

/** The coordinator's side: assigns chunk attempts to the run's executors and stops them. */
export class ExecutorClient {
  #ns: Env["MAP_EXECUTOR"];
  #meter: SubrequestMeter | null;

  constructor(options: { env: Pick<Env, "MAP_EXECUTOR">; meter?: SubrequestMeter }) {
    this.#ns = options.env.MAP_EXECUTOR;
    this.#meter = options.meter ?? null;
  }

  /**
   * Hands the executor `name` an attempt; returns once it is held there (the
   * attempt runs in the executor's own invocation): true, or false when the
   * executor dropped it (it has seen a newer epoch of the run).
   */
  assign(name: string, assignment: ChunkAssignment): Promise<boolean> {
    return this.#stub(name, "assign").assign(assignment);
  }

  /** Stops the attempt if the executor still runs it: nothing more is sent for it. */
  stop(name: string, attemptId: string, reason: string): Promise<void> {
    return this.#stub(name, "stop").stop(attemptId, reason);
  }

  /**
   * Winds the attempt down if the executor still holds it: it sends no request more, stores the rows it computed and
   * ends, handing back the rows it left (its end's `deferred`).
   */
  windDown(name: string, attemptId: string, reason: string): Promise<void> {
    return this.#stub(name, "windDown").windDown(attemptId, reason);
  }

  /** Has the executor `name` record which of the sweep's chunks are wholly reused, and answer in the call. */
  sweep(name: string, sweep: ChunkSweepAssignment): Promise<ChunkSweepResult> {
    return this.#stub(name, "sweep").sweep(sweep);
  }

  #stub(name: string, method: string): ExecutorRpc {
    this.#meter?.countRpc(`executor.${method}`);
    return this.#ns.getByName(name) as unknown as ExecutorRpc;
  }
}

/** An executor's side: its run's coordinator. */
export class CoordinatorLink {
  #ns: Pick<Env, "RUN_COORDINATOR">["RUN_COORDINATOR"];
  #runId: string;
  #meter: SubrequestMeter | null;
  #faults: FaultProbe | null;

  constructor(options: { env: Pick<Env, "RUN_COORDINATOR">; runId: string; meter?: SubrequestMeter; faults?: FaultProbe }) {
    this.#ns = options.env.RUN_COORDINATOR;
    this.#runId = options.runId;
    this.#meter = options.meter ?? null;
    this.#faults = options.faults ?? null;
  }

  /**
   * A stub per call: once one call through a stub throws (the coordinator restarted under it), every later call
   * through that stub throws too, and a link lives as long as an executor's invocation: its attempts reported
   * nothing more, their ends (and the spend they were granted) waited for the executor's alarm.
   */
  get #stub(): CoordinatorRpc {
    return this.#ns.getByName(this.#runId) as unknown as CoordinatorRpc;
  }

  /**
   * What the invocation of epoch `attemptSeq` had done, or null when that invocation is no longer running;
   * `"unchanged"` when the invocation `known` (whose source the executor holds) is the one still answering.
   */
  captureSource(attemptSeq: number, known?: string): Promise<CaptureSource | "unchanged" | null> {
    this.#count("captureSource");
    return this.#stub.captureSource(attemptSeq, known);
  }

  /** Counts a report's call ahead of sending it, so that the report's own usage can carry it (`report(…, true)`). */
  countReport(): void {
    this.#count("attemptReport");
  }

  /** `counted`: {@link countReport} has counted this call. */
  async report(report: AttemptReport, counted = false): Promise<ReportAnswer> {
    await this.#faults?.check("executor.report");
    if (report.end) await this.#faults?.check("executor.end");
    if (!counted) this.#count("attemptReport");
    const answer = await this.#stub.attemptReport(report);
    await this.#faults?.check("executor.reported");
    if (report.end) await this.#faults?.check("executor.ended");
    return answer;
  }

  grantSpend(attemptId: string, wantedMicros: number): Promise<SpendGrant> {
    this.#count("grantSpend");
    return this.#stub.grantSpend(attemptId, wantedMicros);
  }

  #count(method: string): void {
    this.#meter?.countRpc(`run.${method}`);
  }
}

/**
 * The simulator's durable state over one object's SQLite: its config, its
 * counters, the keys it has billed (with their outputs, for idempotent replay),
 * the `!flaky` keys it has seen, and what request each key was first sent
 * with (its tool and a hash of its input). Every method is synchronous, so a
 * decision and the counter writes it implies cannot interleave with another
 * request: a key is billed at most once however many callers race.
 */
import { createHash } from "node:crypto";
import { canonicalJson } from "../core/hash";
import type { Sql } from "../stores/sql";
import { DEFAULT_SIM_CONFIG, RateLimitHeaders, type SimConfig, type SimConfigPatch, type SimStats } from "./protocol";
import { evaluate, SIM_TOOLS, type SimFailure, type SimToolName } from "./simulator";

/** Schema of the simulator's storage, applied in order by `migrate`. */
export const SIM_MIGRATIONS: readonly string[] = [
  `CREATE TABLE sim_config (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     latency_ms INTEGER NOT NULL,
     rate_per_second INTEGER,
     batch_max_size INTEGER NOT NULL
   );
   CREATE TABLE sim_counters (
     id INTEGER PRIMARY KEY CHECK (id = 1),
     calls INTEGER NOT NULL DEFAULT 0,
     billed INTEGER NOT NULL DEFAULT 0,
     duplicates INTEGER NOT NULL DEFAULT 0,
     batch_calls INTEGER NOT NULL DEFAULT 0,
     rate_limited INTEGER NOT NULL DEFAULT 0
   );
   INSERT INTO sim_counters (id) VALUES (1);
   CREATE TABLE sim_tool_counters (
     tool TEXT PRIMARY KEY,
     calls INTEGER NOT NULL DEFAULT 0,
     billed INTEGER NOT NULL DEFAULT 0
   );
   CREATE TABLE sim_billed (
     idempotency_key TEXT PRIMARY KEY,
     tool TEXT NOT NULL,
     output TEXT NOT NULL,
     billed_at_ms INTEGER NOT NULL
   );
   CREATE TABLE sim_flaky_seen (idempotency_key TEXT PRIMARY KEY);`,
  `ALTER TABLE sim_counters ADD COLUMN max_observed_per_second INTEGER NOT NULL DEFAULT 0;`,
  `ALTER TABLE sim_config ADD COLUMN rate_limit_headers TEXT NOT NULL DEFAULT 'retry-after';`,
  `ALTER TABLE sim_counters ADD COLUMN max_in_flight INTEGER NOT NULL DEFAULT 0;
   CREATE TABLE sim_caller_peaks (caller TEXT PRIMARY KEY, max_in_flight INTEGER NOT NULL);`,
  `ALTER TABLE sim_config ADD COLUMN max_concurrent INTEGER;`,
  `CREATE TABLE sim_key_requests (idempotency_key TEXT PRIMARY KEY, tool TEXT NOT NULL, input_hash TEXT NOT NULL);
   ALTER TABLE sim_counters ADD COLUMN key_reused INTEGER NOT NULL DEFAULT 0;`,
];

/** The outcome of one call or batch member after billing. */
export type Settlement =
  | { status: 200; output: unknown; duplicate: boolean }
  | { status: SimFailure["status"]; error: { code: string; message: string } };

type ConfigRow = {
  latency_ms: number;
  rate_per_second: number | null;
  batch_max_size: number;
  rate_limit_headers: string;
  max_concurrent: number | null;
};
type CountersRow = {
  calls: number;
  billed: number;
  duplicates: number;
  batch_calls: number;
  rate_limited: number;
  max_observed_per_second: number;
  max_in_flight: number;
  key_reused: number;
};
type ToolCountersRow = { tool: string; calls: number; billed: number };
type CallerPeakRow = { caller: string; max_in_flight: number };

function rowToConfig(row: ConfigRow | undefined): SimConfig {
  if (!row) return { ...DEFAULT_SIM_CONFIG };
  const headers = RateLimitHeaders.safeParse(row.rate_limit_headers);
  return {
    latencyMs: row.latency_ms,
    ratePerSecond: row.rate_per_second,
    batchMaxSize: row.batch_max_size,
    rateLimitHeaders: headers.success ? headers.data : DEFAULT_SIM_CONFIG.rateLimitHeaders,
    maxConcurrent: row.max_concurrent,
  };
}

/**
 * Billing and counting for the simulated provider. Construct over the
 * object's {@link Sql} after {@link SIM_MIGRATIONS} have been applied.
 */
export class SimStore {
  readonly #sql: Sql;
  readonly #now: () => number;
  /**
   * The config and the stored peaks, as last read or written: this object is
   * their only writer, and every request reads the config and raises the
   * peaks, which then costs a write only when one rises.
   */
  #config: SimConfig | null = null;
  #peaks: { perSecond: number; inFlight: number; byCaller: Map<string, number> } | null = null;

  constructor(options: { sql: Sql; now?: () => number }) {
    this.#sql = options.sql;
    this.#now = options.now ?? Date.now;
  }

  /** The current config (defaults until first changed). */
  config(): SimConfig {
    this.#config ??= Object.freeze(
      rowToConfig(
        this
          .#sql<ConfigRow>`SELECT latency_ms, rate_per_second, batch_max_size, rate_limit_headers, max_concurrent FROM sim_config WHERE id = 1`[0],
      ),
    );
    return this.#config;
  }

  /** Applies a partial update and returns the whole resulting config. */
  updateConfig(patch: SimConfigPatch): SimConfig {
    const next: SimConfig = { ...this.config(), ...patch };
    this.#sql.write`INSERT INTO sim_config (id, latency_ms, rate_per_second, batch_max_size, rate_limit_headers, max_concurrent)
      VALUES (1, ${next.latencyMs}, ${next.ratePerSecond}, ${next.batchMaxSize}, ${next.rateLimitHeaders}, ${next.maxConcurrent})
      ON CONFLICT (id) DO UPDATE SET latency_ms = excluded.latency_ms, rate_per_second = excluded.rate_per_second,
        batch_max_size = excluded.batch_max_size, rate_limit_headers = excluded.rate_limit_headers, max_concurrent = excluded.max_concurrent`;
    this.#config = Object.freeze(next);
    return next;
  }

  /** Counts one provider request; `tool` is null when the request named no known tool. */
  recordRequest(request: { tool: SimToolName | null; batch: boolean }): void {
    const batch = request.batch ? 1 : 0;
    this.#sql.write`UPDATE sim_counters SET calls = calls + 1, batch_calls = batch_calls + ${batch} WHERE id = 1`;
    if (request.tool) {
      this.#sql.write`INSERT INTO sim_tool_counters (tool, calls) VALUES (${request.tool}, 1)
        ON CONFLICT (tool) DO UPDATE SET calls = calls + 1`;
    }
  }

  /** Raises the peak of requests seen in one second to `observed` if it is higher. */
  recordObservedRate(observed: number): void {
    const peaks = this.#storedPeaks();
    if (observed <= peaks.perSecond) return;
    peaks.perSecond = observed;
    this.#sql.write`UPDATE sim_counters SET max_observed_per_second = max(max_observed_per_second, ${observed}) WHERE id = 1`;
  }

  /**
   * Raises the peaks of requests in flight to what is in flight now: `inFlight`
   * overall, and `callerInFlight` for `caller` (a request that named one).
   */
  recordInFlight(now: { inFlight: number; caller: string | null; callerInFlight: number }): void {
    const peaks = this.#storedPeaks();
    if (now.inFlight > peaks.inFlight) {
      peaks.inFlight = now.inFlight;
      this.#sql.write`UPDATE sim_counters SET max_in_flight = max(max_in_flight, ${now.inFlight}) WHERE id = 1`;
    }
    if (now.caller === null || now.callerInFlight <= (peaks.byCaller.get(now.caller) ?? 0)) return;
    peaks.byCaller.set(now.caller, now.callerInFlight);
    this.#sql.write`INSERT INTO sim_caller_peaks (caller, max_in_flight) VALUES (${now.caller}, ${now.callerInFlight})
      ON CONFLICT (caller) DO UPDATE SET max_in_flight = max(max_in_flight, excluded.max_in_flight)`;
  }

  /** The peaks as stored, read once. */
  #storedPeaks(): { perSecond: number; inFlight: number; byCaller: Map<string, number> } {
    if (this.#peaks) return this.#peaks;
    const counters = this.#sql<{ max_observed_per_second: number; max_in_flight: number }>`
      SELECT max_observed_per_second, max_in_flight FROM sim_counters WHERE id = 1`[0];
    const byCaller = new Map<string, number>();
    for (const row of this.#sql<CallerPeakRow>`SELECT caller, max_in_flight FROM sim_caller_peaks`)
      byCaller.set(row.caller, row.max_in_flight);
    this.#peaks = { perSecond: counters?.max_observed_per_second ?? 0, inFlight: counters?.max_in_flight ?? 0, byCaller };
    return this.#peaks;
  }

  /** Counts one `429` answer. */
  recordRateLimited(): void {
    this.#sql.write`UPDATE sim_counters SET rate_limited = rate_limited + 1 WHERE id = 1`;
  }

  /**
   * Decides one call (or batch member) of `tool` under `idempotencyKey` and
   * records its billing: invalid input is a 400 (and binds nothing to the
   * key); a key first sent with another tool or another input (compared by a
   * hash of its canonical JSON, so key order does not matter) is a 422
   * `idempotency_key_reused`, unbilled and counted in `keyReused`; an
   * already-billed key replays its stored output and counts a duplicate;
   * otherwise the key is bound to this request, the tool's failure rules
   * apply and a success bills the key. A key billed before requests were
   * recorded has none and replays whatever it is sent with.
   */
  settle(tool: SimToolName, idempotencyKey: string, input: unknown): Settlement {
    const evaluation = evaluate(tool, input);
    if (evaluation.kind === "failed" && evaluation.failure.status === 400) return failed(evaluation.failure);

    const inputHash = hashInput(input);
    const first = this.#sql<{ tool: string; input_hash: string }>`
      SELECT tool, input_hash FROM sim_key_requests WHERE idempotency_key = ${idempotencyKey}`[0];
    if (first && (first.tool !== tool || first.input_hash !== inputHash)) {
      this.#sql.write`UPDATE sim_counters SET key_reused = key_reused + 1 WHERE id = 1`;
      const what = first.tool === tool ? `${tool} with a different input` : `${first.tool}, not ${tool}`;
      return {
        status: 422,
        error: {
          code: "idempotency_key_reused",
          message: `The idempotency key "${idempotencyKey}" was first sent to ${what}; a different request needs a new key.`,
        },
      };
    }

    const billed = this.#sql<{ output: string }>`SELECT output FROM sim_billed WHERE idempotency_key = ${idempotencyKey}`[0];
    if (billed) {
      this.#sql.write`UPDATE sim_counters SET duplicates = duplicates + 1 WHERE id = 1`;
      return { status: 200, output: JSON.parse(billed.output) as unknown, duplicate: true };
    }
    if (!first) {
      this.#sql.write`INSERT INTO sim_key_requests (idempotency_key, tool, input_hash) VALUES (${idempotencyKey}, ${tool}, ${inputHash})`;
    }

    if (evaluation.kind === "failed") return failed(evaluation.failure);
    if (evaluation.kind === "flaky") {
      const firstSight = this.#sql.write`INSERT INTO sim_flaky_seen (idempotency_key) VALUES (${idempotencyKey}) ON CONFLICT DO NOTHING`;
      if (firstSight > 0) return failed(evaluation.failure);
    }

    const output = evaluation.output;
    this.#sql
      .write`INSERT INTO sim_billed (idempotency_key, tool, output, billed_at_ms) VALUES (${idempotencyKey}, ${tool}, ${JSON.stringify(output)}, ${this.#now()})`;
    this.#sql.write`UPDATE sim_counters SET billed = billed + 1 WHERE id = 1`;
    this.#sql.write`INSERT INTO sim_tool_counters (tool, billed) VALUES (${tool}, 1)
      ON CONFLICT (tool) DO UPDATE SET billed = billed + 1`;
    return { status: 200, output, duplicate: false };
  }

  /** The output billed under `idempotencyKey`, or null. A lookup is not a call: it counts nothing. */
  billedOutput(idempotencyKey: string): { output: unknown } | null {
    const billed = this.#sql<{ output: string }>`SELECT output FROM sim_billed WHERE idempotency_key = ${idempotencyKey}`[0];
    return billed ? { output: JSON.parse(billed.output) as unknown } : null;
  }

  /** Every counter, with every known tool listed in `byTool` (zeros included). */
  stats(): SimStats {
    const counters = this
      .#sql<CountersRow>`SELECT calls, billed, duplicates, batch_calls, rate_limited, max_observed_per_second, max_in_flight,
        key_reused FROM sim_counters WHERE id = 1`[0];
    const byTool: SimStats["byTool"] = {};
    for (const tool of SIM_TOOLS) byTool[tool] = { calls: 0, billed: 0 };
    for (const row of this.#sql<ToolCountersRow>`SELECT tool, calls, billed FROM sim_tool_counters ORDER BY tool`) {
      byTool[row.tool] = { calls: row.calls, billed: row.billed };
    }
    const maxInFlightByCaller: SimStats["maxInFlightByCaller"] = {};
    for (const row of this.#sql<CallerPeakRow>`SELECT caller, max_in_flight FROM sim_caller_peaks ORDER BY caller`) {
      maxInFlightByCaller[row.caller] = row.max_in_flight;
    }
    return {
      calls: counters?.calls ?? 0,
      billed: counters?.billed ?? 0,
      duplicates: counters?.duplicates ?? 0,
      byTool,
      batchCalls: counters?.batch_calls ?? 0,
      rateLimited: counters?.rate_limited ?? 0,
      maxObservedPerSecond: counters?.max_observed_per_second ?? 0,
      maxInFlight: counters?.max_in_flight ?? 0,
      maxInFlightByCaller,
      keyReused: counters?.key_reused ?? 0,
    };
  }

  /**
   * Zeroes every counter and forgets billed, flaky-seen and recorded keys. The config
   * is kept but for `rateLimitHeaders`, which returns to its default: a
   * header style chosen for one test or bench case does not leak into the next.
   */
  reset(): void {
    this.#sql.write`UPDATE sim_config SET rate_limit_headers = ${DEFAULT_SIM_CONFIG.rateLimitHeaders} WHERE id = 1`;
    this.#sql
      .write`UPDATE sim_counters SET calls = 0, billed = 0, duplicates = 0, batch_calls = 0, rate_limited = 0, max_observed_per_second = 0,
        max_in_flight = 0, key_reused = 0 WHERE id = 1`;
    this.#sql.write`DELETE FROM sim_tool_counters`;
    this.#sql.write`DELETE FROM sim_caller_peaks`;
    this.#sql.write`DELETE FROM sim_billed`;
    this.#sql.write`DELETE FROM sim_flaky_seen`;
    this.#sql.write`DELETE FROM sim_key_requests`;
    this.#config = null;
    this.#peaks = null;
  }
}

/**
 * What a key remembers of its first input: 128 bits of the SHA-256 of its
 * canonical JSON, so storage per key stays small however large the input.
 */
function hashInput(input: unknown): string {
  return createHash("sha256").update(canonicalJson(input)).digest("hex").slice(0, 32);
}

function failed(failure: SimFailure): Settlement {
  return { status: failure.status, error: { code: failure.code, message: failure.message } };
}

/**
 * Helpers of the chaos suite (test/chaos-*.test.ts): runs with test policy
 * overrides, the fault seam, polling for conditions, and the one check every
 * scenario ends with: each input row persisted once with the right output,
 * and every provider call billed once.
 */
import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { expect } from "vitest";
import { ExecutorStore } from "../src/stores/executor-store";
import { createSql } from "../src/stores/sql";
import { allEvents, api, apiJson, datasetRows, expectedEmail, expectedVerdict, runView, simStats } from "./helpers";

/** One row of the `test-calls` play: one tool call, its output lands in `out`. */
export interface CallRow {
  id: string;
  tool: "sim_find_email" | "sim_verify_email";
  input: Record<string, string>;
}

/**
 * `count` rows of unique calls, alternating the plain and the batchable tool,
 * so a scenario covers single calls and batch members alike.
 */
export function callRows(prefix: string, count: number, from = 0): CallRow[] {
  return Array.from({ length: count }, (_, n): CallRow => {
    const i = from + n;
    return i % 2 === 0
      ? { id: `${prefix}${i}`, tool: "sim_find_email", input: { name: `${prefix} Person ${i}`, domain: "chaos.test" } }
      : { id: `${prefix}${i}`, tool: "sim_verify_email", input: { email: `${prefix.toLowerCase()}.person${i}@chaos.test` } };
  });
}

/** What the simulator answers for a row's call (API.md rules, computed independently). */
export function expectedOut(row: CallRow): unknown {
  if (row.tool === "sim_find_email") return { email: expectedEmail(row.input.name!, row.input.domain!) };
  return { email: row.input.email, verdict: expectedVerdict(row.input.email!) };
}

/** Starts a run with optional test policy overrides and runtime limit. */

export async function setFaults(rules: unknown[]): Promise<void> {
  const res = await api("/v1/test/faults", { method: "PUT", json: { rules } });
  expect(res.status).toBe(200);
}

export async function clearFaults(): Promise<void> {
  await api("/v1/test/faults", { method: "DELETE" });
}

export async function faultState(): Promise<{ counts: number[]; hits: Record<string, number> }> {
  return (await apiJson("/v1/test/faults")).body;
}

export async function setSim(config: Record<string, unknown>): Promise<void> {
  const res = await api("/v1/sim/config", { method: "PUT", json: config });
  expect(res.status).toBe(200);
}

/** The simulator's defaults: every scenario restores them in `finally`. */
export const SIM_DEFAULTS = { latencyMs: 0, ratePerSecond: null, batchMaxSize: 50 };

/** Polls `read` until `ok` holds (no wall-clock assertion: the timeout only bounds a hung test). */
export async function until<T>(read: () => Promise<T>, ok: (value: T) => boolean, what: string, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await read();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(value)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The child `runId` started (its first `child.started`), once it has. */
export async function childOf(runId: string): Promise<string> {
  const events = await until(
    () => allEvents(runId),
    (found) => found.some((e) => e.type === "child.started"),
    `run ${runId} to start its child`,
  );
  return (events.find((e) => e.type === "child.started") as never as { childRunId: string }).childRunId;
}

export async function logLines(runId: string): Promise<string[]> {
  return (await allEvents(runId)).filter((e) => e.type === "log.appended").map((e) => String(e.line));
}

/**
 * The end of every scenario: the run's dataset holds each input row once, in
 * input order, completed with the simulator's answer; the simulator billed
 * each distinct call once and saw no call repeated with a billed key.
 */
export async function expectExactlyOnce(
  runId: string,
  dataset: string,
  rows: readonly CallRow[],
  billed = rows.length,
  spenders: readonly string[] = [runId],
): Promise<void> {
  const stored = await datasetRows(runId, dataset);
  expect(stored.map((r) => r._key)).toEqual(rows.map((r) => r.id));
  stored.forEach((row, i) => {
    expect(row._status, `row ${row._key}: ${row._error}`).toBe("completed");
    expect(row.out).toEqual(expectedOut(rows[i]!));
  });
  const stats = await simStats();
  expect(stats.duplicates).toBe(0);
  expect(stats.billed).toBe(billed);
  // Every bill is counted once, at its price, against the run whose receipt holds it.
  const spent = await Promise.all(spenders.map(async (id) => (await runView(id)).usage.spend.total as number));
  expect(Math.round(spent.reduce((a, b) => a + b, 0) * 1e6)).toBe(Math.round(billedCredits(stats) * 1e6));
}

/** The prices of the simulated tools (API.md "Spend"). */
export const SIM_PRICES: Readonly<Record<string, number>> = {
  sim_find_email: 1,
  sim_verify_email: 0.25,
  test_unkeyed_find: 1,
  test_scoped_find: 1,
};

/** Credits the simulator billed: each tool's billed calls (or members) times its price. */
export function billedCredits(stats: { byTool: Record<string, { billed: number }> }): number {
  let micros = 0;
  for (const [tool, counts] of Object.entries(stats.byTool)) micros += counts.billed * Math.round(SIM_PRICES[tool]! * 1e6);
  return micros / 1e6;
}

/** The stub of a run's coordinator. */
export function coordinator(runId: string) {
  return env.RUN_COORDINATOR.getByName(runId);
}

/**
 * What executor `name` holds: each attempt's chunk, the attempt it runs alongside, and the rows a wind-down left it
 * (null: it has not wound down), oldest first.
 */
export function heldBy(
  name: string,
): Promise<{ chunk: number; attemptId: string; alongside: string | null; state: string; resumeRows: number[] | null }[]> {
  return runInDurableObject(env.MAP_EXECUTOR.getByName(name), (_object: unknown, state: DurableObjectState) =>
    new ExecutorStore({ sql: createSql(state.storage) }).held().map(({ assignment, state, resume }) => ({
      chunk: assignment.chunk,
      attemptId: assignment.attempt.attemptId,
      alongside: assignment.alongside,
      state,
      resumeRows: resume?.rows ?? null,
    })),
  );
}

/** Aborts one object as a crash or eviction would: whatever it was running dies; its storage stays. */
export async function crash(stub: DurableObjectStub): Promise<void> {
  await runInDurableObject(stub, (_object: unknown, state: DurableObjectState) => state.abort("chaos: the object was evicted")).then(
    () => {
      throw new Error("abort() returned: the object was not aborted");
    },
    (error: unknown) => expect(String(error)).toContain("chaos: the object was evicted"),
  );
}

/**
 * A child that two parents share (the same `ctx.runPlay` call in each) spends from the cap of a parent still waiting
 * on it. When the parent that allots to it is cancelled, or passes its runtime limit, while the other still waits,
 * the child goes on: the first parent counts what the child had spent until then, and the other allots the rest.
 */
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { afterEach, describe, expect, it } from "vitest";
import { FAULT_OBJECT_NAME } from "../src/clients/faults";
import { clearFaults, setFaults, until } from "./chaos-helpers";
import { allEvents, apiJson, simReset, simStats, startRun, waitForRun } from "./helpers";

/** What the run's coordinator counts of each child's spend (its allotment, or what it spent once ended). */
function childSpend(runId: string): Promise<{ child: string; micros: number; ended: number }[]> {
  return runInDurableObject(env.RUN_COORDINATOR.getByName(runId), (_object: unknown, state: DurableObjectState) =>
    state.storage.sql
      .exec<{ child: string; micros: number; ended: number }>("SELECT child_run_id AS child, micros, ended FROM child_spend")
      .toArray(),
  );
}

/** The child the run started or joined, once it has. */
async function childOf(runId: string): Promise<{ childRunId: string; reused: boolean }> {
  const events = await until(
    () => allEvents(runId),
    (found) => found.some((e) => e.type === "child.started"),
    `run ${runId} to start its child`,
  );
  return events.find((e) => e.type === "child.started") as never;
}

function leads(prefix: string, n: number): { id: string; name: string; domain: string }[] {
  return Array.from({ length: n }, (_, i) => ({ id: `${prefix}-${i}`, name: `${prefix} Lead ${i}`, domain: "shared.test" }));
}

const FIRST = 2;
const SECOND = 20;
/** A find (1 credit) and a verify (0.25) per lead. */
const PER_LEAD_MICROS = 1_250_000;

/** Once the child has spent its first part and waits for the signal `go`. */
async function childWaitsForGo(childRunId: string): Promise<void> {
  await until(
    () => allEvents(childRunId),
    (events) => events.some((e) => e.type === "wait.started"),
    "the child to wait for go",
  );
}

/** What `parent` counts of the child's spend, once it counts it as final. */
function countedAsFinal(parent: string): Promise<{ child: string; micros: number; ended: number }[]> {
  return until(
    () => childSpend(parent),
    (rows) => rows[0]?.ended === 1,
    "the first parent to count the child's spend as final",
  );
}

/** Sends the child its `go`, and answers `parent` once it has ended. */
async function goThenWait(childRunId: string, parent: string): Promise<any> {
  expect((await apiJson(`/v1/runs/${childRunId}/signals/go`, { method: "POST", json: { data: true } })).status).toBe(202);
  return waitForRun(parent, { timeoutMs: 60_000 });
}

/** Both parents on `child`, the first cancelled once the child spent its first part and waits for `go`: their run ids. */
async function shareThenCancelFirst(child: unknown, caps: { first: number; second: number | null }): Promise<[string, string, string]> {
  const first = await startRun("test-run-child", child, { maxSpend: caps.first });
  const { childRunId } = await childOf(first);
  await childWaitsForGo(childRunId);
  const second = await startRun("test-run-child", child, caps.second === null ? {} : { maxSpend: caps.second });
  expect(await childOf(second)).toMatchObject({ childRunId, reused: true });
  expect((await apiJson(`/v1/runs/${first}/cancel`, { method: "POST" })).status).toBe(202);
  expect((await waitForRun(first)).status).toBe("cancelled");
  return [first, second, childRunId];
}

afterEach(async () => {
  await clearFaults();
  await env.FAULTS!.getByName(FAULT_OBJECT_NAME).release(0);
});

describe("a child two parents share", () => {
  for (const stop of ["cancel", "runtime limit"] as const)
    for (const otherCap of [1_000, null])
      it(`spends from the other parent's cap (${otherCap ?? "none"}) once the first is stopped by its ${stop}`, async () => {
        await simReset();
        const tag = crypto.randomUUID().slice(0, 8);
        const child = {
          play: "test-enrich-in-two",
          input: { first: leads(`first-${tag}`, FIRST), second: leads(`second-${tag}`, SECOND) },
        };
        const first = await startRun("test-run-child", child, { maxSpend: 10, ...(stop === "runtime limit" ? { timeoutSeconds: 6 } : {}) });
        const { childRunId } = await childOf(first);
        // The child spends its first part under the first parent's cap, then waits for `go`.
        await childWaitsForGo(childRunId);
        const second = await startRun("test-run-child", child, otherCap === null ? {} : { maxSpend: otherCap });
        expect(await childOf(second)).toMatchObject({ childRunId, reused: true });

        if (stop === "cancel") expect((await apiJson(`/v1/runs/${first}/cancel`, { method: "POST" })).status).toBe(202);
        const stopped = await waitForRun(first);
        expect(stopped.status).toBe(stop === "cancel" ? "cancelled" : "failed");
        // The first parent counts what the child spent while it allotted to it, as final: no more.
        const counted = await countedAsFinal(first);
        expect(counted).toEqual([{ child: childRunId, micros: FIRST * PER_LEAD_MICROS, ended: 1 }]);

        const shared = await goThenWait(childRunId, second);
        expect(shared.status).toBe("completed");
        expect(shared.result).toEqual({ child: { rows: FIRST + SECOND, failed: 0 } });
        expect((await waitForRun(childRunId)).usage.spend.total).toBe(((FIRST + SECOND) * PER_LEAD_MICROS) / 1e6);
        // Every call the child made was billed by the provider, once.
        const stats = await simStats();
        expect(stats.billed).toBe(2 * (FIRST + SECOND));
        expect(stats.duplicates).toBe(0);
        // The second parent counts the rest (uncapped, it counts nothing); the first still only what came before.
        expect(await childSpend(second)).toEqual(
          otherCap === null ? [] : [{ child: childRunId, micros: SECOND * PER_LEAD_MICROS, ended: 1 }],
        );
        expect(await childSpend(first)).toEqual(counted);
      });

  it("spends no more than the other parent's cap leaves it", async () => {
    await simReset();
    const tag = crypto.randomUUID().slice(0, 8);
    const child = { play: "test-enrich-in-two", input: { first: leads(`first-${tag}`, FIRST), second: leads(`second-${tag}`, SECOND) } };
    const [first, second, childRunId] = await shareThenCancelFirst(child, { first: 10, second: 10 });
    await countedAsFinal(first);
    const shared = await goThenWait(childRunId, second);
    expect(shared.status).toBe("failed");
    expect(shared.error.code).toBe("spend_cap_reached");
    const spent = (await waitForRun(childRunId)).usage.spend.total;
    // The second part (25 credits) stopped at the second parent's cap: what it spent of it is at most that cap.
    expect(spent - (FIRST * PER_LEAD_MICROS) / 1e6).toBeLessThanOrEqual(10);
    expect((await childSpend(second))[0]!.micros).toBeLessThanOrEqual(10_000_000);
    expect(await childSpend(first)).toEqual([{ child: childRunId, micros: FIRST * PER_LEAD_MICROS, ended: 1 }]);
  });

  it("moves its calls in flight to the other parent's cap, each parent counting its own share", async () => {
    await simReset();
    // One verify of the first part is held once the provider answered: in flight as the first parent is cancelled.
    await setFaults([{ point: "provider.after", tool: "sim_verify_email", play: "test-enrich-in-two", hold: true, times: 1 }]);
    const tag = crypto.randomUUID().slice(0, 8);
    const child = { play: "test-enrich-in-two", input: { first: leads(`first-${tag}`, FIRST), second: leads(`second-${tag}`, SECOND) } };
    const first = await startRun("test-run-child", child, { maxSpend: 10 });
    const { childRunId } = await childOf(first);
    await env.FAULTS!.getByName(FAULT_OBJECT_NAME).held(0);
    const second = await startRun("test-run-child", child, { maxSpend: 1_000 });
    expect(await childOf(second)).toMatchObject({ childRunId, reused: true });
    expect((await apiJson(`/v1/runs/${first}/cancel`, { method: "POST" })).status).toBe(202);
    expect((await waitForRun(first)).status).toBe("cancelled");
    const [counted] = await countedAsFinal(first);
    // The held call is billed after the first parent's cancel: it is not the first parent's.
    expect(counted!.micros).toBeLessThanOrEqual(FIRST * PER_LEAD_MICROS - 250_000);
    expect(await env.FAULTS!.getByName(FAULT_OBJECT_NAME).release(0)).toBe(1);
    await childWaitsForGo(childRunId);
    const shared = await goThenWait(childRunId, second);
    expect(shared.status).toBe("completed");
    const total = (FIRST + SECOND) * PER_LEAD_MICROS;
    expect((await waitForRun(childRunId)).usage.spend.total).toBe(total / 1e6);
    expect((await simStats()).billed).toBe(2 * (FIRST + SECOND));
    // Between them, the parents count every credit the child spent, once.
    expect(await childSpend(second)).toEqual([{ child: childRunId, micros: total - counted!.micros, ended: 1 }]);
  });
});

describe("a shared child's move its old parent is not told at first", () => {
  it("is told again: that parent counts what the child spent of its cap, not what it allotted", async () => {
    await simReset();
    await setFaults([{ point: "child.moved", times: 1 }]);
    const tag = crypto.randomUUID().slice(0, 8);
    const child = { play: "test-enrich-in-two", input: { first: leads(`first-${tag}`, FIRST), second: leads(`second-${tag}`, SECOND) } };
    const [first, second, childRunId] = await shareThenCancelFirst(child, { first: 10, second: 1_000 });
    const counted = await countedAsFinal(first);
    expect(counted).toEqual([{ child: childRunId, micros: FIRST * PER_LEAD_MICROS, ended: 1 }]);

    const shared = await goThenWait(childRunId, second);
    expect(shared.status).toBe("completed");
    expect((await waitForRun(childRunId)).usage.spend.total).toBe(((FIRST + SECOND) * PER_LEAD_MICROS) / 1e6);
    expect((await simStats()).billed).toBe(2 * (FIRST + SECOND));
    expect(await childSpend(second)).toEqual([{ child: childRunId, micros: SECOND * PER_LEAD_MICROS, ended: 1 }]);
    expect(await childSpend(first)).toEqual(counted);
  });

  it("lowers what the old parent, ended meanwhile, told its own capped parent: the child's allotment gives way to its spend", async () => {
    await simReset();
    // The move's first telling fails; the second waits until the old parent has ended and told its own parent.
    await setFaults([
      { point: "child.moved", times: 1 },
      { point: "child.moved", fromCall: 2, times: 1, hold: true },
    ]);
    const tag = crypto.randomUUID().slice(0, 8);
    const child = { play: "test-enrich-in-two", input: { first: leads(`first-${tag}`, FIRST), second: leads(`second-${tag}`, SECOND) } };
    const top = await startRun("test-run-child", { play: "test-run-child", input: child }, { maxSpend: 10 });
    const { childRunId: middle } = await childOf(top);
    const { childRunId } = await childOf(middle);
    await childWaitsForGo(childRunId);
    const other = await startRun("test-run-child", child, { maxSpend: 1_000 });
    expect(await childOf(other)).toMatchObject({ childRunId, reused: true });
    expect((await apiJson(`/v1/runs/${middle}/cancel`, { method: "POST" })).status).toBe(202);
    expect((await waitForRun(middle)).status).toBe("cancelled");
    // Not told of the move yet, the middle run counted the child's allotment, and told the top run so.
    const [told] = await until(
      () => childSpend(top),
      (rows) => rows[0]?.ended === 1,
      "the top run to count the middle run's end",
    );
    expect(told!.micros).toBeGreaterThan(FIRST * PER_LEAD_MICROS);
    await env.FAULTS!.getByName(FAULT_OBJECT_NAME).held(1);
    expect(await env.FAULTS!.getByName(FAULT_OBJECT_NAME).release(1)).toBe(1);
    // Told of the move, the middle run counts what the child spent of its allotment, and so does the top run.
    await until(
      () => childSpend(top),
      (rows) => rows[0]?.micros === FIRST * PER_LEAD_MICROS,
      "the top run to count what the child spent under it",
    );
    expect(await childSpend(middle)).toEqual([{ child: childRunId, micros: FIRST * PER_LEAD_MICROS, ended: 1 }]);
    expect(await childSpend(top)).toEqual([{ child: middle, micros: FIRST * PER_LEAD_MICROS, ended: 1 }]);

    expect((await goThenWait(childRunId, other)).status).toBe("completed");
    expect((await waitForRun(childRunId)).usage.spend.total).toBe(((FIRST + SECOND) * PER_LEAD_MICROS) / 1e6);
    expect((await simStats()).billed).toBe(2 * (FIRST + SECOND));
    expect(await childSpend(other)).toEqual([{ child: childRunId, micros: SECOND * PER_LEAD_MICROS, ended: 1 }]);
    expect(await childSpend(top)).toEqual([{ child: middle, micros: FIRST * PER_LEAD_MICROS, ended: 1 }]);
  });
});

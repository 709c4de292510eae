import { env } from "cloudflare:workers";
import { runInDurableObject } from "cloudflare:test";
import { describe, expect, it } from "vitest";
import type { CaptureSource } from "../../clients/executors";
import { policyFor } from "../../core/policy";
import { runStoreWithRun } from "../../stores/run-schema.fixture";
import { LiveRows } from "../map/live-rows";
import { CaptureSources, sourceOverBudget } from "./capture-sources";
import { ExecutorAttempts } from "./executor-attempts";

describe("An executor's capture sources", () => {
  it("are asked whole once: a later executor invocation confirms the coordinator's, unless it ended, and a sweep takes them as they are", async () => {
    const stub = env.RUN_COORDINATOR.getByName(`sources-${crypto.randomUUID()}`);
    await runInDurableObject(stub, async (_object, state) => {
      const store = runStoreWithRun(state, "run-sources");
      const attempts = new ExecutorAttempts({ store, live: new LiveRows(), emit: () => {}, now: Date.now, onLateWork: () => {} });
      // What the coordinator's invocation answers (the run's input would travel in it): built per ask.
      let built = 0;
      const answers = {
        source: (attemptSeq: number) => {
          built++;
          return attemptSeq === store.run()!.runAttempt ? ({ runAttempt: attemptSeq, inputJson: "{}" } as CaptureSource) : null;
        },
        grant: async () => ({ grantedMicros: 0, spentCredits: 0, cap: null }),
      };
      const close = attempts.open(answers);
      // The executor's link, answered by the coordinator's own logic (the RPC hop left out).
      const link = { captureSource: async (attemptSeq: number, known?: string) => attempts.source(attemptSeq, known) };
      const sources = new CaptureSources();
      const at = { attemptSeq: 0, map: "m", invocation: attempts.invocationId! };

      const first = await sources.forAttempt(link, at, new Set());
      expect(first).toMatchObject({ runAttempt: 0, invocation: at.invocation });
      const confirmed = new Set<string>();
      // Another invocation of the executor: confirmed, not sent again; its next attempt asks nothing.
      expect(await sources.forAttempt(link, at, confirmed)).toBe(first);
      expect(await sources.forAttempt(link, at, confirmed)).toBe(first);
      expect(built).toBe(1);
      expect(await sources.forSweep(link, at)).toBe(first);
      expect(built).toBe(1);

      // The coordinator restarted: its next invocation (a new epoch) answers. An attempt of the old one gets nothing.
      close();
      store.bumpAttempt();
      attempts.open(answers);
      expect(await sources.forAttempt(link, at, new Set())).toBeNull();
    });
  });
});

describe("Whether a capture source can be sent to an executor", () => {
  /** Production's: 32 MiB less room for what a source carries besides. */
  const BUDGET = policyFor({} as Env).sourceBudgetBytes;

  it("counts bytes as the platform serializes them: two a character once one is past Latin-1, the effects included", () => {
    const latin1 = "\u00e9".repeat(20 * 2 ** 20);
    expect(sourceOverBudget(latin1, [], BUDGET)).toBeNull();
    expect(sourceOverBudget(`${latin1}\u4e00`, [], BUDGET)).toMatch(/too large .*40\.0 MiB serialized/);
    expect(sourceOverBudget(latin1, [{ value: "x".repeat(11 * 2 ** 20) }], BUDGET)).toMatch(/too large/);
  });
});

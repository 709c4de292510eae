import { describe, expect, it } from "vitest";
import { CompletionLadder, LadderExhausted } from "./completion-ladder";

function ladder(deadlineAt = Number.POSITIVE_INFINITY, now = () => 0) {
  return new CompletionLadder({ delaysMs: [1_000, 3_000, 9_000], deadlineAt, now });
}

/** Runs `attempt` on the ladder with a recorded, instant sleep. */
async function climb(l: CompletionLadder, failures: number, signal = new AbortController().signal) {
  const slept: number[] = [];
  const seen: unknown[] = [];
  let calls = 0;
  const result = await l
    .run({
      attempt: async () => {
        if (++calls <= failures) throw new Error(`fail ${calls}`);
        return "done";
      },
      onFailure: (e) => seen.push(e),
      sleep: async (ms) => void slept.push(ms),
      signal,
    })
    .catch((e: unknown) => e);
  return { result, slept, calls, failures: seen.length };
}

describe("CompletionLadder", () => {
  it("retries after 1 s, 3 s and 9 s and succeeds on a later rung", async () => {
    expect(await climb(ladder(), 2)).toMatchObject({ result: "done", slept: [1_000, 3_000], calls: 3, failures: 2 });
  });

  it("gives up after the last rung with the attempts made", async () => {
    const { result, slept } = await climb(ladder(), 10);
    expect(result).toBeInstanceOf(LadderExhausted);
    expect((result as LadderExhausted).attempts).toBe(4);
    expect(slept).toEqual([1_000, 3_000, 9_000]);
  });

  it("schedules no retry past the run's deadline", async () => {
    const { result, slept } = await climb(ladder(2_000), 10);
    expect((result as LadderExhausted).attempts).toBe(2);
    expect(slept).toEqual([1_000]);
  });

  it("once one call spent the ladder, later failures give up at once", async () => {
    const shared = ladder();
    await climb(shared, 10);
    const { result, slept } = await climb(shared, 10);
    expect((result as LadderExhausted).attempts).toBe(1);
    expect(slept).toEqual([]);
    expect((await climb(shared, 0)).result).toBe("done");
  });

  it("stops climbing when the run is cancelled", async () => {
    const controller = new AbortController();
    controller.abort();
    const { result } = await climb(ladder(), 10, controller.signal);
    expect((result as LadderExhausted).attempts).toBe(1);
  });
});

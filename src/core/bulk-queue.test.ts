import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { BulkQueue } from "./bulk-queue";

/** A queue whose sends are recorded as (time, group, items). */
function recorded(options: {
  maxWaitMs: number;
  hold?: { busy(): boolean; maxMs: number };
  maxBatchSize?: { max: number; sizeOf(item: number): number };
}) {
  const sends: { at: number; group: string; items: number[] }[] = [];
  const queue = new BulkQueue<number, number>({
    ...options,
    maxBatch: 500,
    send: async (group, items) => {
      sends.push({ at: Date.now(), group, items });
      return items.map((i) => i * 10);
    },
  });
  return { queue, sends };
}

describe("BulkQueue", () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0, toFake: ["setTimeout", "clearTimeout", "Date"] });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it("sends each group once maxWaitMs is up, each item getting its own result", async () => {
    const { queue, sends } = recorded({ maxWaitMs: 200 });
    const results = [queue.push("a", 1), queue.push("b", 2), queue.push("a", 3)];
    await vi.advanceTimersByTimeAsync(199);
    expect(sends).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(sends).toEqual([
      { at: 200, group: "a", items: [1, 3] },
      { at: 200, group: "b", items: [2] },
    ]);
    expect(await Promise.all(results)).toEqual([10, 20, 30]);
  });

  it("sends a group at once when its items reach maxBatchSize, the one reaching it included", async () => {
    const { queue, sends } = recorded({ maxWaitMs: 200, maxBatchSize: { max: 10, sizeOf: (item) => item } });
    const results = [queue.push("a", 4), queue.push("a", 4), queue.push("b", 9), queue.push("a", 5), queue.push("a", 1)];
    await vi.advanceTimersByTimeAsync(0);
    // 4 + 4 + 5 reaches 10: sent then, without waiting for company; b's 9 and a's next 1 wait.
    expect(sends).toEqual([{ at: 0, group: "a", items: [4, 4, 5] }]);
    await vi.advanceTimersByTimeAsync(200);
    expect(sends.slice(1)).toEqual([
      { at: 200, group: "b", items: [9] },
      { at: 200, group: "a", items: [1] },
    ]);
    expect(await Promise.all(results)).toEqual([40, 40, 90, 50, 10]);
  });

  it("holds on while the sender is busy, up to hold.maxMs from the first item, collecting what comes", async () => {
    let busy = true;
    const { queue, sends } = recorded({ maxWaitMs: 200, hold: { busy: () => busy, maxMs: 1000 } });
    void queue.push("a", 1);
    await vi.advanceTimersByTimeAsync(600);
    void queue.push("a", 2);
    await vi.advanceTimersByTimeAsync(399);
    expect(sends).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(sends).toEqual([{ at: 1000, group: "a", items: [1, 2] }]);

    // The next item starts a wait of its own; not busy, it goes at maxWaitMs.
    busy = false;
    void queue.push("a", 3);
    await vi.advanceTimersByTimeAsync(200);
    expect(sends.at(-1)).toEqual({ at: 1200, group: "a", items: [3] });
  });

  it("a nudge sends what is only held, and nothing before maxWaitMs", async () => {
    const { queue, sends } = recorded({ maxWaitMs: 200, hold: { busy: () => true, maxMs: 1000 } });
    void queue.push("a", 1);
    queue.nudge();
    await vi.advanceTimersByTimeAsync(100);
    queue.nudge();
    expect(sends).toEqual([]);
    await vi.advanceTimersByTimeAsync(200);
    expect(sends).toEqual([]);
    queue.nudge();
    await vi.advanceTimersByTimeAsync(0);
    expect(sends).toEqual([{ at: 300, group: "a", items: [1] }]);
  });
});

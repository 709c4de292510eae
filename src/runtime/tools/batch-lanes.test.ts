import { describe, expect, it } from "vitest";
import { BatchLanes } from "./batch-lanes";

/** Batches of one tool through `lanes`, each held until the test ends it; counts how many were out at once. */
function batches(lanes: BatchLanes, limit: number) {
  const ends: (() => void)[] = [];
  let out = 0;
  let peak = 0;
  const start = () =>
    lanes.run("sim_verify_email", limit, () => {
      out++;
      peak = Math.max(peak, out);
      return new Promise<void>((resolve) => ends.push(() => (out--, resolve())));
    });
  return { start, ends, out: () => out, peak: () => peak };
}

/** Lets every queued continuation run. */
const settle = () => new Promise((resolve) => setTimeout(resolve, 0));

describe("BatchLanes", () => {
  it("runs at most `limit` batches of a tool at once; the next waits for one to end", async () => {
    const lane = batches(new BatchLanes(), 2);
    for (let i = 0; i < 5; i++) void lane.start();
    await settle();
    expect(lane.out()).toBe(2);
    lane.ends.shift()!();
    await settle();
    expect(lane.out()).toBe(2);
    while (lane.ends.length > 0) {
      lane.ends.shift()!();
      await settle();
    }
    expect(lane.out()).toBe(0);
    expect(lane.peak()).toBe(2);
  });

  it("hands an ending batch's place to the oldest waiting one: a batch formed meanwhile waits behind it", async () => {
    const lane = batches(new BatchLanes(), 1);
    const order: string[] = [];
    void lane.start().then(() => order.push("first"));
    void lane.start().then(() => order.push("waiting"));
    await settle();
    expect(lane.out()).toBe(1);
    // The first batch ends; before the waiting one resumes, another is formed (a gathering fills as its rows return).
    lane.ends.shift()!();
    queueMicrotask(() => void lane.start().then(() => order.push("formed meanwhile")));
    await settle();
    expect(lane.out()).toBe(1);
    expect(lane.peak()).toBe(1);
    lane.ends.shift()!();
    await settle();
    lane.ends.shift()!();
    await settle();
    expect(order).toEqual(["first", "waiting", "formed meanwhile"]);
  });

  it("keeps each tool's batches apart", async () => {
    const lanes = new BatchLanes();
    const started: string[] = [];
    const hold = (toolId: string) => lanes.run(toolId, 1, () => (started.push(toolId), new Promise<void>(() => {})));
    void hold("sim_verify_email");
    void hold("other_verifier");
    void hold("sim_verify_email");
    await settle();
    expect(started).toEqual(["sim_verify_email", "other_verifier"]);
  });
});

import { describe, expect, it } from "vitest";
import { FatalLatch } from "../../core/latch";
import { DispatchWindow } from "./dispatch-window";

const live = () => new AbortController().signal;

describe("DispatchWindow", () => {
  it("admits up to its size, then first come first served as calls are persisted", async () => {
    const window = new DispatchWindow({ size: 3, latch: new FatalLatch() });
    await window.enter(2, live());
    await window.enter(1, live());
    const order: string[] = [];
    const a = window.enter(2, live()).then(() => order.push("a"));
    const b = window.enter(1, live()).then(() => order.push("b"));
    window.leave(1);
    await Promise.resolve();
    expect(order).toEqual([]);
    window.leave(1);
    await a;
    // b fits only after a's place, not before it: entry is first come, first served.
    expect(order).toEqual(["a"]);
    expect(window.inFlight).toBe(3);
    window.leave(2);
    await b;
    expect(order).toEqual(["a", "b"]);
    expect(window.inFlight).toBe(2);
  });

  it("says when an entry would wait, and how many wait", async () => {
    const window = new DispatchWindow({ size: 3, latch: new FatalLatch() });
    expect(window.wouldWait(3)).toBe(false);
    await window.enter(2, live());
    expect(window.wouldWait(1)).toBe(false);
    expect(window.wouldWait(2)).toBe(true);
    const waiting = window.enter(2, live());
    expect(window.waiting).toBe(1);
    // Behind a waiting entrant, even a call that fits waits.
    expect(window.wouldWait(1)).toBe(true);
    window.leave(2);
    await waiting;
    expect(window.waiting).toBe(0);
  });

  it("lets a batch larger than the window in alone once it is empty", async () => {
    const window = new DispatchWindow({ size: 2, latch: new FatalLatch() });
    await window.enter(1, live());
    let entered = false;
    const big = window.enter(5, live()).then(() => (entered = true));
    await Promise.resolve();
    expect(entered).toBe(false);
    window.leave(1);
    await big;
    expect(window.inFlight).toBe(5);
  });

  it("once the latch trips, refuses every waiting and new call and counts them as prevented", async () => {
    const latch = new FatalLatch();
    const window = new DispatchWindow({ size: 1, latch });
    await window.enter(1, live());
    const waiting = [window.enter(1, live()), window.enter(3, live())];
    latch.trip(new Error("store broken"));
    for (const w of waiting) await expect(w).rejects.toThrow("store broken");
    await expect(window.enter(2, live())).rejects.toThrow("store broken");
    expect(latch.prevented).toBe(6);
  });

  it("drops a waiter whose signal aborts", async () => {
    const window = new DispatchWindow({ size: 1, latch: new FatalLatch() });
    await window.enter(1, live());
    const controller = new AbortController();
    const waiting = window.enter(1, controller.signal);
    controller.abort(new Error("cancelled"));
    await expect(waiting).rejects.toThrow("cancelled");
    window.leave(1);
    expect(window.inFlight).toBe(0);
  });
});

/**
 * The client's live feed against a server that misbehaves (a fake WebSocket:
 * what a real server does is tested in client.test.ts), on a fake clock.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { liveEvents, type LiveFeedSource } from "../src/client/live-events.ts";

afterEach(() => {
  vi.useRealTimers();
});

/** A socket that sends the snapshot of a running run, then drops, as a coordinator in a crash loop would. */
function droppingSockets(): { source: LiveFeedSource; opened: () => number } {
  let opened = 0;
  class DroppingSocket extends EventTarget {
    constructor(_url: string) {
      super();
      opened++;
      setTimeout(() => {
        const snapshot = { type: "snapshot", seq: 3, run: { status: "running" } };
        this.dispatchEvent(new MessageEvent("message", { data: JSON.stringify(snapshot) }));
        this.dispatchEvent(Object.assign(new Event("close"), { code: 1011, reason: "send failed" }));
      }, 0);
    }
    close(): void {}
  }
  const source: LiveFeedSource = {
    url: (after) => `ws://127.0.0.1/live?after=${after}`,
    WebSocket: DroppingSocket as unknown as typeof WebSocket,
    verify: async () => undefined,
    eventsAfter: async () => [],
  };
  return { source, opened: () => opened };
}

describe("liveEvents", () => {
  it("backs off from a server that drops every socket after its snapshot, instead of reconnecting four times a second", async () => {
    vi.useFakeTimers();
    const { source, opened } = droppingSockets();
    const stop = new AbortController();
    const snapshots: unknown[] = [];
    const watching = (async () => {
      for await (const message of liveEvents(source, { after: 3, signal: stop.signal })) snapshots.push(message);
    })();
    // Twenty seconds: at a fixed 250 ms that is 80 connections; waits of 0.25, 0.5, 1, 2, 4, then 5 s are about eight.
    for (let ms = 0; ms < 20_000; ms += 50) await vi.advanceTimersByTimeAsync(50);
    expect(opened()).toBeGreaterThan(3);
    expect(opened()).toBeLessThan(12);
    expect(snapshots.length).toBe(opened());
    stop.abort();
    await vi.advanceTimersByTimeAsync(10_000);
    await watching;
  });
});

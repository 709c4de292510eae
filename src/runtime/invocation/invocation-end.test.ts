import { describe, expect, it } from "vitest";
import { endAfterReturn, endAfterThrow, type Stops } from "./invocation-end";
import { WaitSignal } from "./waits";
import { InfraError, YieldSignal } from "./yield";

const none: Stops = { cancelled: false, deadline: null, suspendedUntil: null, parkedUntil: null, retryAt: () => 99 };
const boom = new Error("boom");
const limit = { code: "deadline_exceeded", message: "the run hit its runtime limit" };

describe("endAfterThrow", () => {
  it("fails at the runtime limit, unless a cancel came too: then the run is cancelled", () => {
    expect(endAfterThrow(boom, { ...none, deadline: limit })).toEqual({ kind: "failed", error: limit });
    expect(endAfterThrow(new YieldSignal(5, "budget"), { ...none, deadline: limit, parkedUntil: 9 })).toEqual({
      kind: "failed",
      error: limit,
    });
    expect(endAfterThrow(boom, { ...none, deadline: limit, cancelled: true })).toEqual({ kind: "cancelled" });
  });

  it("parks on the wait the play waits on, even when the play caught the throw and threw something else", () => {
    expect(endAfterThrow(boom, { ...none, parkedUntil: 9 })).toEqual({ kind: "parked", resumeAt: 9, chunksStopped: false });
    expect(endAfterThrow(boom, { ...none, parkedUntil: 9, suspendedUntil: 4 })).toEqual({
      kind: "parked",
      resumeAt: 9,
      chunksStopped: true,
    });
  });

  it("yields to the next alarm (parks only for a wait or a suspension), and leaves a cancel to it", () => {
    expect(endAfterThrow(new YieldSignal(7, "budget"), none)).toEqual({ kind: "yielded", resumeAt: 7 });
    expect(endAfterThrow(new WaitSignal(7, "wait"), none)).toEqual({ kind: "parked", resumeAt: 7, chunksStopped: false });
    expect(endAfterThrow(new YieldSignal(7, "budget"), { ...none, cancelled: true, parkedUntil: 9 })).toEqual({
      kind: "yielded",
      resumeAt: 7,
    });
  });

  it("parks a run whose row's child runs long, unless it was cancelled", () => {
    expect(endAfterThrow(boom, { ...none, suspendedUntil: 4 })).toEqual({ kind: "parked", resumeAt: 4, chunksStopped: true });
    expect(endAfterThrow(boom, { ...none, suspendedUntil: 4, cancelled: true })).toEqual({ kind: "cancelled" });
  });

  it("cancels before it reads the error; retries infrastructure failures while it may; fails on anything else", () => {
    expect(endAfterThrow(boom, { ...none, cancelled: true, parkedUntil: 9 })).toEqual({ kind: "cancelled" });
    const infra = new InfraError("shard down", null);
    expect(endAfterThrow(infra, none)).toEqual({ kind: "retry", at: 99, error: infra });
    expect(endAfterThrow(infra, { ...none, retryAt: () => null })).toEqual({
      kind: "failed",
      error: { code: "infrastructure_unavailable", message: "shard down" },
    });
    expect(endAfterThrow(boom, none)).toEqual({ kind: "failed", error: { code: "play_failed", message: "boom" } });
  });
});

describe("endAfterReturn", () => {
  it("completes with the result (null for none), or parks a play that caught a wait's signal", () => {
    expect(endAfterReturn(undefined, null)).toEqual({ kind: "completed", result: null });
    expect(endAfterReturn({ a: 1 }, null)).toEqual({ kind: "completed", result: { a: 1 } });
    expect(endAfterReturn({ a: 1 }, 5)).toEqual({ kind: "parked", resumeAt: 5, chunksStopped: false });
  });
});

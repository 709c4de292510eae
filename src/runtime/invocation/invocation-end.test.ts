import { describe, expect, it } from "vitest";
import { endAfterThrow, type Stops } from "./invocation-end";
import { WaitSignal } from "./waits";
import { InfraError, YieldSignal } from "./yield";

const none: Stops = { cancelled: false, deadline: false, suspendedUntil: null, parkedUntil: null };
const boom = new Error("boom");

describe("endAfterThrow", () => {
  it("fails at the runtime limit, unless a cancel came too: then the run is cancelled", () => {
    expect(endAfterThrow(boom, { ...none, deadline: true })).toEqual({ kind: "deadline" });
    expect(endAfterThrow(new YieldSignal(5, "budget"), { ...none, deadline: true, parkedUntil: 9 })).toEqual({ kind: "deadline" });
    expect(endAfterThrow(boom, { ...none, deadline: true, cancelled: true })).toEqual({ kind: "cancelled" });
  });

  it("parks on the wait the play waits on, even when the play caught the throw and threw something else", () => {
    expect(endAfterThrow(boom, { ...none, parkedUntil: 9 })).toEqual({ kind: "parked", resumeAt: 9, waiting: true, suspended: false });
    expect(endAfterThrow(boom, { ...none, parkedUntil: 9, suspendedUntil: 4 })).toEqual({
      kind: "parked",
      resumeAt: 9,
      waiting: true,
      suspended: true,
    });
  });

  it("yields to the next alarm (waiting only for a wait or a suspension), and leaves a cancel to it", () => {
    expect(endAfterThrow(new YieldSignal(7, "budget"), none)).toEqual({ kind: "parked", resumeAt: 7, waiting: false, suspended: false });
    expect(endAfterThrow(new WaitSignal(7, "wait"), none)).toEqual({ kind: "parked", resumeAt: 7, waiting: true, suspended: false });
    expect(endAfterThrow(new YieldSignal(7, "budget"), { ...none, cancelled: true, parkedUntil: 9 })).toMatchObject({
      kind: "parked",
      resumeAt: 7,
    });
  });

  it("parks a run whose row's child runs long, unless it was cancelled", () => {
    expect(endAfterThrow(boom, { ...none, suspendedUntil: 4 })).toEqual({ kind: "parked", resumeAt: 4, waiting: true, suspended: true });
    expect(endAfterThrow(boom, { ...none, suspendedUntil: 4, cancelled: true })).toEqual({ kind: "cancelled" });
  });

  it("cancels before it reads the error; retries infrastructure failures; fails on anything else", () => {
    expect(endAfterThrow(boom, { ...none, cancelled: true, parkedUntil: 9 })).toEqual({ kind: "cancelled" });
    const infra = new InfraError("shard down", null);
    expect(endAfterThrow(infra, none)).toEqual({ kind: "infra", error: infra });
    expect(endAfterThrow(boom, none)).toEqual({ kind: "failed", error: boom });
  });
});

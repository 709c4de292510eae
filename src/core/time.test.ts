import { afterEach, describe, expect, it, vi } from "vitest";
import { timeoutSignal } from "./time";

describe("timeoutSignal", () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it("aborts with a TimeoutError after its time, and not once cleared", () => {
    vi.useFakeTimers();
    const fired = timeoutSignal(1_000);
    const cleared = timeoutSignal(1_000);
    cleared.clear();
    // Nothing is left waiting behind a cleared one.
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(999);
    expect(fired.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(fired.signal.reason).toMatchObject({ name: "TimeoutError" });
    expect(cleared.signal.aborted).toBe(false);
  });

  it("aborts with the reason it is given, made when it fires", () => {
    vi.useFakeTimers();
    let made = 0;
    const timeout = timeoutSignal(500, () => {
      made++;
      return new Error("provider_timeout");
    });
    expect(made).toBe(0);
    vi.advanceTimersByTime(500);
    expect(made).toBe(1);
    expect(timeout.signal.reason).toMatchObject({ message: "provider_timeout" });
  });

  it("does not count the time it is paused, and keeps the time left when resumed", () => {
    vi.useFakeTimers();
    const timeout = timeoutSignal(1_000);
    vi.advanceTimersByTime(400);
    timeout.pause();
    vi.advanceTimersByTime(5_000);
    expect(timeout.signal.aborted).toBe(false);
    timeout.resume();
    vi.advanceTimersByTime(599);
    expect(timeout.signal.aborted).toBe(false);
    vi.advanceTimersByTime(1);
    expect(timeout.signal.reason).toMatchObject({ name: "TimeoutError" });

    // Cleared, it stays cleared: a late resume arms nothing.
    const done = timeoutSignal(1_000);
    done.pause();
    done.clear();
    done.resume();
    expect(vi.getTimerCount()).toBe(0);
  });

  it("does not fire at once for a time past a timer's range (a deadline weeks away)", () => {
    vi.useFakeTimers();
    const far = timeoutSignal(40 * 24 * 3_600_000);
    vi.advanceTimersByTime(60_000);
    expect(far.signal.aborted).toBe(false);
  });
});

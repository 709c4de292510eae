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

  it("does not fire at once for a time past a timer's range (a deadline weeks away)", () => {
    vi.useFakeTimers();
    const far = timeoutSignal(40 * 24 * 3_600_000);
    vi.advanceTimersByTime(60_000);
    expect(far.signal.aborted).toBe(false);
  });
});

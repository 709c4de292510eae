/** A delay inside one invocation (pacing only: durable deadlines live in alarms). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** The longest delay a timer takes (a longer one fires at once). */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * A signal that aborts after `ms` with `reason()` (by default a
 * `TimeoutError`), and `clear` to drop its timer once the work it bounds is
 * done. `AbortSignal.timeout` has no such thing: its pending timer keeps it
 * alive until it fires, and with it every signal made from it by
 * `AbortSignal.any` (an attempt's run deadline is hours away, and each request
 * of the attempt derives one). `pause` stops its clock and `resume` starts it
 * again with the time that was left: a request's timeout does not count its
 * wait for an outbound slot.
 */
export function timeoutSignal(
  ms: number,
  reason: () => unknown = () => new DOMException(`timed out after ${ms} ms`, "TimeoutError"),
): { signal: AbortSignal; clear(): void; pause(): void; resume(): void } {
  const controller = new AbortController();
  let left = ms;
  let since = Date.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let state: "running" | "paused" | "cleared" = "running";
  // Past a timer's range nothing here waits that long: no timer at all.
  const arm = () => {
    since = Date.now();
    timer = left <= MAX_TIMER_MS ? setTimeout(() => controller.abort(reason()), Math.max(0, left)) : undefined;
  };
  arm();
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      state = "cleared";
    },
    pause: () => {
      if (state !== "running") return;
      clearTimeout(timer);
      left -= Date.now() - since;
      state = "paused";
    },
    resume: () => {
      if (state !== "paused") return;
      state = "running";
      if (controller.signal.aborted) return;
      arm();
    },
  };
}

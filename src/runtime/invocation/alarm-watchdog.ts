/**
 * The alarm a run's coordinator leaves itself. An invocation killed by the
 * platform (its CPU, memory or wall clock, a deploy's reset) runs no `finally`,
 * so it re-arms nothing, and the platform retries a failed alarm six times at
 * most: a run not ended would then sit until read. Each invocation of a run not
 * ended sets a watchdog alarm as it starts, which its end replaces (with the
 * next alarm, or none once the run has nothing left to do); killed, it leaves
 * the watchdog. An alarm set while the alarm handler runs takes the place of
 * the platform's retry, so the watchdog is the retry too: from 2 s, doubling,
 * to a minute, counted over the invocations in a row that did not end normally.
 * A run not ended is tried for as long as that lasts (its runtime limit ends
 * it); an ended run's failing alarm is left to the platform's retries, then
 * armed again at its last a bounded number of times ({@link MAX_ENDED_ALARM_FALLBACKS}).
 */
import { lateAlarmRetryAt } from "../../core/platform-limits";
import type { JournalStore } from "../../stores/journal-store";

/** How many times an ended run's failing alarm is armed again at its last retry (lateAlarmRetryAt: an hour of tries). */
export const MAX_ENDED_ALARM_FALLBACKS = 60;
const FIRST_RETRY_MS = 2_000;
const MAX_RETRY_MS = 60_000;
/** The journal counter of a not-ended run's invocations in a row that did not end normally (killed or failed). */
const TRIES = "alarm_tries";

/** At an invocation's start, for a run not ended: counts it among the tries, and answers when its watchdog fires. */
export function watchdogAt(journal: JournalStore, now: number): number {
  const tries = journal.bump(TRIES);
  return now + Math.min(MAX_RETRY_MS, FIRST_RETRY_MS * 2 ** (tries - 1));
}

/** How an invocation ended, as its alarm handler's `finally` sees it. */
export interface InvocationOutcome {
  /** It threw. */
  failed: boolean;
  /** A wake (a signal, a child's end) came while it ran. */
  wake: boolean;
  /** The run has ended (or there is none). */
  terminal: boolean;
  /** When the invocation asked to run next (null when it failed, or has nothing left to do). */
  next: number | null;
  /** The watchdog it set as it started (null: the run had ended). */
  watchdog: number | null;
  /** Which retry of a failed alarm the platform runs (0: not a retry). */
  retryCount: number;
}

/**
 * The alarm an invocation leaves as it ends: a time to set, `clear` (its watchdog, if nothing else has replaced it
 * since), or `keep` (whatever is set: its watchdog retries it, or the platform does).
 */
export function alarmAfter(journal: JournalStore, o: InvocationOutcome, now: number): number | "clear" | "keep" {
  if (!o.failed && o.watchdog !== null) journal.resetCounter(TRIES);
  if (o.wake && !o.terminal) return now;
  if (!o.failed) return o.next ?? (o.watchdog === null ? "keep" : "clear");
  // The platform's last retries: a minute later (for an ended run, a bounded number of times).
  const late = lateAlarmRetryAt(o.retryCount, now);
  if (late !== null && (!o.terminal || journal.bump("ended_alarm_fallbacks") <= MAX_ENDED_ALARM_FALLBACKS)) return late;
  return "keep";
}

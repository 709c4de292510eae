/** A run's statuses, written once: the stores, the runtime and the actors read them from here. */
export const RUN_STATUSES = ["queued", "running", "waiting", "completed", "failed", "cancelled"] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

/** The statuses a run ends in; it never leaves them (a rerun is a new run). */
export const TERMINAL_STATUSES = ["completed", "failed", "cancelled"] as const;
export type TerminalStatus = (typeof TERMINAL_STATUSES)[number];

const TERMINAL: ReadonlySet<string> = new Set(TERMINAL_STATUSES);

/** Whether a run in `status` has ended. */
export function isTerminal(status: string): status is TerminalStatus {
  return TERMINAL.has(status);
}

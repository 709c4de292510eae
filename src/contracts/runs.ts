/**
 * The RunCoordinator's RPC shapes that other objects send: a run's start (from
 * the Worker or a parent run) and a child's end (from the child's coordinator),
 * checked where they arrive, in the coordinator; and what some of its RPCs answer.
 */
import { z } from "zod";
import { TestPolicyOverrides } from "../core/policy";
import { type RunStatus, TERMINAL_STATUSES } from "../core/statuses";
import { StartRun as RunRequest } from "../api/contract";

export const StartRunMessage = z.object({
  // What a caller may ask for (play, input, flags, limits), as the HTTP contract checks it...
  ...RunRequest.shape,
  // ...and what the Worker or a parent run adds.
  runId: z.string().min(1).max(100),
  org: z.string().min(1).max(100),
  parentRunId: z.string().max(100).nullable(),
  /** How deeply the run nests under parent plays (0, or absent, for a run submitted over HTTP). */
  depth: z.number().int().min(0).max(64).optional(),
  /** Test runner only (ignored elsewhere): policy overrides for this run. */
  testPolicy: TestPolicyOverrides.optional(),
  /** A child of a capped run: it spends only what its parent allots it of that cap (runtime/tools/child-spend.ts). */
  spendFromParent: z.boolean().optional(),
});
export type StartRunMessage = z.infer<typeof StartRunMessage>;

const RUN_ID = /^run_[0-9a-f]{32}$/;

/** The `childFinished` message: a child run tells its parent how it ended. */
export const ChildFinished = z.object({
  childRunId: z.string().regex(RUN_ID),
  status: z.enum(TERMINAL_STATUSES),
  result: z.unknown(),
  error: z
    .object({ code: z.string().max(200), message: z.string().max(100_000) })
    .loose()
    .nullable(),
  /** What the child spent, its own children included, in credits: it replaces what its parent allotted it. */
  spentCredits: z.number().nonnegative().optional(),
  /** `spentCredits` counts allotments the child's own children held (they may spend less): a lower figure may follow. */
  spentProvisional: z.boolean().optional(),
});
export type ChildFinished = z.infer<typeof ChildFinished>;

/** A parent's answer to its child's ask for spend (runtime/tools/child-spend.ts): what the child may spend in all. */
export interface ChildAllotment {
  micros: number;
  /** Refused while the child's siblings hold allotments they may not spend: those come back as they end. */
  wait: boolean;
  /** The parent allots no more: it is ending, or has ended (a child another parent still waits on spends from that one's cap). */
  ended?: boolean;
  /** The parent spends under no cap: nor does the child, from now on. */
  uncapped?: boolean;
}

/** Why a run refuses a signal: it ended, is being cancelled, carries out an end it decided, or is past its runtime limit. */
export type SignalRefusal = "ended" | "cancelling" | "ending" | "past_limit";

/** What `signal` did: a missing (or other org's) run, a run that already ended, or accepted. */
export type SignalResult =
  | { outcome: "not_found" }
  | { outcome: "finished"; status: RunStatus | "cancelling"; why: SignalRefusal }
  /** The run holds MAX_OPEN_SIGNALS (RunCoordinator) signals no wait has taken: this one is refused. */
  | { outcome: "full"; open: number }
  /** The dedupe key was used for another signal (another key or other data): `eventKey` is that signal's. */
  | { outcome: "key_reused"; eventKey: string }
  | { outcome: "accepted"; status: RunStatus | "cancelling"; consumed: boolean; duplicate: boolean };

/** What a rerun needs of the run it repeats. */
export interface RunSource {
  play: string;
  /** The run's validated input, as JSON text (RPC types cannot carry a recursive JSON type). */
  inputJson: string;
  force: boolean;
  forceToolRefresh: boolean;
  /** The run's runtime limit (`timeoutSeconds`, or the default it ran under): a rerun keeps it unless told otherwise. */
  timeoutSeconds: number;
  /** The run's status now (`cancelling` while a cancelled or failed run still cancels its children): a run that has not ended cannot be rerun yet. */
  status: RunStatus | "cancelling";
}

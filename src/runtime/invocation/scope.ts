/** What every part of one invocation of a run shares: the {@link Invocation} carries it (invocation.ts). */
import type { FaultProbe } from "../../clients/faults";
import type { SubrequestMeter } from "../../core/meter";
import type { RuntimePolicy } from "../../core/policy";
import type { Emit, Log } from "../../contracts/events";
import type { RunRecord } from "../../stores/run-store";

export interface InvocationScope {
  readonly env: Env;
  /** The run as the invocation began; what changes during it (status, attempt) is read from the store. */
  readonly run: RunRecord;
  readonly policy: RuntimePolicy;
  /** Subrequests this invocation made (stub calls, provider calls): it yields before the platform's cap. */
  readonly meter: SubrequestMeter;
  /** Aborted when the invocation must stop: a cancel, the run's runtime limit, or a row's child making it yield. */
  readonly signal: AbortSignal;
  /** The test-only fault seam (inert outside the test runner). */
  readonly faults: FaultProbe;
  /** Appends a ledger event (and tells live watchers). */
  readonly emit: Emit;
  /** Appends a line to the run's log. */
  readonly log: Log;
  now(): number;
}

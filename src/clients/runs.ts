/**
 * Callers' side of other runs' coordinators: a parent starting, asking,
 * cancelling and being told about its children, and a run asking whether the
 * owner of a receipt lease still runs. Every call is counted by the meter.
 */
import type { RunView } from "../api/responses";
import type { ChildAllotment, ChildFinished, StartRunMessage } from "../contracts/runs";
import type { SubrequestMeter } from "../core/meter";

/**
 * The coordinator's RPC surface as other objects use it. The stub's own type
 * (RPC-wrapped views) is too deep for the checker to unfold; these are the
 * contract's shapes it carries.
 */
interface RunCoordinatorRpc {
  start(request: StartRunMessage): Promise<RunView>;
  getRun(org: string): Promise<RunView | null>;
  cancel(org: string, parentRunId?: string): Promise<RunView | null>;
  childFinished(message: ChildFinished): Promise<void>;
  allotChildSpend(org: string, childRunId: string, wantedMicros: number, needMicros: number): Promise<ChildAllotment>;
  childSpendMoved(org: string, childRunId: string, spentMicros: number, provisional?: boolean): Promise<void>;
}

export class RunClient {
  #ns: Env["RUN_COORDINATOR"];
  #org: string;
  #meter: SubrequestMeter | null;

  /** Calls on behalf of `org`: another org's run answers as a missing one. */
  constructor(options: { env: Pick<Env, "RUN_COORDINATOR">; org: string; meter?: SubrequestMeter }) {
    this.#ns = options.env.RUN_COORDINATOR;
    this.#org = options.org;
    this.#meter = options.meter ?? null;
  }

  /** Starts a run (idempotent for its run id); answers its view. */
  start(runId: string, request: StartRunMessage): Promise<RunView> {
    return this.#stub(runId, "start").start(request);
  }

  /** The run as its API shows it, or null for another org's or a missing run. */
  getRun(runId: string): Promise<RunView | null> {
    return this.#stub(runId, "getRun").getRun(this.#org);
  }

  /**
   * Cancels the run (a no-op for one that ended); null for another org's or a missing run. `parentRunId`: the
   * parent that started it asks, and it goes on while another parent waits on it (RunCoordinator.cancel).
   */
  cancel(runId: string, parentRunId?: string): Promise<RunView | null> {
    return this.#stub(runId, "cancel").cancel(this.#org, parentRunId);
  }

  /** Tells a parent run that its child ended. */
  childFinished(parentRunId: string, message: ChildFinished): Promise<void> {
    return this.#stub(parentRunId, "childFinished").childFinished(message);
  }

  /** A child asks its parent for more of the parent's cap (child-spend.ts): what the child may spend in all, in micro-credits. */
  allotChildSpend(parentRunId: string, childRunId: string, wantedMicros: number, needMicros: number): Promise<ChildAllotment> {
    return this.#stub(parentRunId, "allotChildSpend").allotChildSpend(this.#org, childRunId, wantedMicros, needMicros);
  }

  /**
   * Tells a parent what its child spent of the parent's cap, `spentMicros`, which replaces its allotment: the child
   * spends from another parent's cap now, or ended once this parent gave it up (child-spend.ts, run-links.ts).
   * `provisional`: the figure counts allotments the child's own children held (a lower one may follow).
   */
  childSpendMoved(parentRunId: string, childRunId: string, spentMicros: number, provisional?: boolean): Promise<void> {
    return this.#stub(parentRunId, "childSpendMoved").childSpendMoved(this.#org, childRunId, spentMicros, provisional);
  }

  /** The coordinator of `runId`, counted as one call of `run.<method>` when the client has a meter. */
  #stub(runId: string, method: string): RunCoordinatorRpc {
    if (this.#meter) this.#meter.countRpc(`run.${method}`);
    return this.#ns.getByName(runId) as unknown as RunCoordinatorRpc;
  }
}

/**
 * Fault injection for tests: a plan of named operations to fail, stored by the
 * test-only `FaultInjector` object and consulted by the engine at those
 * operations. It exists only when the Worker runs with `TROUPE_TEST_MODE=on`
 * and the `FAULTS` binding is configured (never in production config);
 * otherwise every check is a no-op that makes no call.
 *
 * A rule fails the matching calls of one operation from the `fromCall`-th on
 * (counting from 1, per rule), for `times` calls or for ever. A rule with
 * `crash: true` instead kills the whole invocation at that point (the
 * coordinator aborts itself, as a crash or eviction would), leaving whatever
 * it had in flight for the next invocation to redispatch.
 *
 * `provider.lookup` is a recovery lookup (a tool's `recover`), before it is sent. A provider point's rule with the
 * code `provider_timeout` throws what the engine's provider timeout throws: at `provider.after`, a request the
 * provider answered (and billed) whose answer never reached the run.
 * The `*.claimed`, `sheet.persisted` points come right after the operation
 * succeeded (crash points between the phases of a chunk; `executor.reported`:
 * a report the coordinator applied whose answer is lost; `executor.end` and
 * `executor.ended`, the same two of a report carrying an attempt's end; `executor.held`, an executor's attempt
 * wound down and held to go on in its next invocation, before that invocation; `directory.sync`: a run's
 * status told to its org's directory, from a new run's first listing on); `run.alarm` is the coordinator's alarm after it
 * drove the run, before it re-armed itself; `run.finish`, the run's end decided and recorded,
 * before it is carried out; `child.finished`, a run telling a parent it ended; `child.moved`, a shared
 * child telling the parent it moved its spend from what it spent of that parent's cap. `upload.commit` is an upload's
 * file checked (a multipart upload's, by its `complete`), before the records that make it ready are written.
 *
 * A rule with `hold: true` neither fails nor crashes: the matching call waits
 * until the test releases it (`FaultInjector.release`), which opens a window
 * between two steps on purpose (a signal delivered while an alarm is held
 * between driving the run and re-arming, say). `play` narrows any rule to the
 * invocations of one play's runs.
 *
 * @example
 * // Every receipt completion from the third on fails:
 * { rules: [{ point: "receipt.complete", fromCall: 3 }] }
 * // The invocation dies after its second provider call returned, before its receipt completes:
 * { rules: [{ point: "provider.after", fromCall: 2, times: 1, crash: true }] }
 */
import { z } from "zod";
import { PROVIDER_TIMEOUT, ProviderTimeout, ToolCallError } from "../play/tool-error";
import { TroupeError } from "../core/errors";

/** The operations a fault can be injected into. */
export const FAULT_POINTS = [
  "receipt.claim",
  "receipt.complete",
  "receipt.fail",
  "sheet.persist",
  "provider.before",
  "provider.after",
  "provider.lookup",
  "upload.read",
  "upload.commit",
  "sheet.claimed",
  "receipt.claimed",
  "receipt.completed",
  "sheet.persisted",
  "run.alarm",
  "child.cancel",
  "executor.report",
  "executor.reported",
  "executor.end",
  "executor.ended",
  "executor.held",
  "directory.sync",
  "run.finish",
  "run.report",
  "export.part",
  "child.finished",
  "child.moved",
] as const;
/** One of {@link FAULT_POINTS}. */
export const FaultPoint = z.enum(FAULT_POINTS);
export type FaultPoint = z.infer<typeof FaultPoint>;

/** One rule of a fault plan. */
export const FaultRule = z
  .object({
    point: FaultPoint,
    /** Only calls of this tool count (provider points only). */
    tool: z.string().min(1).max(64).optional(),
    /** Only calls made by runs of this play count. */
    play: z.string().min(1).max(64).optional(),
    /** The first matching call that fails, counting from 1. */
    fromCall: z.number().int().min(1).default(1),
    /** How many matching calls fail from `fromCall` on; absent means every one. */
    times: z.number().int().min(1).optional(),
    /** What the failed call throws. Provider points throw a `ToolCallError` with this code (`provider_timeout`: the engine's timeout). */
    error: z
      .object({
        code: z
          .string()
          .regex(/^[a-z_]{1,64}$/)
          .default("injected_fault"),
        message: z.string().max(500).optional(),
        retryable: z.boolean().default(false),
      })
      .prefault({}),
    /** When the rule fires, this provider's test credential becomes `value` (auth-scope tests). */
    rotateCredential: z.object({ provider: z.string().min(1).max(64), value: z.string().min(1).max(200) }).optional(),
    /** Kill the invocation instead of failing the call (see the module comment). */
    crash: z.boolean().optional(),
    /** Hold the call until the test releases the rule, instead of failing it (see the module comment). */
    hold: z.boolean().optional(),
  })
  .strict();
export type FaultRule = z.infer<typeof FaultRule>;

/** The fault plan: at most 20 rules, each counted separately. */
export const FaultPlan = z.object({ rules: z.array(FaultRule).max(20) }).strict();
export type FaultPlan = z.infer<typeof FaultPlan>;

/** The verdict on one call of an operation. */
export type FaultDecision =
  | { fail: false }
  | {
      fail: true;
      rule: number;
      call: number;
      error: { code: string; message: string; retryable: boolean };
      rotateCredential?: { provider: string; value: string };
      crash?: true;
      hold?: true;
    };

/** Where a checked call comes from: the tool (provider points) and the play of the run making it. */
export interface FaultScope {
  tool: string | null;
  play: string | null;
}

/**
 * Counts one call of `point` (of `tool`) against every rule and decides it.
 * `counts[i]` is how many calls rule `i` has matched so far; it is updated in place.
 */
export function decideFault(plan: FaultPlan, counts: number[], point: FaultPoint, scope: FaultScope): FaultDecision {
  let decision: FaultDecision = { fail: false };
  plan.rules.forEach((rule, i) => {
    if (
      rule.point !== point ||
      (rule.tool !== undefined && rule.tool !== scope.tool) ||
      (rule.play !== undefined && rule.play !== scope.play)
    )
      return;
    const call = (counts[i] ?? 0) + 1;
    counts[i] = call;
    const inRange = call >= rule.fromCall && (rule.times === undefined || call < rule.fromCall + rule.times);
    if (!inRange || decision.fail) return;
    const message = rule.error.message ?? `injected fault: ${point} call #${call} fails (test fault plan rule ${i})`;
    decision = {
      fail: true,
      rule: i,
      call,
      error: { code: rule.error.code, message, retryable: rule.error.retryable },
      ...(rule.rotateCredential ? { rotateCredential: rule.rotateCredential } : {}),
      ...(rule.crash ? { crash: true } : {}),
      ...(rule.hold ? { hold: true } : {}),
    };
  });
  return decision;
}

/** Checks named operations against the fault plan; throws the injected failure. */
export interface FaultProbe {
  check(point: FaultPoint, tool?: string): Promise<void>;
  /** The test credential of `provider`, or null when none is set (or faults are off). */
  credential(provider: string): Promise<string | null>;
}

/** The probe outside test mode: checks nothing, calls nothing. */
export const NO_FAULTS: FaultProbe = {
  check: async () => {},
  credential: async () => null,
};

/** The one FaultInjector instance's name. */
/** The fault plan's actor, as the FAULTS binding names it (bound only where tests run). */
type FaultStub = DurableObjectStub<NonNullable<Env["FAULTS"]> extends DurableObjectNamespace<infer T> ? T : never>;

export const FAULT_OBJECT_NAME = "faults";

/**
 * Kills the calling invocation for a `crash` rule (the coordinator passes
 * `ctx.abort`). It must not return; without one, a crash rule throws
 * a `TroupeError` coded `injected_crash`, like a failure.
 */
export type CrashHandler = (reason: string) => never;

/** The probe for `env`: live only under the test runner with the FAULTS binding. */
export function faultProbeFor(
  env: Pick<Env, "FAULTS" | "TROUPE_TEST_MODE">,
  options: { crash?: CrashHandler; play?: string } = {},
): FaultProbe {
  // FAULTS is bound only outside production (wrangler.toml), so its type is optional.
  if (env.TROUPE_TEST_MODE !== "on" || !env.FAULTS) return NO_FAULTS;
  return new RemoteFaultProbe(env.FAULTS.getByName(FAULT_OBJECT_NAME), options.crash, options.play ?? null);
}

/**
 * Asks the FaultInjector once per probe whether any rule is set; only then
 * does each check cost a call. Build one probe per invocation.
 */
class RemoteFaultProbe implements FaultProbe {
  #stub: FaultStub;
  #armed: Promise<boolean> | null = null;
  #crash: CrashHandler | undefined;
  #play: string | null;

  constructor(stub: FaultStub, crash: CrashHandler | undefined, play: string | null) {
    this.#stub = stub;
    this.#crash = crash;
    this.#play = play;
  }

  async check(point: FaultPoint, tool?: string): Promise<void> {
    this.#armed ??= this.#stub.armed();
    if (!(await this.#armed)) return;
    const decision = (await this.#stub.hit({ point, tool: tool ?? null, play: this.#play })) as FaultDecision;
    if (!decision.fail) return;
    if (decision.hold) {
      await this.#stub.hold(decision.rule);
      return;
    }
    if (decision.crash) {
      const reason = `test fault plan rule ${decision.rule} crashed the invocation at ${point} call #${decision.call}`;
      if (this.#crash) this.#crash(reason);
      throw new TroupeError("injected_crash", reason);
    }
    if (point.startsWith("provider.")) {
      // The engine's own timeout, at `provider.after` a request the provider answered (and billed) whose answer was lost:
      // deterministic where a real cut-off races the provider's reading of the request.
      if (decision.error.code === PROVIDER_TIMEOUT) throw new ProviderTimeout(decision.error.message);
      throw new ToolCallError({ ...decision.error });
    }
    throw new TroupeError(decision.error.code, decision.error.message);
  }

  credential(provider: string): Promise<string | null> {
    return this.#stub.credential(provider);
  }
}

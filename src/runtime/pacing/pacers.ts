/** The pacers of one invocation of a run: one per provider, each talking to its (org, provider) PacingGate. */
import type { SubrequestMeter } from "../../core/meter";
import { messageOf } from "../../core/errors";
import { Pacer } from "./pacer";
import { pacingGate } from "../../clients/pacing-gates";
import { pacingPolicyFor } from "./policy";

/** Where the gates are, whose they are, and this invocation's caller id. */
export interface PacerRegistryOptions {
  env: Env;
  org: string;
  /** Unique per invocation: the gate holds concurrency units per caller. */
  caller: string;
  meter: SubrequestMeter;
  log(line: string): void;
  now(): number;
}

/** One pacer per provider for one invocation. */
export class PacerRegistry {
  #deps: PacerRegistryOptions;
  #pacers = new Map<string, Pacer>();

  constructor(options: PacerRegistryOptions) {
    this.#deps = options;
  }

  /** The pacer of `provider` (created on first use). */
  for(provider: string): Pacer {
    let pacer = this.#pacers.get(provider);
    if (!pacer) {
      const { env, org, meter } = this.#deps;
      const stub = (method: string) => pacingGate(env, org, provider, meter, method);
      pacer = new Pacer({
        caller: this.#deps.caller,
        policy: pacingPolicyFor(provider),
        now: this.#deps.now,
        log: this.#deps.log,
        gate: {
          acquire: (request) => stub("acquire").acquire({ provider, ...request }),
          report: (request) => stub("report").report({ provider, ...request }),
          release: (request) => stub("release").release({ provider, ...request }),
        },
      });
      this.#pacers.set(provider, pacer);
    }
    return pacer;
  }

  /** Returns every pacer's concurrency units (end of the invocation). A failure is logged: units lapse by themselves. */
  async closeAll(): Promise<void> {
    await Promise.all(
      [...this.#pacers.entries()].map(([provider, pacer]) =>
        pacer
          .close()
          .catch((error: unknown) =>
            this.#deps.log(`could not return pacing units for ${provider} (they lapse by themselves): ${messageOf(error)}`),
          ),
      ),
    );
  }
}

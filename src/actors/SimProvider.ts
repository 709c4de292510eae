import { DurableObject } from "cloudflare:workers";
import type { Hono } from "hono";
import { createSimApp } from "../sim/sim-app";
import { SIM_MIGRATIONS, SimStore } from "../sim/sim-store";
import { createSql, migrate } from "../stores/sql";

/**
 * The simulated provider: one global instance (named `"sim"`) standing in for
 * paid providers. A thin adapter: it migrates its SQLite schema and hands every
 * request to the app in `src/sim/sim-app.ts`; billing and counters live in
 * `SimStore`, so they survive eviction and restarts.
 */
export class SimProvider extends DurableObject<Env> {
  readonly #app: Hono;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, SIM_MIGRATIONS));
    this.#app = createSimApp({ store: new SimStore({ sql: createSql(ctx.storage) }) });
  }

  override fetch(request: Request): Promise<Response> {
    return Promise.resolve(this.#app.fetch(request));
  }
}

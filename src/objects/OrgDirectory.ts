import { DurableObject } from "cloudflare:workers";
import { DirectoryStore, directoryMigrations, RunEntry, type ListRunsRequest } from "../run/directory-store";
import { createSql, migrate } from "../storage/sql";

/** One per org: the index of the org's runs, newest first (`GET /v1/runs`). */
export class OrgDirectory extends DurableObject<Env> {
  #store: DirectoryStore;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new DirectoryStore({ sql: createSql(ctx.storage) });
    ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, directoryMigrations));
  }

  async record(entry: RunEntry): Promise<void> {
    this.#store.record(RunEntry.parse(entry));
  }

  async list(request: ListRunsRequest) {
    return this.#store.list(request);
  }
}

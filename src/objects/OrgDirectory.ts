import { DurableObject } from "cloudflare:workers";
import { DirectoryStore, directoryMigrations, IdempotentSubmit, RunEntry, type IdempotentRun, type ListRunsRequest } from "../run/directory-store";
import { createSql, migrate } from "../storage/sql";

/** One per org: the index of the org's runs, newest first (`GET /v1/runs`), and its idempotency keys. */
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

  /** The run an `Idempotency-Key` of this org stands for, recording `runId` if the key is new. */
  async claimIdempotencyKey(submit: IdempotentSubmit): Promise<IdempotentRun> {
    return this.#store.claimKey(IdempotentSubmit.parse(submit));
  }

  async list(request: ListRunsRequest) {
    return this.#store.list(request);
  }
}

/**
 * The actor that owns one shard of one persistent dataset, named
 * `${org}/${play}/${dataset}/${shardIndex}`. A thin adapter: it validates RPC
 * inputs, runs each call as one storage transaction over `SheetStore`, and
 * keeps the alarm on the earliest lease expiry.
 */
import { DurableObject } from "cloudflare:workers";
import { parseRpcInput } from "../core/errors";
import {
  ClaimRowsRequest,
  CountRunChunksRequest,
  CountRunRowsRequest,
  EnsureDatasetRequest,
  LeaseRequest,
  PeekRowsRequest,
  PersistRowsRequest,
  ReadRunRowsRequest,
  RunColumnsRequest,
  SheetReleaseRequest,
  type ClaimedRow,
  type LeaseResult,
  type PersistRowsResult,
  type RunChunkCounts,
  type RunColumnsScan,
  type RunRowCounts,
  type SheetRow,
} from "../contracts/shards";
import { SHEET_MIGRATIONS } from "../stores/sheet-schema";
import { SheetStore } from "../stores/sheet-store";
import { createSql, migrate } from "../stores/sql";

/**
 * `SheetRow` as its RPC type: workerd's `Rpc` types turn a result containing
 * `unknown` into `never`, so a JSON field value is typed `{} | null` here.
 */
export type SheetRowOverRpc = Omit<SheetRow, "data"> & { data: Record<string, {} | null> };

export class SheetShard extends DurableObject<Env> {
  readonly #store: SheetStore;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    this.#store = new SheetStore({ sql: createSql(ctx.storage), now: () => Date.now() });
    void ctx.blockConcurrencyWhile(async () => migrate(ctx.storage, SHEET_MIGRATIONS));
  }

  /** Records the dataset's shard count on first call; returns the recorded one (first writer wins). */
  async ensureDataset(request: EnsureDatasetRequest): Promise<{ shardCount: number }> {
    const { shardCount } = parseRpcInput(EnsureDatasetRequest, request);
    return { shardCount: this.#transaction(() => this.#store.ensureDataset(shardCount)) };
  }

  /** Claims rows for an attempt: `pending` (execute it), `completed` (reuse) or `blocked`, in request order. */
  async claimRows(request: ClaimRowsRequest): Promise<{ rows: ClaimedRow[] }> {
    const input = parseRpcInput(ClaimRowsRequest, request);
    const rows = this.#transaction(() => this.#store.claimRows(input));
    await this.#armAlarm();
    return { rows };
  }

  /** Fenced write of terminal rows: only rows whose lease this attempt still holds are written. */
  async persistRows(request: PersistRowsRequest): Promise<PersistRowsResult> {
    const input = parseRpcInput(PersistRowsRequest, request);
    const result = this.#transaction(() => this.#store.persistRows(input));
    await this.#armAlarm();
    return result;
  }

  /** Which of these rows a run would reuse now (read only: estimates). */
  async peekRows(request: PeekRowsRequest): Promise<{ reusable: string[] }> {
    return { reusable: this.#store.peekRows(parseRpcInput(PeekRowsRequest, request)) };
  }

  /** Extends the leases this attempt still holds; the other keys come back as lost. */
  async renewLeases(request: LeaseRequest): Promise<LeaseResult> {
    const input = parseRpcInput(LeaseRequest, request);
    const result = this.#transaction(() => this.#store.renewLeases(input));
    await this.#armAlarm();
    return result;
  }

  /** Clears every lease a run holds, so that a rerun is not blocked after cancel or a fatal error; fences its older epochs. */
  async releaseRun(request: SheetReleaseRequest): Promise<{ released: number }> {
    const { runId, fenceBelow } = parseRpcInput(SheetReleaseRequest, request);
    const released = this.#transaction(() => this.#store.releaseRun(runId, fenceBelow));
    await this.#armAlarm();
    return { released };
  }

  /** A run's rows with input index in [fromIndex, toIndex), in input order, at most 1000 and about 8 MiB (`cut` past it). */
  async readRunRows(request: ReadRunRowsRequest): Promise<{ rows: SheetRowOverRpc[]; cut: boolean }> {
    const input = parseRpcInput(ReadRunRowsRequest, request);
    const { rows, cut } = this.#store.readRunRows(input);
    // Parsed JSON holds no `undefined`, so every field value is `{} | null`.
    return { rows: rows as SheetRowOverRpc[], cut };
  }

  /** Counts a run's rows in this shard by status (for reconciliation). */
  async countRunRows(request: CountRunRowsRequest): Promise<RunRowCounts> {
    const { runId } = parseRpcInput(CountRunRowsRequest, request);
    return this.#store.countRunRows(runId);
  }

  /** The fields of a run's rows in this shard, from an input index on, over at most 50,000 rows and 8 MiB of them (exports' columns). */
  async runColumns(request: RunColumnsRequest): Promise<RunColumnsScan> {
    return this.#store.runColumns(parseRpcInput(RunColumnsRequest, request));
  }

  /** Counts a run's rows in this shard per chunk of its input (finalize reconciles chunk by chunk). */
  async countRunChunks(request: CountRunChunksRequest): Promise<{ chunks: RunChunkCounts[] }> {
    return { chunks: this.#store.countRunChunks(parseRpcInput(CountRunChunksRequest, request)) };
  }

  /** Frees expired leases, then re-arms for the next expiry. Safe to deliver more than once. */
  override async alarm(): Promise<void> {
    try {
      this.#transaction(() => this.#store.expireLeases());
    } finally {
      await this.#armAlarm();
    }
  }

  #transaction<T>(work: () => T): T {
    return this.ctx.storage.transactionSync(work);
  }

  async #armAlarm(): Promise<void> {
    const next = this.#store.nextLeaseExpiry();
    if (next === null) await this.ctx.storage.deleteAlarm();
    else if ((await this.ctx.storage.getAlarm()) !== next) await this.ctx.storage.setAlarm(next);
  }
}

/** Validates an RPC input: a `ValidationError` (`invalid_request`), whose code survives the RPC boundary as data. */

/**
 * Callers' side of the storage actors: route keys to shards and make one RPC
 * per shard per operation (more only where one would carry too much: a claim
 * or persist of large rows, a read cut short, claims or peeks of receipts
 * whose outputs pass what one answer carries). Every stub call is counted, because an invocation
 * may make at most 10,000 subrequests and the coordinator budgets for them.
 */
import { shardOf } from "../core/hash";
import type {
  AttemptRef,
  ClaimedRow,
  CompleteReceiptsRequest,
  LeaseRequest,
  LeaseResult,
  PeekedReceipt,
  PersistRowsRequest,
  PersistRowsResult,
  PlannedRow,
  ReadRunRowsRequest,
  RunRowsRead,
  ReceiptWriteResult,
  RunColumn,
  SheetRow,
  WriteReceiptsRequest,
  WriteReceiptsResult,
} from "../contracts/shards";
import { MAX_READ_ROWS, MAX_RUN_COLUMN_CHARS, MAX_RUN_COLUMNS, RPC_PAGE_CHARS } from "../contracts/shards";
import type { SubrequestMeter } from "../core/meter";
import { NO_FAULTS, type FaultProbe } from "./faults";
import { NOT_SENT } from "../stores/receipt-rules";
import { getOrInsert, inSizedPages } from "../core/collections";

/** Groups items by the shard their key routes to. */
export function groupByShard<T>(items: readonly T[], keyOf: (item: T) => string, shardCount: number): Map<number, T[]> {
  const groups = new Map<number, T[]>();
  for (const item of items) {
    const shard = shardOf(keyOf(item), shardCount);
    getOrInsert(groups, shard, () => []).push(item);
  }
  return groups;
}

/** The name of one sheet shard: datasets are per org and play. */
export function sheetShardName(org: string, play: string, dataset: string, shard: number): string {
  return `${org}/${play}/${dataset}/${shard}`;
}

export interface DatasetLocation {
  org: string;
  play: string;
  dataset: string;
  shardCount: number;
}

export class SheetClient {
  readonly location: DatasetLocation;
  #ns: Env["SHEET_SHARD"];
  #meter: SubrequestMeter;

  #faults: FaultProbe;

  constructor(options: { env: Env; location: DatasetLocation; meter: SubrequestMeter; faults?: FaultProbe }) {
    this.location = options.location;
    this.#ns = options.env.SHEET_SHARD;
    this.#meter = options.meter;
    this.#faults = options.faults ?? NO_FAULTS;
  }

  /**
   * Records the dataset's shard count on its shard 0 the first time and
   * returns the recorded count (first writer wins).
   */
  static async ensureDataset(options: {
    env: Env;
    org: string;
    play: string;
    dataset: string;
    shardCount: number;
    meter: SubrequestMeter;
  }) {
    options.meter.countRpc("sheet.ensureDataset");
    const stub = options.env.SHEET_SHARD.getByName(sheetShardName(options.org, options.play, options.dataset, 0));
    const { shardCount } = await stub.ensureDataset({ shardCount: options.shardCount });
    return shardCount;
  }

  /** The stub of `shard`, counted as one call of `sheet.<method>`. */
  #stub(shard: number, method: string) {
    this.#meter.countRpc(`sheet.${method}`);
    const { org, play, dataset } = this.location;
    return this.#ns.getByName(sheetShardName(org, play, dataset, shard));
  }

  /**
   * Claims the rows for the attempt (SheetStore.claimRows), answered by row index: one call per shard, and more
   * where their inputs pass RPC_PAGE_CHARS (every row of one key goes in one call).
   */
  async claimRows(options: {
    attempt: AttemptRef;
    rows: readonly PlannedRow[];
    recompute: boolean;
    leaseTtlMs: number;
    /** Record only the rows that are reused; lease nothing (see SheetStore.claimRows). */
    reuseOnly?: boolean;
  }): Promise<Map<number, ClaimedRow>> {
    // By row index: a key repeated with another input is answered for each occurrence (SheetStore.claimRows).
    const claimed = new Map<number, ClaimedRow>();
    const groups = groupByShard(options.rows, (r) => r.key, this.location.shardCount);
    await Promise.all(
      [...groups].flatMap(([shard, group]) =>
        claimPages(group).map(async (rows) => {
          const result = await this.#stub(shard, "claimRows").claimRows({
            attempt: options.attempt,
            leaseTtlMs: options.leaseTtlMs,
            recompute: options.recompute,
            reuseOnly: options.reuseOnly,
            rows: rows.map((r) => ({ key: r.key, index: r.index, input: r.input })),
          });
          for (const [i, row] of result.rows.entries()) claimed.set(rows[i]!.index, row as ClaimedRow);
        }),
      ),
    );
    await this.#faults.check("sheet.claimed");
    return claimed;
  }

  /** The keys of `rows` a run would reuse now (read only: estimates), one call per shard per 1,000 rows and RPC_PAGE_CHARS of inputs. */
  async peekRows(rows: readonly { key: string; input: unknown }[], recompute: boolean): Promise<Set<string>> {
    const reusable = new Set<string>();
    const groups = groupByShard(rows, (r) => r.key, this.location.shardCount);
    await Promise.all(
      [...groups].flatMap(([shard, group]) =>
        inSizedPages(group, RPC_PAGE_CHARS, inputChars, 1000).map(async (page) => {
          const result = await this.#stub(shard, "peekRows").peekRows({
            recompute,
            rows: page.map((r) => ({ key: r.key, input: r.input })),
          });
          for (const key of result.reusable) reusable.add(key);
        }),
      ),
    );
    return reusable;
  }

  /** Writes the attempt's settled rows, one call per shard and RPC_PAGE_CHARS of their data (an RPC carries 32 MiB). */
  async persistRows(attempt: AttemptRef, rows: PersistRowsRequest["rows"]): Promise<PersistRowsResult> {
    await this.#faults.check("sheet.persist");
    const groups = groupByShard(rows, (r) => r.key, this.location.shardCount);
    const results = await Promise.all(
      [...groups].flatMap(([shard, group]) =>
        inSizedPages(group, RPC_PAGE_CHARS, persistedChars).map((page) =>
          this.#stub(shard, "persistRows").persistRows({ attempt, rows: page }),
        ),
      ),
    );
    await this.#faults.check("sheet.persisted");
    return { written: results.flatMap((r) => r.written), rejected: results.flatMap((r) => r.rejected) };
  }

  /** Heartbeat: extends the attempt's row leases, one call per shard; keys it no longer holds come back lost. */
  async renewLeases(attempt: AttemptRef, keys: readonly string[], leaseTtlMs: number): Promise<LeaseResult> {
    const groups = groupByShard(keys, (key) => key, this.location.shardCount);
    const results = await Promise.all(
      [...groups].map(([shard, group]) => this.#stub(shard, "renewLeases").renewLeases({ attempt, keys: group, leaseTtlMs })),
    );
    return { renewed: results.flatMap((r) => r.renewed), lost: results.flatMap((r) => r.lost) };
  }

  /** The run's rows counted per chunk of `chunkRows` input indexes, over every shard. */
  async countRunChunks(runId: string, chunkRows: number): Promise<Map<number, { total: number; completed: number; failed: number }>> {
    const results = await Promise.all(this.#allShards().map((s) => this.#stub(s, "countRunChunks").countRunChunks({ runId, chunkRows })));
    const chunks = new Map<number, { total: number; completed: number; failed: number }>();
    for (const { chunk, total, completed, failed } of results.flatMap((r) => r.chunks)) {
      const sum = chunks.get(chunk) ?? { total: 0, completed: 0, failed: 0 };
      chunks.set(chunk, { total: sum.total + total, completed: sum.completed + completed, failed: sum.failed + failed });
    }
    return chunks;
  }

  /** Frees every row lease the run holds, on every shard; with `fenceBelow`, refuses its older epochs' claims from then on. */
  async releaseRun(runId: string, fenceBelow?: number): Promise<number> {
    const results = await Promise.all(this.#allShards().map((s) => this.#stub(s, "releaseRun").releaseRun({ runId, fenceBelow })));
    return results.reduce((sum, r) => sum + r.released, 0);
  }

  /**
   * The run's rows with input index in [fromIndex, toIndex), in order, gathered
   * from every shard (one call each, and more from a shard whose answer its
   * size cut short). The window is cut to MAX_READ_ROWS indexes.
   */
  async readRunRows(runId: string, fromIndex: number, toIndex: number): Promise<SheetRow[]> {
    const to = Math.min(toIndex, fromIndex + MAX_READ_ROWS);
    if (to <= fromIndex) return [];
    const results = await Promise.all(
      this.#allShards().map(async (shard) => {
        const rows: SheetRow[] = [];
        for (let from = fromIndex; ; ) {
          const read = await this.readShardRunRows(shard, { runId, fromIndex: from, toIndex: to });
          rows.push(...read.rows);
          if (!read.cut) return rows;
          from = read.rows.at(-1)!.index + 1;
        }
      }),
    );
    return results.flat().sort((a, b) => a.index - b.index);
  }

  /**
   * One shard's share of the run's rows: those with input index in
   * [fromIndex, toIndex), in order, the first `limit` (at most MAX_READ_ROWS)
   * and `maxChars` of them (`cut` when that ended it first).
   * Merging shards' answers in input order is the caller's (see `dataset-view.ts`).
   */
  async readShardRunRows(shard: number, request: ReadRunRowsRequest): Promise<RunRowsRead> {
    if (request.toIndex <= request.fromIndex) return { rows: [], cut: false };
    const read = await this.#stub(shard, "readRunRows").readRunRows(request);
    return { rows: read.rows as SheetRow[], cut: read.cut };
  }

  /**
   * The fields of the run's rows over every shard, each with the first row
   * that has it: a call per shard for every 8 MiB of its rows' data (and
   * 50,000 rows). The scans stop once more than MAX_RUN_COLUMNS fields, or
   * MAX_RUN_COLUMN_CHARS of their names, are found, or one of them failed.
   */
  async runColumns(runId: string): Promise<RunColumn[]> {
    const first = new Map<string, RunColumn>();
    let nameChars = 0;
    let failed = false;
    const wide = () => first.size > MAX_RUN_COLUMNS || nameChars > MAX_RUN_COLUMN_CHARS;
    await Promise.all(
      this.#allShards().map(async (shard) => {
        try {
          for (let fromIndex: number | null = 0; fromIndex !== null && !failed && !wide(); ) {
            const scan = await this.#stub(shard, "runColumns").runColumns({ runId, fromIndex });
            for (const column of scan.columns) {
              const seen = first.get(column.name);
              if (!seen) nameChars += column.name.length;
              if (!seen || column.index < seen.index) first.set(column.name, column);
            }
            fromIndex = scan.nextIndex;
          }
        } catch (error) {
          failed = true;
          throw error;
        }
      }),
    );
    return [...first.values()];
  }

  async countRunRows(runId: string): Promise<{ total: number; completed: number; failed: number; pending: number }> {
    const results = await Promise.all(this.#allShards().map((s) => this.#stub(s, "countRunRows").countRunRows({ runId })));
    const sum = { total: 0, completed: 0, failed: 0, pending: 0 };
    for (const r of results) {
      sum.total += r.total;
      sum.completed += r.completed;
      sum.failed += r.failed;
      sum.pending += r.pending;
    }
    return sum;
  }

  #allShards(): number[] {
    return Array.from({ length: this.location.shardCount }, (_, i) => i);
  }
}

export function receiptShardName(org: string, shard: number): string {
  return `${org}/${shard}`;
}

/**
 * Hears which receipts an attempt holds: claimed (running, ours) until completed or failed; `answered`, how many of
 * those finished hold a provider's answer (a failure written as `not_sent` does not).
 */
export interface ReceiptLeaseObserver {
  claimed(shard: number, keys: string[]): void;
  finished(shard: number, keys: string[], answered: number): void;
}

export class ReceiptClient {
  readonly shardCount: number;
  #ns: Env["RECEIPT_SHARD"];
  #org: string;
  #meter: SubrequestMeter;
  #faults: FaultProbe;
  #leases: ReceiptLeaseObserver | undefined;

  /** `leases`: told of every receipt this client's attempt claims and finishes, so its heartbeat can renew them. */
  constructor(options: {
    env: Env;
    org: string;
    shardCount: number;
    meter: SubrequestMeter;
    faults?: FaultProbe;
    leases?: ReceiptLeaseObserver;
  }) {
    this.#ns = options.env.RECEIPT_SHARD;
    this.#org = options.org;
    this.shardCount = options.shardCount;
    this.#meter = options.meter;
    this.#faults = options.faults ?? NO_FAULTS;
    this.#leases = options.leases;
  }

  shardOf(key: string): number {
    return shardOf(key, this.shardCount);
  }

  /** The stub of `shard`, counted as one call of `receipt.<method>`. */
  #stub(shard: number, method: string) {
    this.#meter.countRpc(`receipt.${method}`);
    return this.#ns.getByName(receiptShardName(this.#org, shard));
  }

  /**
   * What a claim of each key would find now (read only: estimates), one call per shard per 1,000 keys, and more
   * where their outputs pass RPC_PAGE_CHARS (a shard answers the keys before that; the rest are asked again).
   */
  async peek(keys: readonly string[]): Promise<Map<string, PeekedReceipt>> {
    const found = new Map<string, PeekedReceipt>();
    const groups = groupByShard([...new Set(keys)], (key) => key, this.shardCount);
    await Promise.all(
      [...groups].flatMap(([shard, group]) =>
        inPages(group, 1000).map(async (page) => {
          for (let rest = page; rest.length > 0; ) {
            const { receipts } = await this.#stub(shard, "peek").peek({ keys: rest });
            if (receipts.length === 0) throw new Error(`receipt shard ${shard} answered none of ${rest.length} peeks`);
            for (const receipt of receipts) found.set(receipt.key, receipt as PeekedReceipt);
            rest = rest.slice(receipts.length);
          }
        }),
      ),
    );
    return found;
  }

  /**
   * Completions, failures and claims in one call (WriteReceiptsRequest), each
   * passing the fault points its own call would. Claims the shard left
   * unanswered, their reused outputs past what one answer carries
   * (WriteReceiptsResult), are sent again in order, as many calls as it takes.
   */
  async write(shard: number, request: WriteReceiptsRequest): Promise<WriteReceiptsResult> {
    const claiming = request.claims.length > 0;
    if (request.complete.length) await this.#faults.check("receipt.complete");
    if (request.fail.length) await this.#faults.check("receipt.fail");
    if (claiming) await this.#faults.check("receipt.claim");
    const answered = request.complete.length + request.fail.filter((item) => item.error.code !== NOT_SENT).length;
    this.#finishing(shard, [...request.complete, ...request.fail], answered);
    const result = await this.#write(shard, request);
    const claims = result.claims.map((group) => [...group]);
    for (;;) {
      const rest = request.claims.map((group, i) => ({ ...group, items: group.items.slice(claims[i]!.length) }));
      const left = rest.reduce((sum, group) => sum + group.items.length, 0);
      if (left === 0) break;
      const more = await this.#write(shard, { attempt: request.attempt, complete: [], fail: [], claims: rest });
      if (more.claims.every((group) => group.length === 0)) throw new Error(`receipt shard ${shard} answered none of ${left} claims`);
      for (const [i, group] of more.claims.entries()) claims[i]!.push(...group);
    }
    if (request.complete.length) await this.#faults.check("receipt.completed");
    if (claiming) await this.#faults.check("receipt.claimed");
    return { ...result, claims };
  }

  /** One `write` call; the claims it answered `claimed` are the attempt's to renew. */
  async #write(shard: number, request: WriteReceiptsRequest): Promise<WriteReceiptsResult> {
    const result = (await this.#stub(shard, "write").write(request)) as WriteReceiptsResult;
    this.#leases?.claimed(
      shard,
      result.claims.flatMap((group) => group.filter((r) => r.disposition === "claimed").map((r) => r.key)),
    );
    return result;
  }

  async complete(shard: number, request: CompleteReceiptsRequest): Promise<ReceiptWriteResult> {
    await this.#faults.check("receipt.complete");
    this.#finishing(shard, request.items, request.items.length);
    const written = await this.#stub(shard, "complete").complete(request);
    await this.#faults.check("receipt.completed");
    return written;
  }

  /** Heartbeat: extends the attempt's running receipts on one shard; the others come back lost. */
  async renew(shard: number, request: LeaseRequest): Promise<LeaseResult> {
    return this.#stub(shard, "renew").renew(request);
  }

  /**
   * Finishing ends these leases (written, or rejected as no longer ours): a
   * heartbeat racing the write must not take them for lost. A write that fails
   * is retried by the completion ladder, well within a lease.
   */
  #finishing(shard: number, items: { key: string }[], answered: number): void {
    this.#leases?.finished(
      shard,
      items.map((item) => item.key),
      answered,
    );
  }

  async releaseRun(runId: string): Promise<number> {
    const shards = Array.from({ length: this.shardCount }, (_, i) => i);
    const results = await Promise.all(shards.map((s) => this.#stub(s, "releaseRun").releaseRun({ runId })));
    return results.reduce((sum, r) => sum + r.released, 0);
  }
}

/** What a row's key and input take of a page. */
function inputChars(row: { key: string; input: unknown }): number {
  return row.key.length + (JSON.stringify(row.input)?.length ?? 0);
}

/**
 * One shard's rows to claim in pages of RPC_PAGE_CHARS of inputs, in their order, every row of a key in one page:
 * a key repeated with another input is answered by its earlier rows in the same claim (SheetStore.claimRows).
 */
function claimPages(rows: readonly PlannedRow[]): PlannedRow[][] {
  const charsOf = new Map<string, number>();
  for (const row of rows) charsOf.set(row.key, (charsOf.get(row.key) ?? 0) + inputChars(row));
  const pageOf = new Map<string, number>();
  let page = 0;
  let chars = 0;
  for (const [key, size] of charsOf) {
    if (chars > 0 && chars + size > RPC_PAGE_CHARS) {
      page++;
      chars = 0;
    }
    pageOf.set(key, page);
    chars += size;
  }
  const pages: PlannedRow[][] = Array.from({ length: page + 1 }, () => []);
  for (const row of rows) pages[pageOf.get(row.key)!]!.push(row);
  return pages;
}

/** About how many characters a row to persist takes in its call (its data as JSON, its key and error). */
function persistedChars(row: PersistRowsRequest["rows"][number]): number {
  return (JSON.stringify(row.data)?.length ?? 0) + row.key.length + (row.error?.length ?? 0);
}

/** `items` cut into consecutive pages of at most `size`. */
function inPages<T>(items: readonly T[], size: number): T[][] {
  const pages: T[][] = [];
  for (let i = 0; i < items.length; i += size) pages.push(items.slice(i, i + size));
  return pages;
}

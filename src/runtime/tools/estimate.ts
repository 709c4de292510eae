/**
 * What a run would bill now, without starting it or calling a provider
 * (`POST /v1/runs/estimate`). The play runs against an estimating context:
 * `ctx.map` asks the sheets which rows it would reuse, and the other rows'
 * field functions run with a `tool()` that asks the receipts. A reused
 * receipt returns its stored output, so later calls that depend on it are
 * known too; a call with no receipt is a new, billed request at the tool's
 * price, and the rest of its row cannot be known (its output does not exist
 * yet). Those unknown remainders are estimated from the play's past runs
 * (each tool's billed requests per computed row): a range, where everything
 * else is exact.
 *
 * Assumed, and documented for play authors: a field function's new tool call
 * is its last call (so a row whose only new call is in its last field is
 * known exactly). Child plays, waits, fetch and reading a map's stored rows
 * end the estimate of the play where they are called; in a row, a child play
 * or a fetch ends the row's (a child's cost is not estimated: no upper bound).
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { AuthScopes } from "./auth-scope";
import { priceOf } from "./spend";
import type {
  DatasetHandle,
  FieldSet,
  MapOptions,
  MapRows,
  PlayContext,
  PlayDefinition,
  Row,
  RowContext,
  ToolCallOptions,
  AnyTool,
} from "../../play/types";
import type { PlayStats } from "../../stores/org-spend-store";
import { toCredits, toMicros } from "../../stores/spend-store";
import { messageOf, TroupeError } from "../../core/errors";
import type { PeekedReceipt } from "../../contracts/shards";
import { type RuntimePolicy, shardCountFor } from "../../core/policy";
import { receiptKey, staleBeforeOf } from "./receipt-keys";
import { planRows, type RowPlan } from "../map/row-keys";
import { UploadRows } from "../map/upload-rows";
import { isUploadedRows, rowSchemaOf } from "../../play/define";
import { SubrequestMeter } from "../../core/meter";
import { subrequestCapFor } from "../../core/platform-limits";
import { ReceiptClient, SheetClient } from "../../clients/shards";

/** What `POST /v1/runs/estimate` answers (API.md "Spend"). */
export interface Estimate {
  rows: { total: number; reusable: number; toCompute: number };
  /** Per tool: requests answered from receipts (no bill) and new, billed requests known now. */
  calls: Record<string, { reused: number; new: number }>;
  /** Credits: `low` is what the known new requests cost; `high` is null where nothing bounds the unknown part. */
  spend: { low: number; expected: number; high: number | null };
  /** True when every request's input was known: then `low == expected == high` is what the run bills. */
  exact: boolean;
  /** Why the estimate is a range, in words. */
  notes: string[];
}

export interface EstimateOptions {
  env: Env;
  org: string;
  play: PlayDefinition;
  input: unknown;
  force: boolean;
  forceToolRefresh: boolean;
  /** The run would send again calls whose outcome is unknown (`retryUnknown`); else they fail without a request. */
  retryUnknown: boolean;
  tools: ReadonlyMap<string, AnyTool>;
  policy: RuntimePolicy;
  /** The play's past completed runs (from the org's directory). */
  history: PlayStats;
  now(): number;
}

/** An upload-fed map is estimated from this many of its first rows, then scaled... */
const UPLOAD_SAMPLE_ROWS = 2_000;
/** ...or from as many as hold about this many bytes (2,000 rows of 64 KiB are 128 MiB: an isolate's whole memory). */
const UPLOAD_SAMPLE_BYTES = 8 * 1024 * 1024;

/** The estimator's counters at one moment. */
interface Tally {
  rows: Estimate["rows"];
  calls: Estimate["calls"];
  known: number;
  expected: number;
  high: number | null;
  unknown: number;
}

/** Rows of one map whose field functions run at once, and so share each receipt lookup. */
const WAVE_ROWS = 500;

/** Ends a row's estimate at its first new request: what follows depends on an output that does not exist yet. */
class RowUnknown extends Error {}
/** Ends a row's estimate at a child play or a fetch: what it costs, and what follows it, is not known. */
class RowUnpriced extends RowUnknown {}
/** Ends the play's estimate at a child play, a wait or a fetch. */
class PlayStopped extends Error {}

/** The sheets or receipts could not be asked: there is no estimate (HTTP 503; ask again). */
export class EstimateUnavailable extends TroupeError {
  constructor(cause: unknown) {
    super("estimate_unavailable", `could not read the datasets or receipts to estimate from (${messageOf(cause)}); try again`, {
      httpStatus: 503,
      cause,
    });
  }
}

export async function estimateRun(o: EstimateOptions): Promise<Estimate> {
  const estimator = new Estimator(o);
  const ctx = estimator.context();
  try {
    await o.play.run(ctx, o.input);
  } catch (error) {
    if (error instanceof EstimateUnavailable) throw error;
    if (error instanceof PlayStopped) estimator.stopped(error.message);
    else
      estimator.stopped(
        `the play stopped with an error before its end (${messageOf(error).slice(0, 200)}): later maps and calls are not estimated`,
      );
  }
  return estimator.result();
}

class Estimator {
  #deps: EstimateOptions;
  /** The estimate runs in its request's invocation: under emulated platform limits, its subrequests are capped like any other. */
  #meter: SubrequestMeter;
  #scopes: AuthScopes;
  #receipts: ReceiptClient;
  #rows = { total: 0, reusable: 0, toCompute: 0 };
  #calls: Record<string, { reused: number; new: number }> = {};
  #knownMicros = 0;
  /** Receipt keys of the new calls priced so far: a call made by several rows is billed once. */
  #newKeys = new Set<string>();
  #expectedExtraMicros = 0;
  #highExtraMicros: number | null = 0;
  #unknownRows = 0;
  #notes: string[] = [];
  /** Receipt lookups waiting to go out together. */
  #lookups: { key: string; resolve(receipt: PeekedReceipt): void; reject(error: unknown): void }[] = [];
  #flush: ReturnType<typeof setTimeout> | null = null;
  /** The row whose field is running: the play's own `ctx` called from a field makes the row's call, as in a run. */
  #rowScope = new AsyncLocalStorage<RowContext>();

  constructor(options: EstimateOptions) {
    this.#deps = options;
    this.#meter = new SubrequestMeter({ cap: subrequestCapFor(options.env) });
    this.#scopes = new AuthScopes({ env: options.env });
    this.#receipts = new ReceiptClient({
      env: options.env,
      org: options.org,
      shardCount: options.policy.receiptShards,
      meter: this.#meter,
    });
  }

  note(line: string): void {
    if (!this.#notes.includes(line)) this.#notes.push(line);
  }

  /** The play's estimate ended before the play did: what follows is not known, and nothing bounds it. */
  stopped(line: string): void {
    this.note(line);
    this.#highExtraMicros = null;
  }

  context(): PlayContext {
    const stop = (what: string) => () =>
      Promise.reject(new PlayStopped(`${what} is not estimated: the play's estimate ends where it is called`));
    // Called from a field function, the play's own ctx makes the row's call (a wait or a sleep fails the row, as in a run).
    const row = this.#rowScope;
    return {
      runId: "estimate",
      org: this.#deps.org,
      map: (name, rows, fields, options) => this.#map(name, rows, fields, options),
      tool: <T>(toolId: string, input: unknown, options?: ToolCallOptions) =>
        (row.getStore()?.tool(toolId, input, options) ?? this.#playTool(toolId, input, options)) as Promise<T>,
      log: () => {},
      runPlay: (...args: Parameters<RowContext["runPlay"]>) => row.getStore()?.runPlay(...args) ?? stop("ctx.runPlay")(),
      waitForEvent: () => (row.getStore() ? Promise.reject(new Error("a wait in a field fails its row")) : stop("ctx.waitForEvent")()),
      sleep: () => (row.getStore() ? Promise.reject(new Error("a sleep in a field fails its row")) : stop("ctx.sleep")()),
      fetch: (...args: Parameters<RowContext["fetch"]>) => row.getStore()?.fetch(...args) ?? stop("ctx.fetch")(),
    } as PlayContext;
  }

  result(): Estimate {
    if (this.#unknownRows > 0) {
      const basis =
        this.#deps.history.runs > 0
          ? `estimated from ${this.#deps.history.runs} past runs of ${this.#deps.play.name} (${this.#deps.history.rowsComputed} rows computed)`
          : `no past run of ${this.#deps.play.name} to estimate them from`;
      this.note(`${this.#unknownRows} rows make calls whose inputs depend on outputs not bought yet; ${basis}`);
    }
    const low = this.#knownMicros;
    const high = this.#highExtraMicros === null ? null : toCredits(low + this.#highExtraMicros);
    return {
      rows: this.#rows,
      calls: this.#calls,
      spend: { low: toCredits(low), expected: toCredits(low + this.#expectedExtraMicros), high },
      exact: this.#notes.length === 0,
      notes: this.#notes,
    };
  }

  async #map(name: string, rows: MapRows, fields: FieldSet, options: MapOptions = {}): Promise<DatasetHandle> {
    if (isUploadedRows(rows)) return this.#uploadMap(name, rows.upload, fields, options);
    return this.#plannedMap(name, await planRows(rows, options.key), fields);
  }

  /**
   * A map over an upload's rows: estimated from its first
   * {@link UPLOAD_SAMPLE_ROWS} rows, or fewer when they pass
   * {@link UPLOAD_SAMPLE_BYTES} of the file (read, checked and keyed as a run
   * would), scaled to the whole upload. Exact when the sample is the whole
   * upload.
   */
  async #uploadMap(name: string, upload: string, fields: FieldSet, options: MapOptions): Promise<DatasetHandle> {
    const { env, org, play } = this.#deps;
    const reader = new UploadRows({ bucket: env.UPLOADS, org, key: options.key, schema: rowSchemaOf(play.input) });
    const { rows: total } = await reader.size(upload);
    const sampled = await reader.rowsWithin(upload, UPLOAD_SAMPLE_ROWS, UPLOAD_SAMPLE_BYTES);
    const rows = sampled ? await reader.read({ upload, from: 0, to: sampled }) : [];
    const before = this.#tally();
    const handle = await this.#plannedMap(name, { rows, duplicatesDropped: 0 }, fields, total);
    if (sampled < total) {
      this.#scale(before, total / sampled);
      this.note(`map "${name}" reads ${total} rows from upload ${upload}: estimated from its first ${sampled}, scaled to all of them`);
    }
    return { ...handle, total, completed: total };
  }

  /** The counters so far, to scale what one map adds to them. */
  #tally(): Tally {
    return {
      rows: { ...this.#rows },
      calls: Object.fromEntries(Object.entries(this.#calls).map(([tool, c]) => [tool, { ...c }])),
      known: this.#knownMicros,
      expected: this.#expectedExtraMicros,
      high: this.#highExtraMicros,
      unknown: this.#unknownRows,
    };
  }

  /** Multiplies what was added since `before` by `factor`: a sample's estimate made the whole's. */
  #scale(before: Tally, factor: number): void {
    const grow = (then: number, now: number) => Math.round(then + (now - then) * factor);
    this.#rows = {
      total: grow(before.rows.total, this.#rows.total),
      reusable: grow(before.rows.reusable, this.#rows.reusable),
      toCompute: grow(before.rows.toCompute, this.#rows.toCompute),
    };
    for (const [tool, calls] of Object.entries(this.#calls)) {
      const then = before.calls[tool] ?? { reused: 0, new: 0 };
      this.#calls[tool] = { reused: grow(then.reused, calls.reused), new: grow(then.new, calls.new) };
    }
    this.#knownMicros = grow(before.known, this.#knownMicros);
    this.#expectedExtraMicros = grow(before.expected, this.#expectedExtraMicros);
    if (this.#highExtraMicros !== null && before.high !== null) this.#highExtraMicros = grow(before.high, this.#highExtraMicros);
    this.#unknownRows = grow(before.unknown, this.#unknownRows);
  }

  async #plannedMap(name: string, plan: RowPlan, fields: FieldSet, totalRows = plan.rows.length): Promise<DatasetHandle> {
    const { env, org, play, policy } = this.#deps;
    // The count a run would record; a dataset that does not exist yet is created with it, as the run would (by all of
    // an upload's rows, not the sample read: a 10M-row upload's dataset got the 4 shards of 2,000 rows).
    let reusable: Set<string>;
    try {
      const shardCount = await SheetClient.ensureDataset({
        env,
        org,
        play: play.name,
        dataset: name,
        shardCount: shardCountFor(totalRows, policy),
        meter: this.#meter,
      });
      const sheets = new SheetClient({ env, meter: this.#meter, location: { org, play: play.name, dataset: name, shardCount } });
      reusable = await sheets.peekRows(plan.rows, this.#deps.force || this.#deps.forceToolRefresh);
    } catch (error) {
      throw new EstimateUnavailable(error);
    }
    const compute = plan.rows.filter((row) => !reusable.has(row.key));
    this.#rows.total += plan.rows.length;
    this.#rows.reusable += reusable.size;
    this.#rows.toCompute += compute.length;
    const names = Object.keys(fields);
    for (let i = 0; i < compute.length; i += WAVE_ROWS) {
      // A row read from an upload that does not fit the play's schema fails in the run without a call.
      const wave = compute.slice(i, i + WAVE_ROWS).filter((row) => row.invalid === undefined);
      await Promise.all(wave.map((row) => this.#row(row.key, row.input, fields, names)));
    }
    return {
      name,
      total: plan.rows.length,
      // The estimate assumes every row completes.
      completed: plan.rows.length,
      failed: 0,
      duplicatesDropped: plan.duplicatesDropped,
      // Its rows as a run would store them are not known (read as none, a later map over them cost nothing).
      rows: () => Promise.reject(new PlayStopped(`reading map "${name}"'s rows is not estimated: the play's estimate ends there`)),
    } as DatasetHandle;
  }

  /** Runs one row's fields until its first new request (or a failure the receipts remember). */
  async #row(key: string, input: Row, fields: FieldSet, names: string[]): Promise<void> {
    const row: Row = { ...input };
    const called = new Set<string>();
    const ctx = {
      rowKey: key,
      signal: new AbortController().signal,
      tool: (toolId: string, toolInput: unknown, options?: ToolCallOptions) => this.#call(toolId, toolInput, options, called),
      log: () => {},
      runPlay: () => Promise.reject(new RowUnpriced("ctx.runPlay")),
      fetch: () => Promise.reject(new RowUnpriced("ctx.fetch")),
    } as unknown as RowContext;
    for (let i = 0; i < names.length; i++) {
      try {
        const value = await this.#rowScope.run(ctx, () => fields[names[i]!]!(row, ctx));
        row[names[i]!] = value === undefined ? null : value;
      } catch (error) {
        if (error instanceof EstimateUnavailable) throw error;
        // A child play's cost is not known, nor what a field makes of a fetch: the row's rest is unknown, unbounded.
        if (error instanceof RowUnpriced) this.#unpriced(error.message, called);
        // A new request in the last field ends the row: nothing after it is assumed to call a provider.
        else if (error instanceof RowUnknown && i < names.length - 1) this.#unknownRemainder(called);
        // Any other throw fails the row in a run too: it makes no further call.
        return;
      }
    }
  }

  /** A row's fields after its first new request: priced from the play's history, tools it already called excluded. */
  #unknownRemainder(called: Set<string>): void {
    this.#unknownRows++;
    const { history } = this.#deps;
    if (history.rowsComputed === 0) {
      this.#highExtraMicros = null;
      return;
    }
    for (const [tool, stats] of Object.entries(history.tools)) {
      if (called.has(tool) || stats.calls === 0) continue;
      const perRow = stats.calls / history.rowsComputed;
      const price = stats.micros / stats.calls;
      this.#expectedExtraMicros += Math.round(perRow * price);
      if (this.#highExtraMicros !== null) this.#highExtraMicros += Math.round(Math.ceil(perRow) * price);
    }
  }

  /**
   * A row calls a child play or fetches, and what follows is not known: priced from the play's history after a
   * fetch (which bills nothing itself); a child play's own cost has no bound here.
   */
  #unpriced(what: string, called: Set<string>): void {
    this.#unknownRemainder(called);
    if (what === "ctx.runPlay") this.#highExtraMicros = null;
    this.note(`rows call ${what} from their fields: what a child play costs, or what a field does after a fetch, is not estimated`);
  }

  async #playTool(toolId: string, input: unknown, options: ToolCallOptions | undefined): Promise<unknown> {
    try {
      return await this.#call(toolId, input, options, new Set());
    } catch (error) {
      if (error instanceof RowUnknown) throw new PlayStopped(`the play's own call of ${toolId} is new: what follows it is not estimated`);
      throw error;
    }
  }

  /** One `ctx.tool` call: reused from its receipt (its output returned), or a new billed request (the row stops there). */
  async #call(toolId: string, input: unknown, options: ToolCallOptions = {}, called: Set<string>): Promise<unknown> {
    const tool = this.#deps.tools.get(toolId);
    if (!tool) throw new Error(`unknown tool ${toolId}`);
    const parsed = tool.input.safeParse(input);
    if (!parsed.success) throw new Error(`invalid input for ${toolId}`);
    this.#calls[toolId] ??= { reused: 0, new: 0 };
    const counts = this.#calls[toolId];
    called.add(toolId);
    const fresh = () => {
      counts.new++;
      this.#knownMicros += toMicros(priceOf(tool, parsed.data));
      return new RowUnknown(toolId);
    };
    const scope = await this.#scopes.digest(tool);
    const key = await receiptKey({
      org: this.#deps.org,
      toolId,
      toolVersion: tool.version,
      input: parsed.data,
      authScope: scope,
    });
    // The same call in another row is billed once in a run (the others wait for its receipt, or reuse it; under a
    // refresh too, the run's own new receipt): priced once here. Its output is not known either way: the row stops there.
    const refresh = this.#deps.forceToolRefresh || options.force === true;
    const found = refresh ? null : await this.#lookup(key);
    // A result older than the call's `staleAfterSeconds` is called again (a run starting now finds it stale too).
    const staleBefore = staleBeforeOf(options.staleAfterSeconds, this.#deps.now());
    const stale = found !== null && found.state !== "new" && staleBefore !== undefined && found.boughtAt < staleBefore;
    const receipt = stale ? null : found;
    // A call whose outcome is unknown (it may have reached the provider) is sent again only under `retryUnknown`.
    const resend = receipt?.state === "unknown" && this.#deps.retryUnknown;
    if (receipt === null || receipt.state === "new" || resend) {
      // Checked after the lookup: rows of a wave look up at once.
      if (this.#newKeys.has(key)) throw new RowUnknown(toolId);
      this.#newKeys.add(key);
      throw fresh();
    }
    counts.reused++;
    // A failure the receipt remembers (an unknown outcome too) fails the row again, without a request.
    if (receipt.state === "failed" || receipt.state === "unknown") throw new Error(`${toolId} failed before`);
    return receipt.output;
  }

  /** Looks a receipt up together with every other lookup made in the same turn (one call per shard). */
  #lookup(key: string): Promise<PeekedReceipt> {
    return new Promise((resolve, reject) => {
      this.#lookups.push({ key, resolve, reject });
      this.#flush ??= setTimeout(() => void this.#sendLookups(), 0);
    });
  }

  async #sendLookups(): Promise<void> {
    const batch = this.#lookups;
    this.#lookups = [];
    this.#flush = null;
    try {
      const found = await this.#receipts.peek(batch.map((l) => l.key));
      for (const lookup of batch) lookup.resolve(found.get(lookup.key) ?? { key: lookup.key, state: "new" });
    } catch (error) {
      for (const lookup of batch) lookup.reject(new EstimateUnavailable(error));
    }
  }
}

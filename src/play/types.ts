/**
 * The play author's API: everything a play or a tool imports. Interfaces only;
 * the engine that implements them lives in `src/engine`.
 *
 * Plays are re-executed from the top whenever their coordinator restarts
 * (eviction, crash, redeploy, or a deliberate yield between invocations).
 * Every effect goes through `ctx` and is memoized durably, so a replay makes no
 * provider call it already made. Keep play code deterministic outside `ctx`:
 * no `Math.random()` or `Date.now()` deciding what to call.
 *
 * A map that yields ends the invocation by throwing through the play: when
 * you catch errors around `ctx` calls, rethrow those you do not recognise. A
 * wait or sleep that has not come, or a child play still running, does not
 * settle in the invocation, which ends there: a `catch` around it runs only
 * when it has failed (its timeout, the child's failure).
 */
import type { z } from "zod";

/** A row as plays see it: the input fields plus the fields computed so far. */
export type Row = Record<string, unknown>;

/** What a field function or a play may call while it runs. */
export interface ToolCaller {
  /**
   * A durable tool call. The first call with a given input is executed through
   * the provider and its result stored in a receipt; every later identical call
   * (in this run, a rerun, or another play of the org) returns the stored
   * result without paying again.
   *
   * @throws ToolCallError when the provider fails permanently (the row fails).
   * @example
   * const { email } = await ctx.tool("sim_find_email", { name: row.name, domain: row.domain });
   */
  tool<T = unknown>(toolId: string, input: unknown, options?: ToolCallOptions): Promise<T>;
  /**
   * Appends a line to the run's log (and event ledger). At play level a
   * replay does not append the lines the play already logged.
   */
  log(...args: unknown[]): void;
}

export interface ToolCallOptions {
  /** A stored result older than this is not reused: the call is made again. */
  staleAfterSeconds?: number;
  /** Re-execute the call even if a stored result exists (a deliberate re-bill). */
  force?: boolean;
  /**
   * How long to wait for the same call that another live run is executing
   * before taking it over (default: the runtime's `receiptWaitMs`). A call
   * whose owner is dead (its run ended, or moved to a newer attempt) is taken
   * over at once. A call another chunk of the same run is executing is
   * waited for until it ends, and so is any live owner's call of a tool with
   * `idempotent: false` (both would send it, and its provider would bill it
   * twice).
   */
  receiptWaitMs?: number;
}

/** Options of `ctx.runPlay`. */
export interface RunPlayOptions {
  /**
   * Tells apart calls of the same play with the same input. Without it they
   * are one child: a second identical call gets the first one's result.
   */
  key?: string;
  /**
   * Stop waiting after this long: the call throws `child_timeout`, and a
   * child this run started is cancelled (unless another call of this run,
   * the same call with another timeout or none, still waits on it).
   */
  timeoutMs?: number;
  /** A completed child that ended longer ago than this is not reused: a new one runs. */
  staleAfterSeconds?: number;
}

/** What a play and each of its rows may call besides tools: child plays and safe egress. */
export interface PlayCaller {
  /**
   * Runs another play as a child run (its own coordinator, listed by
   * `GET /v1/runs` with this run as `parentRunId`) and returns its result.
   * Durable: the child is identified by (play name, the play's code, its
   * input, `key`), so a replay, a retry or a rerun of this run never starts
   * it twice; a completed child is reused, a failed one runs again on a new
   * call. Limits: `maxPlayDepth` nesting, `maxChildrenPerRun` children.
   *
   * At play level the run is `waiting` while the child runs. Inside a field
   * function each row runs its own child (bounded concurrency); a row whose
   * child runs long makes its chunk yield until the child ends. A call the
   * play does not await still starts its child, and the run waits for it.
   *
   * @throws TerminalError `child_failed` / `child_cancelled` / `child_timeout`
   *   when the child did not complete; inside `ctx.map` the row fails. At play
   *   level the call does not settle while the child still runs (the run
   *   waits), so a `catch` that falls back runs only once it has not completed.
   * @example
   * const leads = await ctx.runPlay("demo-enrich", { rows }, { key: account.id });
   */
  runPlay<T = unknown>(play: string, input: unknown, options?: RunPlayOptions): Promise<T>;
  /**
   * `fetch` for plays: http(s) to public hosts only (loopback, private,
   * link-local and metadata addresses are refused, every redirect checked),
   * the org's `EGRESS_ALLOWLIST`, bounded request and response sizes, a
   * timeout. Secret header values never reach logs or errors. Not memoized:
   * a replay fetches again, so use it for idempotent reads; make billed or
   * changing calls tools.
   *
   * @throws EgressError with a code such as `egress_forbidden_address`.
   * @example
   * const page = await ctx.fetch("https://api.example.com/v1/company?domain=acme.com", { headers: { Authorization: `Bearer ${key}` } });
   */
  fetch(url: string | URL, init?: RequestInit): Promise<Response>;
}

/** Given to each field function: the row's identity, the tool caller, child plays and fetch. */
export interface RowContext extends ToolCaller, PlayCaller {
  readonly rowKey: string;
  /** Aborted when the run is cancelled or this attempt lost its lease. */
  readonly signal: AbortSignal;
}

/** One computed column: sees the input fields and every earlier field. */
export type FieldFn = (row: Row, ctx: RowContext) => unknown | Promise<unknown>;

/** Ordered: later fields see the values of earlier ones. */
export type FieldSet = Record<string, FieldFn>;

export interface MapOptions {
  /**
   * The row key: a field name of the input rows, or a function of the row.
   * Without it the key is a hash of the row's content plus its input index.
   * Rows with a duplicate explicit key are dropped (and counted).
   */
  key?: string | ((row: Row, index: number) => string);
  /**
   * `continue` (default): a failed row is persisted with its error and the map
   * goes on. `fail`: the first failed row stops dispatching and fails the run.
   */
  onRowError?: "continue" | "fail";
}

/** A persistent dataset as this run sees it: counts and paged reads, never all rows in memory. */
export interface DatasetHandle {
  readonly name: string;
  /** Rows of this run's input, after dropping duplicate keys. */
  readonly total: number;
  readonly completed: number;
  readonly failed: number;
  /** Input rows dropped because their explicit key repeated an earlier row's. */
  readonly duplicatesDropped: number;
  /** One page of rows in input order, each with `_key`, `_status`, `_error`. */
  rows(page?: { offset?: number; limit?: number }): Promise<Row[]>;
}

export interface PlayContext extends ToolCaller, PlayCaller {
  readonly runId: string;
  readonly org: string;
  /**
   * Waits for `POST /v1/runs/<runId>/signals/<eventKey>` and returns its
   * `data`. A signal sent before the wait began is kept for it; each signal
   * is taken by one wait. While it waits the run is `waiting` and costs
   * nothing (no invocation, no timer: one alarm at its earliest deadline).
   *
   * @throws TerminalError `event_timeout` when `timeoutMs` passes first. While
   * the signal is still to come the call does not settle (the run waits), so
   * a `catch` that falls back runs at the timeout only.
   * @example
   * const decision = await ctx.waitForEvent<{ ok: boolean }>("approve", { timeoutMs: 86_400_000 });
   */
  waitForEvent<T = unknown>(eventKey: string, options?: { timeoutMs?: number }): Promise<T>;
  /**
   * A durable sleep: the run is `waiting` and the coordinator's alarm wakes
   * it; an eviction or restart meanwhile changes nothing.
   *
   * @example
   * await ctx.sleep(60_000);
   */
  sleep(ms: number): Promise<void>;
  /**
   * Computes `fields` for every row into the persistent dataset `name`.
   * Rows completed by an earlier run are reused; failed rows run again.
   * `rows` is an array, or {@link UploadedRows} (a run whose input is an
   * upload): those are read from the upload chunk by chunk as they run.
   *
   * @example
   * const leads = await ctx.map("leads", input.rows, {
   *   email: async (row, c) => (await c.tool("sim_find_email", row)).email,
   * }, { key: "id" });
   */
  map(name: string, rows: MapRows, fields: FieldSet, options?: MapOptions): Promise<DatasetHandle>;
}

/**
 * A run's rows left in an upload (`"input": { "upload": "<id>" }` to a play
 * whose input is `rowsInput`): never read whole. `ctx.map` reads each chunk's
 * rows from the upload when it runs them, and checks each against the play's
 * row schema there: a row that does not fit fails alone, naming its line.
 */
export interface UploadedRows {
  readonly upload: string;
}

/** What `ctx.map` maps over: rows in hand, or rows still in an upload. */
export type MapRows = readonly Row[] | UploadedRows;

export interface PlayDefinition<Input = unknown, Result = unknown> {
  /** Unique, `[a-z0-9-]`, used in `POST /v1/runs`. */
  name: string;
  description: string;
  /**
   * Part of a child run's identity with the play's code: bump it to make
   * parents start this play afresh instead of reusing children that completed.
   */
  version?: string;
  /** Validates (and may transform) the run's input at submit time. */
  input: z.ZodType<Input, unknown>;
  /**
   * The datasets this play writes with `ctx.map`, so clients can find them
   * before the run starts: `GET /v1/plays` lists them and a run's
   * `links.datasets` names them. A map into a dataset not declared here still
   * works; it appears in the run's links once it has started.
   *
   * @example
   * datasets: ["leads"],
   */
  datasets?: readonly string[];
  run(ctx: PlayContext, input: Input): Promise<Result>;
}

/** The name of one of the Worker's bindings (a secret, a variable, an object namespace). */
export type ToolBinding = keyof Env;

/** The bindings a tool declared (`bindings`), and only those: a tool never sees the rest of the Worker's. */
export type ToolEnv<Bindings extends ToolBinding = never> = Readonly<Pick<Env, Bindings>>;

/** What a tool's `execute` receives besides its input. */
export interface ToolCall<Bindings extends ToolBinding = never> {
  /** Derived from the receipt key: send it to the provider so a retried call is billed once. */
  readonly idempotencyKey: string;
  /**
   * Aborted when the request runs past the runtime's provider timeout. A
   * cancelled run does not abort a request already sent: its result is billed,
   * so the engine still stores it in the receipt.
   */
  readonly signal: AbortSignal;
  /** The bindings the tool declared in `bindings` (provider credentials, the simulated provider), and no others. */
  readonly env: ToolEnv<Bindings>;
  /**
   * Digest of the credentials the call runs with (see `authScope`). A provider
   * that can tell the credentials changed should answer with the code
   * `auth_scope_changed` (`AUTH_SCOPE_CHANGED`).
   */
  readonly authScopeDigest: string;
  /**
   * Hands the provider's answer headers to the org's pacing, which reads
   * their rate-limit signals (`X-RateLimit-*`, `RateLimit-Policy` and
   * `RateLimit`): call it with a successful answer's headers, so pacing
   * learns the provider's quota and slows down before a 429. A failure's
   * headers travel on the thrown `ToolCallError` (`headers`).
   *
   * @example
   * const res = await call.fetch(url);
   * call.reportHeaders(res.headers);
   */
  reportHeaders(headers: HeadersInit): void;
  /**
   * `fetch` for the provider's API: send every request of the call with it.
   * It waits for one of the object's six outbound connections (under
   * emulated limits, as production does), is counted as the invocation's
   * subrequest as it goes out (and refused past the cap), and is aborted by
   * the call's `signal` unless `init.signal` says otherwise. A request sent
   * with the global `fetch` is counted only once it ends.
   */
  fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response>;
}

/**
 * A tool of any input and output, as the runtime holds them side by side (a
 * registry, a queue): each call's input is checked by the tool's own schema.
 */
// biome-ignore lint/suspicious/noExplicitAny: the one erased view of every tool; authors never see it.
export type AnyTool = ToolDefinition<any, any>;

/**
 * What a tool's `recover` answers: the provider holds a result for the key
 * (`found`), or it does not; `inFlight` when a request with the key is still
 * being answered (the engine asks again shortly).
 */
export type ToolRecovery<Output> = { found: true; output: Output } | { found: false; inFlight?: boolean };

/** What a batch `send` receives: each member carries its own idempotency key. */
export interface BatchCall<Bindings extends ToolBinding = never> {
  /** As {@link ToolCall.signal}: the provider timeout, never a cancel. */
  readonly signal: AbortSignal;
  /** As {@link ToolCall.env}. */
  readonly env: ToolEnv<Bindings>;
  /** As {@link ToolCall.reportHeaders}, for the batch request's answer. */
  reportHeaders(headers: HeadersInit): void;
  /** As {@link ToolCall.fetch}. */
  fetch(input: RequestInfo | URL, init?: RequestInit): Promise<Response>;
}

/** One member of a batch call. */
export interface BatchMember<Input> {
  readonly input: Input;
  /** The member's own key: the provider bills each member once. */
  readonly idempotencyKey: string;
}

/** One member's result, split out of a batch reply. */
export type BatchMemberResult<Output> =
  | { ok: true; output: Output }
  | { ok: false; error: { code: string; message: string; retryable: boolean } };

/**
 * How a tool batches: the engine queues a chunk's calls of the tool for a
 * short grace window, cuts them into batches of at most `maxMembers`, and
 * makes one provider request per batch (`compile` → `send` → `split`). The
 * request is paced and retried like one call; a failed request fails only
 * its own batch's members. A lone member goes through `execute` instead.
 *
 * @example
 * batch: {
 *   maxMembers: 50,
 *   compile: (members) => ({ members: members.map((m) => ({ idempotencyKey: m.idempotencyKey, input: m.input })) }),
 *   send: (payload, call) => post("/batch", payload, call.signal),
 *   split: (reply, members) => reply.results.map((r) => (r.status === 200 ? { ok: true, output: r.output } : { ok: false, error: { ...r.error, retryable: false } })),
 * }
 */
export interface ToolBatchStrategy<Input, Output, Payload = unknown, Reply = unknown, Bindings extends ToolBinding = never> {
  /** Most members one batch request may carry (the provider's limit). */
  maxMembers: number;
  /** Builds one provider request from the members, in order. */
  compile(members: readonly BatchMember<Input>[]): Payload;
  /** Sends one batch request. Throw `ToolCallError` to classify a failure of the whole batch. */
  send(payload: Payload, call: BatchCall<Bindings>): Promise<Reply>;
  /** Splits the provider's reply into exactly one result per member, in member order. */
  split(reply: Reply, members: readonly BatchMember<Input>[]): BatchMemberResult<Output>[];
}

export interface ToolDefinition<Input = unknown, Output = unknown, Bindings extends ToolBinding = ToolBinding> {
  /** Unique id, e.g. `sim_find_email`. */
  id: string;
  /** The provider it bills through (pacing and rate limits are per provider). */
  provider: string;
  /** Bump when the output for the same input changes: old receipts stop matching. */
  version: string;
  input: z.ZodType<Input, unknown>;
  /**
   * What one billed call costs, in credits (for a batchable tool: one billed
   * member): a constant, or a function of the call's validated input. The
   * price is reserved against the run's `maxSpend` before the call is sent and
   * counted when the provider answered it. Without it a call costs 0.
   *
   * @example
   * price: 1,
   * price: (input) => (input.deep ? 5 : 1),
   */
  price?: number | ((input: Input) => number);
  /**
   * Whether the provider honours idempotency keys (a repeated request with the
   * same key is answered, not executed and billed again). Default `true`. For
   * a provider that does not (`false`) and a tool without `recover`, a request
   * whose outcome is unknown (its attempt died after it may have been sent) is
   * never sent again silently: the row fails `outcome_unknown`, and a rerun
   * sends it again only with `retryUnknown: true`.
   */
  idempotent?: boolean;
  /**
   * Calls the provider. Throw `ToolCallError` with `retryable` to classify a
   * failure (with the answer's `status` and `headers`, which carry a 429's
   * `Retry-After` and the provider's limit); any other throw is treated as
   * permanent. Hand a successful answer's headers to `call.reportHeaders`.
   */
  /**
   * The Worker bindings the tool needs (its credentials, the simulated
   * provider's namespace): `call.env` and `authScope` receive these and no
   * others.
   *
   * @example
   * bindings: ["ACME_API_KEY"],
   */
  bindings?: readonly Bindings[];
  execute(input: Input, call: ToolCall<Bindings>): Promise<Output>;
  /** Makes the tool batchable (see {@link ToolBatchStrategy}). */
  batch?: ToolBatchStrategy<Input, Output, unknown, unknown, Bindings>;
  /**
   * Asks the provider, without billing, whether it already answered a request
   * under `idempotencyKey`. Called before re-executing a call whose receipt was
   * taken over from an attempt that died after it may have reached the
   * provider (a crash after the call, before its receipt was completed): a
   * found result is stored and returned instead of calling again. Without it
   * the call is re-sent with the same key, which a provider should replay.
   *
   * @example
   * recover: async (key, call) => {
   *   const res = await call.fetch(`https://api.example.com/results/${key}`);
   *   call.reportHeaders(res.headers); // its rate-limit headers pace the provider, as a call's do
   *   return res.status === 404 ? { found: false } : { found: true, output: await res.json() };
   * }
   */
  recover?(idempotencyKey: string, call: ToolCall<Bindings> & { readonly input: Input }): Promise<ToolRecovery<Output>>;
  /**
   * Names the credentials the tool runs with (an account id, a key's
   * fingerprint; never needs to be secret, it is digested). Its digest is part
   * of every receipt key, so new credentials mean new receipts. Without it the
   * scope is `"default"`. Resolved once per invocation and again when the
   * provider answers `auth_scope_changed`.
   */
  authScope?(env: ToolEnv<Bindings>): string | Promise<string>;
  /**
   * Says whether a failure `execute` or `batch.send` threw is the provider's
   * own way of saying "slow down" (Hunter, for one, answers 403 when rate
   * limited). A failure it accepts is handled as a 429: retried under the
   * same idempotency key after the wait its headers ask for, reported to the
   * org's pacing, and counted in the run's `usage.rateLimited`. Without the
   * hook a failure is a rate limit only as `ToolCallError` describes.
   *
   * @example
   * isRateLimit: (error) => error instanceof ToolCallError && error.status === 403 && error.code === "too_many_requests",
   */
  isRateLimit?(error: unknown): boolean;
}
